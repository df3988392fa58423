package scalesets_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestCancelledAssignmentSurvivesTakeover (github.com's shape): the holder handles the service's
// cancellation of an assignment (no runner took it in time) and dies before the grace for its
// reassignment runs out; no reassignment comes (the service gave up). The new holder reads the
// cancellation from the table at session open and withdraws the job's runner after CancelGrace;
// on the old code it knew nothing of it and the instance waited for its own deadline.
func TestCancelledAssignmentSurvivesTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, githubfake.ShapeAssigned)
	e.gh.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 300 * time.Millisecond, SessionIdle: time.Minute, StartTimeout: 300 * time.Millisecond})
	grace := func(c *scalesets.Config) { c.CancelGrace = 4 * time.Second }
	a := e.start(t, "a", grace)
	w := e.worker(t, a.m)
	id, hot, _ := e.servedJob(t, w, 830)
	eventually(t, "the job cancelled for good at GitHub", func() bool { j, _ := e.gh.Job(id); return j.Status == githubfake.JobCompleted })
	// The last cancellation (the fourth JobCompleted, after three reassignments) handled by a.
	eventually(t, "the last cancellation handled and deleted", func() bool {
		st, _ := e.gh.ScaleSet(org, setName)
		return a.m.Metrics().Jobs(setName, "JobCompleted") >= 4 && st.Pending == 0
	})
	a.kill()
	if rec, _ := e.st.Get(t.Context(), hot.ID); !rec.State.Live() {
		t.Fatalf("instance %s at the kill: %s, want live (the test's premise: killed within CancelGrace)", hot.ID, rec.State)
	}
	e.start(t, "b", grace)
	eventually(t, "b holds the session", func() bool { return e.sessionOwner() == "b" })
	onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
	if rec, _ := e.st.Get(t.Context(), hot.ID); rec.State.Live() {
		t.Errorf("instance of the vanished job after the takeover: %s, want ended", rec.State)
	}
	if got := e.ledger(t, id); got != warmpool.JobCompleted {
		t.Errorf("ledger of the vanished job: %q, want completed", got)
	}
}
