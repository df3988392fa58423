package sandbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

var runSeq atomic.Int64

func start(t *testing.T, o sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	if o.Root == "" {
		o.Root = t.TempDir()
	}
	if testing.Verbose() {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	sb, err := sandbox.Start(t.Context(), o)
	if err != nil {
		t.Fatalf("starting the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func request(runID string) provision.Request {
	return provision.Request{
		RepositoryID: "4242", Repository: sandbox.Scope, RunID: runID, Attempt: 1, Count: 1,
		UsageClass: "on-demand", InstanceTypes: []string{"c*", "m*"}, ResourceClass: "small",
	}
}

func newRun() string { return strconv.FormatInt(7000+runSeq.Add(1), 10) }

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runJob queues a job for the run attempt's label ("<run id>-<attempt>") in the GitHub fake and
// waits until a runner finished it.
func runJob(t *testing.T, sb *sandbox.Sandbox, label string) githubfake.Job {
	t.Helper()
	return waitJob(t, sb, queueJob(sb, label))
}

// queueJob queues a job with runs-on the run attempt's label.
func queueJob(sb *sandbox.Sandbox, label string) int64 {
	runID, _, _ := strings.Cut(label, "-")
	n, _ := strconv.ParseInt(runID, 10, 64)
	return sb.Stack.GitHub.QueueJob("acme", "app", n, []string{label})
}

// waitJob waits until a runner finished the job.
func waitJob(t *testing.T, sb *sandbox.Sandbox, id int64) githubfake.Job {
	t.Helper()
	var job githubfake.Job
	waitFor(t, fmt.Sprintf("job %d to complete", id), 30*time.Second, func() bool {
		job, _ = sb.Stack.GitHub.Job(id)
		return job.Status == githubfake.JobCompleted
	})
	return job
}

func record(t *testing.T, sb *sandbox.Sandbox, id string) store.Instance {
	t.Helper()
	in, err := sb.Store.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("reading %s: %v", id, err)
	}
	return in
}

func ec2State(sb *sandbox.Sandbox, id string) string {
	v, _ := sb.Stack.EC2.Instance(id)
	return v.State
}

func gone(state string) bool { return state == "shutting-down" || state == "terminated" }

// poolMessages counts the messages of the sandbox's pool: its class queue and its scope queues.
func poolMessages(t *testing.T, sb *sandbox.Sandbox) int {
	t.Helper()
	scoped, err := pool.ListScopeQueues(t.Context(), sb.Stack.SQS(), sb.Queue.URL())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, url := range append([]string{sb.Queue.URL()}, scoped...) {
		out, err := sb.Stack.SQS().GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessagesNotVisible"},
		})
		if err != nil {
			t.Fatalf("queue attributes: %v", err)
		}
		for _, v := range out.Attributes {
			n, _ := strconv.Atoi(v)
			total += n
		}
	}
	return total
}

func runnerLabels(sb *sandbox.Sandbox, instanceID string) []string {
	for _, r := range sb.Stack.GitHub.Runners("acme", "app") {
		if r.Name == "runnerpool-"+instanceID {
			return r.Labels
		}
	}
	return nil
}

// TestLifecycle walks one instance through its whole life with the real agent on it: created for
// a run, registered, a job run, released into the pool, claimed by a second run and registered with
// that run's label, released again, its idle threshold passed, terminated by refresh.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	sb := start(t, sandbox.Options{})
	cp := sb.Components(sandbox.ComponentOptions{})
	ctx := t.Context()

	runA := newRun()
	resA, err := cp.Provisioner.Provision(ctx, request(runA))
	if err != nil {
		t.Fatalf("provision A: %v (%+v)", err, resA)
	}
	if len(resA.Runners) != 1 || resA.Runners[0].Source != "created" || resA.Label != runA+"-1" {
		t.Fatalf("provision A = %+v, want one created runner labelled %s", resA, runA)
	}
	id := resA.Runners[0].InstanceID
	if rec := record(t, sb, id); rec.State != store.StateRunning || rec.RunID != resA.RunKey {
		t.Fatalf("after provision A: %s for %q, want running for %s", rec.State, rec.RunID, resA.RunKey)
	}
	if labels := runnerLabels(sb, id); !slices.Contains(labels, resA.Label) {
		t.Fatalf("runner of %s has labels %v, want %s", id, labels, resA.Label)
	}
	if job := runJob(t, sb, resA.Label); job.RunnerName != "runnerpool-"+id {
		t.Errorf("job of A ran on %q, want runnerpool-%s", job.RunnerName, id)
	}

	rep, err := cp.Releaser.Release(ctx, resA.RunKey, 10*time.Minute)
	if err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release A = %+v, %v; want one pooled", rep, err)
	}
	if rec := record(t, sb, id); rec.State != store.StateIdle || rec.RunID != "" {
		t.Fatalf("after release A: %s for %q, want idle with no run", rec.State, rec.RunID)
	}
	if labels := runnerLabels(sb, id); labels != nil {
		t.Errorf("runner of %s still registered after release (labels %v)", id, labels)
	}
	if n := poolMessages(t, sb); n != 1 {
		t.Errorf("pool holds %d messages, want 1", n)
	}
	if again, err := cp.Releaser.Release(ctx, resA.RunKey, 10*time.Minute); err != nil || again.Message != release.NothingToRelease {
		t.Errorf("second release of A = %+v, %v; want %q", again, err, release.NothingToRelease)
	}

	runB := newRun()
	resB, err := cp.Provisioner.Provision(ctx, request(runB))
	if err != nil {
		t.Fatalf("provision B: %v (%+v)", err, resB)
	}
	if len(resB.Runners) != 1 || resB.Runners[0].InstanceID != id || resB.Runners[0].Source != "reused" {
		t.Fatalf("provision B = %+v, want %s reused", resB, id)
	}
	labels := runnerLabels(sb, id)
	if !slices.Contains(labels, resB.Label) || slices.Contains(labels, resA.Label) {
		t.Fatalf("runner labels after claim by B = %v, want %s and not %s", labels, resB.Label, resA.Label)
	}
	runJob(t, sb, resB.Label)

	if rep, err := cp.Releaser.Release(ctx, resB.RunKey, 2*time.Second); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release B = %+v, %v", rep, err)
	}
	// The idle threshold passes; refresh terminates the instance and closes its record. (The agent
	// would terminate itself a grace period later; refresh acts first.)
	idleUntil := record(t, sb, id).Threshold
	time.Sleep(time.Until(idleUntil) + 100*time.Millisecond)
	ref, err := cp.Refresher.Run(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if !slices.Contains(ref.Expiry.Terminated, id) {
		t.Errorf("refresh terminated %v, want %s", ref.Expiry.Terminated, id)
	}
	if rec := record(t, sb, id); rec.State != store.StateTerminated {
		t.Errorf("record after refresh = %s, want terminated", rec.State)
	}
	waitFor(t, "EC2 to terminate "+id, 10*time.Second, func() bool { return gone(ec2State(sb, id)) })
	if rep, err := cp.Refresher.Run(ctx); err != nil || rep.Changed() {
		t.Errorf("a second refresh pass changed something: %+v, %v", rep, err)
	}
}

