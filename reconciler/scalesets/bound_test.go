package scalesets_test

import (
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestJobRunsOnAnotherJobsRunner (github.com's shape): the service gives a job to any idle runner
// of the scale set (the fake: the longest idle one), not to the one brought up for it. Job X's
// instance is slow to boot, so Y's runner, idle first, takes X. JobStarted binds X to Y's
// instance and Y to X's, so X's completion ends the instance that ran it and leaves X's idle
// instance for Y, which its runner then takes; Y's completion ends it. On the old code X's
// completion ended both instances and Y was left without a runner.
func TestJobRunsOnAnotherJobsRunner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, githubfake.ShapeAssigned)
	r := e.replica(t, "a")
	w := e.worker(t, r.m)
	x, ix, credX := e.servedJob(t, w, 900)
	y, iy, credY := e.servedJob(t, w, 901)
	frY := e.runner(t, iy, credY, 10*time.Millisecond)
	eventually(t, "job X run by Y's runner", func() bool { return slices.Contains(frY.Jobs(), x) })
	eventually(t, "job X done", func() bool { j, _ := e.gh.Job(x); return j.Status == githubfake.JobCompleted })
	onceUntil(t, w, func(r pooljob.BatchReport) bool { return slices.Contains(r.Completed, e.number(x)) })
	if rec, _ := e.st.Get(t.Context(), ix.ID); !rec.State.Live() || rec.State == store.StateTerminating {
		t.Fatalf("X's idle instance after X completed on another runner: %s, want kept for Y", rec.State)
	}
	if j, _ := e.gh.Job(y); j.Status != githubfake.JobQueued {
		t.Fatalf("job Y %s before X's instance came up: the test's premise does not hold", j.Status)
	}
	frX := e.runner(t, ix, credX, 10*time.Millisecond)
	eventually(t, "job Y run by X's runner", func() bool { return slices.Contains(frX.Jobs(), y) })
	onceUntil(t, w, func(r pooljob.BatchReport) bool { return slices.Contains(r.Completed, e.number(y)) })
	for _, in := range []store.Instance{ix, iy} {
		if rec, _ := e.st.Get(t.Context(), in.ID); rec.State.Live() && rec.State != store.StateTerminating {
			t.Errorf("instance %s after both jobs completed: %s, want ended", in.ID, rec.State)
		}
	}
}
