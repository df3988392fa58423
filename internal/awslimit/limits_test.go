// Tests of the EC2 limits and the retryer, through the real SDK client against our EC2 server.
package awslimit

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

func newEC2(t *testing.T, opts ...func(*ec2.Options)) (*ec2.Client, *ec2server.Server) {
	t.Helper()
	srv := ec2server.New(ec2server.Options{PendingDelay: -1, ShuttingDownDelay: -1})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}
	opts = append([]func(*ec2.Options){func(o *ec2.Options) { o.BaseEndpoint = aws.String(hs.URL) }}, opts...)
	return ec2.NewFromConfig(cfg, opts...), srv
}

func TestFamily(t *testing.T) {
	t.Parallel()
	l := Default()
	for op, want := range map[string]string{
		"DescribeInstances":     FamilyNonMutating,
		"DescribeInstanceTypes": FamilyNonMutating,
		"GetConsoleOutput":      FamilyNonMutating,
		"CreateFleet":           FamilyMutating,
		"TerminateInstances":    FamilyMutating,
		"StartInstances":        FamilyMutating,
		"CreateTags":            FamilyMutating,
		"DeleteTags":            FamilyMutating,
		"RunInstances":          FamilyResourceIntensive,
	} {
		if got := l.Family(op); got != want {
			t.Errorf("Family(%s) = %q, want %q", op, got, want)
		}
	}
}

func TestNewRejectsBadBuckets(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*Config){
		"zero burst":        func(c *Config) { c.Families[FamilyMutating] = Bucket{Burst: 0, RefillPerSecond: 1} },
		"zero refill":       func(c *Config) { c.Resources[ResourceLaunched] = Bucket{Burst: 10} },
		"missing family":    func(c *Config) { delete(c.Families, FamilyNonMutating) },
		"unknown op family": func(c *Config) { c.Operations["CreateFleet"] = "nope" },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			mutate(&cfg)
			if _, err := New(cfg); err == nil {
				t.Fatal("New accepted a bad config")
			}
		})
	}
}

// With 30% of calls throttled by the server, every call still succeeds: the retryer backs off on
// RequestLimitExceeded, and every attempt (retries included) passes through the limiter.
func TestThrottledCallsSucceed(t *testing.T) {
	t.Parallel()
	l := Default()
	counter := NewCounter()
	client, srv := newEC2(t, WithEC2LimitsRetry(l, RetryOptions{MaxAttempts: 12, MaxBackoff: 20 * time.Millisecond}),
		func(o *ec2.Options) { o.APIOptions = append(o.APIOptions, counter.AddMiddleware) })
	srv.SetThrottle(0.3)
	ctx := t.Context()

	const calls = 40
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			_, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("DescribeInstances under 30%% throttling: %v", err)
		}
	}
	attempts := srv.Calls()["DescribeInstances"]
	if attempts <= calls {
		t.Errorf("server saw %d DescribeInstances for %d calls: expected retries of throttled attempts", attempts, calls)
	}
	if got := l.Stats()[FamilyNonMutating].Requests; got != int64(attempts) {
		t.Errorf("non-mutating limiter saw %d requests, server %d attempts: every attempt must pass the limiter", got, attempts)
	}
	if got := counter.Counts()["EC2.DescribeInstances"]; got != attempts {
		t.Errorf("counter: %d EC2.DescribeInstances, server %d", got, attempts)
	}
}

