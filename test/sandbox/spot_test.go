package sandbox_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// TestSpotReclaimIsNotPooled: EC2 announces the interruption of an instance whose run just finished
// its job, and the real agent reports the notice (signed). The release says the runner was reclaimed
// by EC2, counts the interruption, and expires the instance without waiting for its agent, which is
// never pooled and is terminated with the reason on its record; also when EC2 terminated the
// instance before the release came (its agent can no longer answer).
func TestSpotReclaimIsNotPooled(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		notice   time.Duration
		goneSoon bool // EC2 terminates the instance before the release
	}{
		{"announced", time.Minute, false},
		{"already terminated", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spotReclaim(t, tt.notice, tt.goneSoon)
		})
	}
}

func spotReclaim(t *testing.T, notice time.Duration, goneSoon bool) {
	sb := start(t, sandbox.Options{})
	var interrupted atomic.Int64
	cp := sb.Components(sandbox.ComponentOptions{OnSpotInterruption: func(string) { interrupted.Add(1) }})
	ctx := t.Context()

	run := newRun()
	res, err := cp.Provisioner.Provision(ctx, request(run))
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision: %+v, %v; want one runner", res, err)
	}
	id := res.Runners[0].InstanceID
	runJob(t, sb, res.Label)

	// A minute's notice outlasts the agent's poll (5 s) and the release. With none, EC2 terminates
	// the instance within the agent's poll: held back until the agent reported the notice.
	if err := sb.Stack.EC2.InterruptSpot(id, max(notice, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent to report the notice", 20*time.Second, func() bool {
		last, err := sb.Store.LastSignal(ctx, id)
		return err == nil && last.Signal == store.SignalSpotInterrupted
	})
	if goneSoon {
		// The interruption comes due now: EC2 reclaims the instance.
		if err := sb.Stack.EC2.InterruptSpot(id, notice); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "EC2 to terminate "+id, 10*time.Second, func() bool { return gone(ec2State(sb, id)) })
	}

	rep, err := cp.Releaser.Release(ctx, res.RunKey, 10*time.Minute)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	if rep.Count(release.Expired) != 1 || len(rep.Instances) != 1 {
		t.Fatalf("release = %+v; want the instance expired, not pooled", rep)
	}
	want := "runner " + id + " was reclaimed by EC2 (spot interruption) at "
	if got := rep.Instances[0].Reason; !strings.HasPrefix(got, want) || strings.Contains(got, "an unannounced time") {
		t.Errorf("release reason = %q; want it to start with %q and name the announced time", got, want)
	}
	if !strings.Contains(rep.Message, release.Reclaimed+": "+id) {
		t.Errorf("release message = %q; want it to name %s as %s", rep.Message, id, release.Reclaimed)
	}
	if n := interrupted.Load(); n != 1 {
		t.Errorf("spot interruptions counted = %d, want 1", n)
	}
	if n := poolMessages(t, sb); n != 0 {
		t.Errorf("pool holds %d messages after a reclaimed instance's release, want 0", n)
	}
	if rec := record(t, sb, id); !strings.Contains(rec.Reason, "spot interruption") {
		t.Errorf("record reason = %q; want it to name the spot interruption", rec.Reason)
	}
	if _, err := cp.Refresher.Run(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if rec := record(t, sb, id); rec.State != store.StateTerminated {
		t.Errorf("record after refresh = %s, want terminated", rec.State)
	}
}

// TestPooledSpotReclaimIsNotReused: EC2 announces the interruption of an instance waiting in the
// pool. The next run does not get it: the provision answers with another runner, and the
// announced instance ends terminated, never running a job.
func TestPooledSpotReclaimIsNotReused(t *testing.T) {
	t.Parallel()
	sb := start(t, sandbox.Options{})
	cp := sb.Components(sandbox.ComponentOptions{})
	ctx := t.Context()

	run := newRun()
	res, err := cp.Provisioner.Provision(ctx, request(run))
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision: %+v, %v; want one runner", res, err)
	}
	id := res.Runners[0].InstanceID
	runJob(t, sb, res.Label)
	if rep, err := cp.Releaser.Release(ctx, res.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release = %+v, %v; want the instance pooled", rep, err)
	}
	if err := sb.Stack.EC2.InterruptSpot(id, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent to report the notice", 20*time.Second, func() bool {
		last, err := sb.Store.LastSignal(ctx, id)
		return err == nil && last.Signal == store.SignalSpotInterrupted
	})

	next := newRun()
	res2, err := cp.Provisioner.Provision(ctx, request(next))
	if err != nil || len(res2.Runners) != 1 {
		t.Fatalf("provision after the notice: %+v, %v; want one runner", res2, err)
	}
	if res2.Runners[0].InstanceID == id {
		t.Fatalf("the run got the announced instance %s (%+v)", id, res2.Runners[0])
	}
	runJob(t, sb, res2.Label)
	if _, err := cp.Refresher.Run(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	rec := record(t, sb, id)
	t.Logf("next run served by %s (%s); the announced instance is %s (%s)", res2.Runners[0].InstanceID, res2.Runners[0].Source, rec.State, rec.Reason)
	if rec.State.Live() && !rec.PooledAt.IsZero() {
		t.Errorf("announced instance still pooled: %s (%s)", rec.State, rec.Reason)
	}
}
