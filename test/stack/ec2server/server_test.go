// server_test.go: shared test helpers (a server on 127.0.0.1 driven by the real SDK client with
// fast retries) and the server-level tests: throttling, injected failures, latency, call
// counting, idempotency and the fake clock.
package ec2server

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// testDelays keep the state machine fast enough for the whole suite to run in seconds.
func withTestDelays(o Options) Options {
	if o.PendingDelay == 0 {
		o.PendingDelay = 30 * time.Millisecond
	}
	if o.StoppingDelay == 0 {
		o.StoppingDelay = 30 * time.Millisecond
	}
	if o.ShuttingDownDelay == 0 {
		o.ShuttingDownDelay = 30 * time.Millisecond
	}
	return o
}

// newTestServer starts a Server behind httptest (127.0.0.1) and returns an SDK client for it.
func newTestServer(t testing.TB, opts Options) (*Server, *ec2.Client, string) {
	t.Helper()
	s := New(withTestDelays(opts))
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return s, newClient(hs.URL), hs.URL
}

// newClient is the real SDK client with static credentials and the standard retryer, its
// backoff shortened so retries do not slow the tests.
func newClient(url string, optFns ...func(*ec2.Options)) *ec2.Client {
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 10
				o.MaxBackoff = 5 * time.Millisecond
				o.RateLimiter = ratelimit.None
			})
		},
	}
	fns := append([]func(*ec2.Options){func(o *ec2.Options) { o.BaseEndpoint = aws.String(url) }}, optFns...)
	return ec2.NewFromConfig(cfg, fns...)
}

// apiCode returns the AWS error code of err, or "" when err is not an API error.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func runOne(t *testing.T, ctx context.Context, c *ec2.Client, in *ec2.RunInstancesInput) types.Instance {
	t.Helper()
	if in == nil {
		in = &ec2.RunInstancesInput{ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: types.InstanceTypeT3Micro}
	}
	in.MinCount, in.MaxCount = aws.Int32(1), aws.Int32(1)
	out, err := c.RunInstances(ctx, in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	if len(out.Instances) != 1 {
		t.Fatalf("RunInstances launched %d instances, want 1", len(out.Instances))
	}
	return out.Instances[0]
}

func waitRunning(t *testing.T, ctx context.Context, c *ec2.Client, ids ...string) {
	t.Helper()
	w := ec2.NewInstanceRunningWaiter(c, func(o *ec2.InstanceRunningWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 50*time.Millisecond
	})
	if err := w.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, 5*time.Second); err != nil {
		t.Fatalf("waiting for running: %v", err)
	}
}

func TestThrottleIsRetriedBySDK(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	s.SetThrottle(0.5)
	const n = 30
	for i := range n {
		if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// The first call passes; from then on every other attempt is refused and retried once.
	if got := s.Calls()["DescribeInstances"]; got != 2*n-1 {
		t.Errorf("Calls()[DescribeInstances] = %d, want %d (every other attempt throttled and retried)", got, 2*n-1)
	}

	// With retries off the throttling surfaces as RequestLimitExceeded.
	s.SetThrottle(1)
	_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}, func(o *ec2.Options) { o.RetryMaxAttempts = 1 })
	if apiCode(err) != "RequestLimitExceeded" {
		t.Fatalf("err = %v, want RequestLimitExceeded", err)
	}
	s.SetThrottle(0)
	s.ResetCalls()
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	if got := s.Calls(); got["DescribeInstances"] != 1 || len(got) != 1 {
		t.Errorf("Calls() after reset = %v, want only DescribeInstances:1", got)
	}
}