// A limiter with a tiny bucket delays calls instead of sending them; the delay shows in its
// counters, and resource buckets are charged per instance.
func TestTinyBucketDelays(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	// Refills slow enough that a round trip on a loaded machine never outlasts one (at 100 a second a
	// 10 ms round trip refilled the bucket and nothing was delayed); about a second in all.
	cfg.Families[FamilyNonMutating] = Bucket{Burst: 1, RefillPerSecond: 5}
	cfg.Families[FamilyResourceIntensive] = Bucket{Burst: 1, RefillPerSecond: 5}
	cfg.Resources[ResourceLaunched] = Bucket{Burst: 2, RefillPerSecond: 5}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, srv := newEC2(t, WithEC2Limits(l))
	ctx := t.Context()
	for range 5 {
		if _, err := client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats()[FamilyNonMutating]
	if st.Requests != 5 || st.Delayed < 3 {
		t.Errorf("non-mutating stats %+v: want 5 requests, at least 3 delayed (burst 1)", st)
	}

	// Launches: 3 RunInstances of 2 instances each against a resource bucket of 2.
	lt, err := client.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("limits"),
		LaunchTemplateData: &types.RequestLaunchTemplateData{ImageId: aws.String("ami-12345678"), InstanceType: types.InstanceTypeC6iLarge},
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err := client.RunInstances(ctx, &ec2.RunInstancesInput{
			MinCount: aws.Int32(2), MaxCount: aws.Int32(2),
			LaunchTemplate: &types.LaunchTemplateSpecification{LaunchTemplateId: lt.LaunchTemplate.LaunchTemplateId},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	res := l.Stats()[ResourceLaunched]
	if res.Requests != 3 || res.Tokens != 6 || res.Delayed < 2 {
		t.Errorf("launch resource stats %+v: want 3 requests, 6 tokens, at least 2 delayed", res)
	}
	if got := l.Stats()[FamilyResourceIntensive].Requests; got != 3 {
		t.Errorf("RunInstances drew %d resource-intensive request tokens, want 3", got)
	}
	if got := l.Stats()[FamilyMutating].Requests; got != 1 {
		t.Errorf("CreateLaunchTemplate drew %d mutating tokens, want 1", got)
	}
	if n := len(srv.Instances()); n != 6 {
		t.Errorf("server has %d instances, want 6", n)
	}
}

// A call waiting for a token gives up when its context ends, without reaching the server.
func TestWaitHonoursContext(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Families[FamilyMutating] = Bucket{Burst: 1, RefillPerSecond: 0.001}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, srv := newEC2(t, WithEC2Limits(l))
	tag := func(ctx context.Context) error {
		_, err := client.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{"i-0123456789abcdef0"},
			Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
		return err
	}
	// The first call takes the only token (and fails in the server: no such instance).
	var ae smithy.APIError
	if err := tag(t.Context()); !errors.As(err, &ae) {
		t.Fatalf("first CreateTags: want an API error from the server, got %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := tag(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second CreateTags: want the deadline while waiting for a token, got %v", err)
	}
	if st := l.Stats()[FamilyMutating]; st.Requests != 2 || st.Delayed != 1 {
		t.Errorf("mutating stats %+v: want 2 requests, 1 delayed", st)
	}
	if got := srv.Calls()["CreateTags"]; got != 1 {
		t.Errorf("server saw %d CreateTags, want 1 (the second waited and gave up)", got)
	}
}

func TestRetryerTreatsRequestLimitExceededAsThrottle(t *testing.T) {
	t.Parallel()
	r := NewRetryer(RetryOptions{})
	if r.MaxAttempts() != DefaultMaxAttempts {
		t.Errorf("MaxAttempts = %d, want %d", r.MaxAttempts(), DefaultMaxAttempts)
	}
	err := &smithy.GenericAPIError{Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
	if !r.IsErrorRetryable(err) {
		t.Error("RequestLimitExceeded is not retryable")
	}
	if d, _ := r.RetryDelay(30, err); d > DefaultMaxBackoff {
		t.Errorf("RetryDelay(30) = %v, above the maximum backoff %v", d, DefaultMaxBackoff)
	}
}

// EC2 evaluates each API individually: a burst of one mutating action (TerminateInstances here,
// CreateFleet in a cold burst) empties that action's bucket, not CreateTags', so the claim notices
// of a burst of reuses are not paced by the launches and terminations before them.
func TestEachAPIHasItsOwnBucket(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Families[FamilyMutating] = Bucket{Burst: 2, RefillPerSecond: 0.001}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := newEC2(t, WithEC2Limits(l))
	ctx := t.Context()
	for range 2 { // empties TerminateInstances' bucket (the calls fail in the server: no such instance)
		_, _ = client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}})
	}
	// CreateTags still has its whole bucket: neither call waits (a wait would last 1,000 s).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for range 2 {
		_, err := client.CreateTags(wctx, &ec2.CreateTagsInput{Resources: []string{"i-0123456789abcdef0"},
			Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("CreateTags waited for a token TerminateInstances spent")
		}
	}
	st := l.Stats()
	if st["CreateTags"].Delayed != 0 || st["CreateTags"].Requests != 2 || st["TerminateInstances"].Requests != 2 {
		t.Errorf("per-operation stats %+v / %+v: want 2 requests each, CreateTags never delayed", st["CreateTags"], st["TerminateInstances"])
	}
	if got := st[FamilyMutating].Requests; got != 4 {
		t.Errorf("mutating family sums %d requests, want 4", got)
	}
	// A third TerminateInstances must wait: its own bucket is empty.
	tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer tcancel()
	if _, err := client.TerminateInstances(tctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("third TerminateInstances: want a wait for its own empty bucket, got %v", err)
	}
}