// TestInstanceTerminatesItselfWithoutRefresh: the same life with refresh never running; past its
// idle threshold plus the grace period the instance terminates itself.
func TestInstanceTerminatesItselfWithoutRefresh(t *testing.T) {
	t.Parallel()
	sb := start(t, sandbox.Options{Grace: time.Second})
	cp := sb.Components(sandbox.ComponentOptions{})
	ctx := t.Context()
	res, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	id := res.Runners[0].InstanceID
	runJob(t, sb, res.Label)
	// The idle time counts from the release's start, so it must outlast the release itself (the
	// agent's clean-up and deregistration), or the instance is expired instead of pooled: 1 s did
	// not on a loaded machine.
	if rep, err := cp.Releaser.Release(ctx, res.RunKey, 5*time.Second); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release = %+v, %v", rep, err)
	}
	waitFor(t, id+" to terminate itself", 60*time.Second, func() bool { return gone(ec2State(sb, id)) })
	if rec := record(t, sb, id); rec.State != store.StateIdle {
		t.Errorf("record = %s; only the instance acted, the record stays until refresh", rec.State)
	}
}

// TestAgentKilledDuringRelease: the agent dies before it can deregister; release times out and
// expires the record instead of pooling it; refresh terminates the instance.
func TestAgentKilledDuringRelease(t *testing.T) {
	t.Parallel()
	sb := start(t, sandbox.Options{})
	cp := sb.Components(sandbox.ComponentOptions{ReleaseWait: 3 * time.Second})
	ctx := t.Context()
	res, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	id := res.Runners[0].InstanceID
	if !sb.KillAgent(id) {
		t.Fatalf("no agent running on %s", id)
	}
	rep, err := cp.Releaser.Release(ctx, res.RunKey, 10*time.Minute)
	if rep.Count(release.Expired) != 1 {
		t.Fatalf("release = %+v, %v; want the instance expired", rep, err)
	}
	if n := poolMessages(t, sb); n != 0 {
		t.Errorf("pool holds %d messages, want none: an unconfirmed instance never enters the pool", n)
	}
	ref, err := cp.Refresher.Run(ctx)
	if err != nil || !slices.Contains(ref.Expiry.Terminated, id) {
		t.Fatalf("refresh = %+v, %v; want %s terminated", ref.Expiry, err, id)
	}
	if rec := record(t, sb, id); rec.State != store.StateTerminated {
		t.Errorf("record = %s, want terminated", rec.State)
	}
}

// TestFailedRegistrationReplacesTheInstance: a pooled instance whose runner registration fails is
// terminated by the claim worker and the run gets another runner.
func TestFailedRegistrationReplacesTheInstance(t *testing.T) {
	t.Parallel()
	var broken atomic.Value // instance id whose registrations fail
	broken.Store("")
	sb := start(t, sandbox.Options{FailRegistration: func(id string) bool { return broken.Load() == id }})
	cp := sb.Components(sandbox.ComponentOptions{})
	ctx := t.Context()
	first, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	id := first.Runners[0].InstanceID
	if rep, err := cp.Releaser.Release(ctx, first.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release = %+v, %v", rep, err)
	}
	broken.Store(id)
	second, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil {
		t.Fatalf("provision after the fault: %v (%+v)", err, second)
	}
	if len(second.Runners) != 1 || second.Runners[0].InstanceID == id || second.Runners[0].Source != "created" {
		t.Fatalf("second provision = %+v, want one new runner in place of %s", second, id)
	}
	if rec := record(t, sb, id); rec.State != store.StateTerminated {
		t.Errorf("the failed instance's record = %s, want terminated", rec.State)
	}
	waitFor(t, "EC2 to terminate "+id, 10*time.Second, func() bool { return gone(ec2State(sb, id)) })
	runJob(t, sb, second.Label)
}