func TestSetFailNext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	noRetry := func(o *ec2.Options) { o.RetryMaxAttempts = 1 }

	tests := []struct {
		name, code string
		status     int
		retry      bool
		wantErr    string
		wantCalls  int
	}{
		{name: "client error is not retried", code: "UnauthorizedOperation", status: 403, retry: true, wantErr: "UnauthorizedOperation", wantCalls: 1},
		{name: "server error without retries", code: "InternalError", status: 500, retry: false, wantErr: "InternalError", wantCalls: 1},
		{name: "server error retried by the SDK", code: "InternalError", status: 500, retry: true, wantCalls: 2},
		{name: "default status is 400", code: "InvalidParameterValue", retry: true, wantErr: "InvalidParameterValue", wantCalls: 1},
	}
	for _, tt := range tests { // sequential: they share the server's call counts
		t.Run(tt.name, func(t *testing.T) {
			s.ResetCalls()
			s.SetFailNext("DescribeInstanceTypes", tt.code, tt.status)
			var opt []func(*ec2.Options)
			if !tt.retry {
				opt = append(opt, noRetry)
			}
			_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{}, opt...)
			if apiCode(err) != tt.wantErr {
				t.Errorf("err = %v, want code %q", err, tt.wantErr)
			}
			got := s.Calls()["DescribeInstanceTypes"]
			// A retried error may take one more attempt than the one injected failure needs: in about
			// 1 run of 20 the retry's 200 answer fails to decode with "use of closed network
			// connection" (the connection the SDK reused after the 500 is closed under it), which the
			// SDK retries too since aws-sdk-go-v2#2949 (net.ErrClosed is retryable; issues #1825,
			// #2737); 1 run in 1,000 saw it twice. What the case shows is that the SDK retried, and the call
			// succeeded.
			if got != tt.wantCalls && !(tt.retry && tt.wantErr == "" && got > tt.wantCalls) {
				t.Errorf("calls = %d, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestSetLatency(t *testing.T) {
	t.Parallel()
	s, c, _ := newTestServer(t, Options{})
	s.SetLatency(100 * time.Millisecond)
	start := time.Now()
	if _, err := c.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("call took %v, want at least 100ms", d)
	}
}

// TestClientTokenIdempotency: a retried RunInstances with the same ClientToken must not launch
// twice; the SDK relies on it when it retries a call whose answer it lost.
func TestClientTokenIdempotency(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, c, _ := newTestServer(t, Options{})
	in := &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"), InstanceType: types.InstanceTypeT3Micro,
		MinCount: aws.Int32(2), MaxCount: aws.Int32(2), ClientToken: aws.String("token-1")}
	a, err := c.RunInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.RunInstances(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if *a.Instances[0].InstanceId != *b.Instances[0].InstanceId || len(s.Instances()) != 2 {
		t.Errorf("same ClientToken launched again: %s vs %s, %d instances", *a.Instances[0].InstanceId, *b.Instances[0].InstanceId, len(s.Instances()))
	}
	// The same token with other parameters is refused, as EC2 does, not answered with the first
	// call's instances.
	other := *in
	other.InstanceType = types.InstanceTypeC6iLarge
	var ae smithy.APIError
	if _, err := c.RunInstances(ctx, &other); !errors.As(err, &ae) || ae.ErrorCode() != "IdempotentParameterMismatch" {
		t.Errorf("same ClientToken, other parameters: %v, want IdempotentParameterMismatch", err)
	}
	if n := len(s.Instances()); n != 2 {
		t.Errorf("%d instances after the mismatched call, want 2", n)
	}
}

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// TestFakeClockDrivesStates: with an injected clock, states change only when the clock moves,
// and a waiter sees the change on its next read.
func TestFakeClockDrivesStates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, c, _ := newTestServer(t, Options{Now: clock.Now, PendingDelay: time.Minute, ShuttingDownDelay: time.Minute, TerminatedRetention: time.Hour})
	inst := runOne(t, ctx, c, nil)
	id := *inst.InstanceId
	if !inst.LaunchTime.Equal(clock.Now()) {
		t.Errorf("LaunchTime = %v, want the fake clock's %v", inst.LaunchTime, clock.Now())
	}
	time.Sleep(50 * time.Millisecond) // several ticks: nothing may happen without the clock
	if v, _ := s.Instance(id); v.State != statePending {
		t.Fatalf("state = %s before the clock moved, want pending", v.State)
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		clock.Advance(time.Minute)
	}()
	waitRunning(t, ctx, c, id)

	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if v, _ := s.Instance(id); v.State != stateTerminated {
		t.Fatalf("state = %s, want terminated", v.State)
	}
	clock.Advance(time.Hour)
	if _, ok := s.Instance(id); ok {
		t.Error("terminated instance still visible after TerminatedRetention")
	}
	_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if apiCode(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("describe after retention: err = %v, want InvalidInstanceID.NotFound", err)
	}
}

// TestHandlerPanic: a panicking handler answers InternalError and leaves the server usable
// (the lock is released).
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	s, c, _ := newTestServer(t, Options{})
	boom := func(*Server, *params) (response, *apiError) { panic("boom") }
	_, err := s.invoke("Boom", boom, newParams(nil), "req-1", "", "")
	if err == nil || err.Status != 500 || err.Code != "InternalError" {
		t.Fatalf("invoke of a panicking handler = %v, want a 500 InternalError", err)
	}
	if _, err := c.DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("server unusable after a panic: %v", err)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	s.Close()
	s.Close()
}

func BenchmarkRunDescribeTerminate(b *testing.B) {
	ctx := b.Context()
	s, c, _ := newTestServer(b, Options{PendingDelay: -1, ShuttingDownDelay: -1})
	for b.Loop() {
		out, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-12345678"),
			InstanceType: types.InstanceTypeC6iLarge, MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
		if err != nil {
			b.Fatal(err)
		}
		id := *out.Instances[0].InstanceId
		if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.Calls()["DescribeInstances"])/float64(b.N), "describes/op")
}
