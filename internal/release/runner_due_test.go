package release_test

import (
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/releasetest"
)

// An instance whose runner is due for an upgrade (RunnerDue) is retired at its hand-back: deregistered
// by its agent, never pooled, its record expired with the reason. The others of the run are pooled.
func TestReleaseRetiresARunnerDueForUpgrade(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const runID = "7891"
	ids := e.launch(t, 2)
	for _, id := range ids {
		e.record(t, id, runID, store.StateRunning)
	}
	e.opts.RunnerDue = func(rec store.Instance) string {
		if rec.ID == ids[0] {
			return "its runner 2.335.0 is behind the current release 2.336.0: retired"
		}
		return ""
	}
	agent := releasetest.Start(ctx, e.st, runID, ids, releasetest.Deregister)
	defer agent.Stop()
	rep, err := e.releaser(nil).Release(ctx, runID, idleTime)
	if err != nil {
		t.Fatalf("Release: %v (report %+v)", err, rep)
	}
	got := outcomes(rep)
	if got[ids[0]] == release.Pooled || got[ids[1]] != release.Pooled {
		t.Fatalf("outcomes %v: want %s retired and %s pooled", got, ids[0], ids[1])
	}
	rec, err := e.st.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !rec.PooledAt.IsZero() || !strings.Contains(rec.Reason, "behind the current release") {
		t.Errorf("retired record: pooled at %v, reason %q", rec.PooledAt, rec.Reason)
	}
	for _, m := range e.messages(t) {
		if m.InstanceID == ids[0] {
			t.Errorf("a pool message announces the retired instance %s", ids[0])
		}
	}
}
