// Tests of the batched claim notice, through the real SDK client against our EC2 server (which,
// like EC2, refuses a whole CreateTags request when one of its resources does not exist).
package wake_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

func newEC2(t *testing.T) (*ec2.Client, *ec2server.Server) {
	t.Helper()
	srv := ec2server.New(ec2server.Options{PendingDelay: -1, ShuttingDownDelay: -1})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")}
	return ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(hs.URL) }), srv
}

func launch(t *testing.T, c *ec2.Client, n int) []string {
	t.Helper()
	out, err := c.RunInstances(t.Context(), &ec2.RunInstancesInput{ImageId: aws.String("ami-0123456789abcdef0"),
		InstanceType: types.InstanceTypeC6iLarge, MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n))})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range out.Instances {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	return ids
}

// gated holds its first CreateTags until open is closed, so that the notices of a burst pile up
// behind a request in flight, as they do behind a slow or throttled one.
type gated struct {
	*ec2.Client
	first sync.Once
	open  chan struct{}
}

func (g *gated) CreateTags(ctx context.Context, in *ec2.CreateTagsInput, opts ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error) {
	g.first.Do(func() { <-g.open })
	return g.Client.CreateTags(ctx, in, opts...)
}

// A burst of notices behind one request in flight costs one more request, not one each, and every
// instance's tag changes.
func TestNoticesPileUpBehindARequestInFlight(t *testing.T) {
	t.Parallel()
	c, srv := newEC2(t)
	ids := launch(t, c, 50)
	g := &gated{Client: c, open: make(chan struct{})}

	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = wake.Notify(t.Context(), g, id) })
	}
	for deadline := time.Now().Add(10 * time.Second); wake.StatsOf(g).Notices < int64(len(ids)); {
		if time.Now().After(deadline) {
			t.Fatalf("only %d notices arrived", wake.StatsOf(g).Notices)
		}
		time.Sleep(time.Millisecond)
	}
	close(g.open)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	if got := srv.Calls()["CreateTags"]; got != 2 {
		t.Errorf("%d CreateTags for %d notices behind one request in flight, want 2 (the first, then the rest together)", got, len(ids))
	}
	if st := wake.StatsOf(g); st.Requests != 2 || st.Notices != int64(len(ids)) {
		t.Errorf("stats %+v, want 2 requests for %d notices", st, len(ids))
	}
	for _, id := range ids {
		if v, _ := srv.Instance(id); v.Tags[wake.TagKey] == "" {
			t.Errorf("instance %s has no wake tag", id)
		}
	}

	// A later notice of the same instance is a change the agent sees.
	before, _ := srv.Instance(ids[0])
	if err := wake.Notify(t.Context(), g, ids[0]); err != nil {
		t.Fatal(err)
	}
	if after, _ := srv.Instance(ids[0]); after.Tags[wake.TagKey] == before.Tags[wake.TagKey] {
		t.Errorf("second notice left the tag at %q: the agent would not wake", after.Tags[wake.TagKey])
	}
}

// EC2 refuses a whole CreateTags for one instance that does not exist (terminated meanwhile): the
// others in the batch are still woken, and only the caller of the bad one hears an error.
func TestOneBadInstanceDoesNotSinkTheBatch(t *testing.T) {
	t.Parallel()
	c, srv := newEC2(t)
	ids := launch(t, c, 3)
	g := &gated{Client: c, open: make(chan struct{})}
	const missing = "i-0000000000000dead"
	all := append([]string{ids[0], missing}, ids[1:]...)

	errs := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range all {
		wg.Go(func() {
			err := wake.Notify(t.Context(), g, id)
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		})
	}
	for wake.StatsOf(g).Notices < int64(len(all)) {
		time.Sleep(time.Millisecond)
	}
	close(g.open)
	wg.Wait()
	for _, id := range ids {
		if errs[id] != nil {
			t.Errorf("Notify %s: %v", id, errs[id])
		}
		if v, _ := srv.Instance(id); v.Tags[wake.TagKey] == "" {
			t.Errorf("instance %s was not woken", id)
		}
	}
	if err := errs[missing]; err == nil || !strings.Contains(err.Error(), "InvalidInstanceID.NotFound") {
		t.Errorf("Notify of a missing instance: %v, want EC2's InvalidInstanceID.NotFound", err)
	}
}

// Under throttling (RequestLimitExceeded on every call) a failed batch is not split into one request
// per instance, which would only spend more of the throttled bucket: the notices of a burst cost
// two requests, and every caller hears the throttling error.
func TestThrottledBatchIsNotSplit(t *testing.T) {
	t.Parallel()
	c, srv := newEC2(t)
	ids := launch(t, c, 20)
	srv.SetThrottle(1)
	once := ec2.New(c.Options(), func(o *ec2.Options) { o.RetryMaxAttempts = 1 }) // the SDK's retries are beside the point
	g := &gated{Client: once, open: make(chan struct{})}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = wake.Notify(t.Context(), g, id) })
	}
	for wake.StatsOf(g).Notices < int64(len(ids)) {
		time.Sleep(time.Millisecond)
	}
	close(g.open)
	wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "RequestLimitExceeded") {
			t.Errorf("Notify %s under throttling: %v, want RequestLimitExceeded", ids[i], err)
		}
	}
	if st := wake.StatsOf(g); st.Requests != 2 {
		t.Errorf("%d CreateTags requests for %d throttled notices, want 2 (the first, then the rest together)", st.Requests, len(ids))
	}
}

// A caller whose context ends stops waiting; the notice is still sent for the others.
func TestNotifyHonoursItsContext(t *testing.T) {
	t.Parallel()
	c, srv := newEC2(t)
	ids := launch(t, c, 1)
	g := &gated{Client: c, open: make(chan struct{})}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := wake.Notify(ctx, g, ids[0]); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Notify with an ended context: %v, want the deadline", err)
	}
	close(g.open)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if v, _ := srv.Instance(ids[0]); v.Tags[wake.TagKey] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the notice was never sent")
		}
	}
}
