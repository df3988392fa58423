package scalesets_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// skipRunnerOf makes the GitHub fake's runner listings leave out in's runner, as a paginated
// listing does for a runner at a page boundary when runners before it are removed between two
// page requests; GitHub still has it, readable by its id.
func (e *env) skipRunnerOf(in store.Instance) {
	name := warmpool.RunnerName(in.ID)
	e.gh.SkipInListings(func(r githubfake.Runner) bool { return r.Name == name })
}

// servedBy reads the instance a scale set job's ledger names ("" when none).
func (e *env) servedBy(t *testing.T, jobID int64) string {
	t.Helper()
	st, _ := e.gh.ScaleSet(org, setName)
	j := warmpool.Job{JobID: jobID, ScaleSetID: st.ID, ScaleSetJob: githubfake.ScaleSetJobID(jobID)}
	r, err := e.st.GetRun(t.Context(), j.LedgerKey())
	if err != nil {
		return ""
	}
	var res warmpool.JobResult
	_ = json.Unmarshal(r.Result, &res)
	return res.InstanceID
}

// TestEarlyCompletionOfASkippedRunnerKeepsRunningJob: a JobCompleted arrives while the job still
// runs (actions/runner#4492), and the runner listing leaves the busy runner out (a page boundary
// while runners are removed). Its instance is not ended: the runner, read by the id the job's
// ledger records, is busy, so the completion waits; once the job is done GitHub removes the runner
// (404) and the completion goes through. Before, the listing alone decided: the runner was not
// listed busy, and the instance was ended while its job ran.
func TestEarlyCompletionOfASkippedRunnerKeepsRunningJob(t *testing.T) {
	t.Parallel()
	lateCompletionKeepsRunningJob(t, newEnv(t, githubfake.ShapeAssigned), 830, true)
}

// TestPickedInstanceOfASkippedBusyRunnerIsKept: the instance brought up for job Y has its runner
// take job X (github.com gives a scale set's job to any idle runner of the set) and run it, while
// the runner listing leaves that runner out. Y then runs on X's runner and completes. Y's
// completion ends the instance that ran it, and looks at the instance brought up for Y: its runner,
// not listed busy, is read by the id X's ledger records for it (Bind moved it there), found busy,
// and its instance is kept for X's completion. Before, the listing alone decided, and the instance
// was ended while it ran X.
func TestPickedInstanceOfASkippedBusyRunnerIsKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t, githubfake.ShapeAssigned)
	r := e.replica(t, "a")
	w := e.worker(t, r.m)
	x, ix, credX := e.servedJob(t, w, 910)
	y, iy, credY := e.servedJob(t, w, 911)
	e.skipRunnerOf(iy)
	e.runner(t, iy, credY, 8*time.Second)
	eventually(t, "job X running on Y's runner", func() bool {
		j, _ := e.gh.Job(x)
		return j.Status == githubfake.JobInProgress && j.RunnerName == warmpool.RunnerName(iy.ID)
	})
	eventually(t, "job X bound to Y's instance", func() bool { return e.servedBy(t, x) == iy.ID })
	frX := e.runner(t, ix, credX, 10*time.Millisecond)
	eventually(t, "job Y run by X's runner", func() bool { return slices.Contains(frX.Jobs(), y) })
	onceUntil(t, w, func(r pooljob.BatchReport) bool { return slices.Contains(r.Completed, e.number(y)) })
	if j, _ := e.gh.Job(x); j.Status != githubfake.JobInProgress {
		t.Fatalf("job X %s at Y's completion: the test's premise (Y's instance busy with X) does not hold", j.Status)
	}
	if rec, _ := e.st.Get(t.Context(), iy.ID); !rec.State.Live() || rec.State == store.StateTerminating {
		t.Fatalf("instance brought up for Y, running X, its runner left out of the listing, after Y completed: %s, want kept", rec.State)
	}
	if rec, _ := e.st.Get(t.Context(), ix.ID); rec.State.Live() && rec.State != store.StateTerminating {
		t.Errorf("instance that ran Y after Y completed: %s, want ended", rec.State)
	}
	eventually(t, "job X done", func() bool { j, _ := e.gh.Job(x); return j.Status == githubfake.JobCompleted })
	onceUntil(t, w, func(r pooljob.BatchReport) bool { return slices.Contains(r.Completed, e.number(x)) })
	if rec, _ := e.st.Get(t.Context(), iy.ID); rec.State.Live() && rec.State != store.StateTerminating {
		t.Errorf("instance that ran X after X completed: %s, want ended", rec.State)
	}
}
