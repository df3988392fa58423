package scalesets_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestLostCompletionOfASwappedJob (github.com's shape): instance A was brought up for job X and B
// for Y, but B's runner took X (it runs on, a long job) and A's took Y; JobStarted binds X to B
// and Y to A. Y finishes, its JobCompleted is lost, and GitHub removes A's ephemeral runner. The
// backstop hands on the completion of the job A serves, Y, and the pool worker ends A and marks
// Y's ledger completed, while X's ledger still names B and B keeps running X. On the code before,
// the backstop completed X, the job A was brought up for: X's ledger was marked completed while X
// ran, and Y's was left served.
func TestLostCompletionOfASwappedJob(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, githubfake.ShapeAssigned)
	jobs := &lossy{q: e.jobs}
	r := e.start(t, "a", func(c *scalesets.Config) { c.Jobs = jobs })
	w := e.worker(t, r.m)
	x, a, credA := e.servedJob(t, w, 920)
	y, b, credB := e.servedJob(t, w, 921)

	// B's runner comes up first and takes X, the job queued first; its job outlasts the test.
	e.runner(t, b, credB, time.Hour)
	eventually(t, "job X running on B's runner", func() bool {
		j, _ := e.gh.Job(x)
		return j.Status == githubfake.JobInProgress && j.RunnerName == warmpool.RunnerName(b.ID)
	})
	frA := e.runner(t, a, credA, 10*time.Millisecond)
	eventually(t, "job Y run by A's runner", func() bool { return slices.Contains(frA.Jobs(), y) })
	eventually(t, "job Y done", func() bool { j, _ := e.gh.Job(y); return j.Status == githubfake.JobCompleted })
	eventually(t, "Y's JobCompleted lost", func() bool { return jobs.lost.Load() > 0 })
	eventually(t, "X bound to B and Y to A", func() bool {
		return e.served(t, x).InstanceID == b.ID && e.served(t, y).InstanceID == a.ID
	})

	// Convergence records both running on their agents' registrations.
	var recs []store.Instance
	for _, in := range []store.Instance{a, b} {
		rec, err := e.st.Get(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err = e.st.Transition(ctx, in.ID, store.Change{From: []store.State{rec.State}, To: store.StateRunning, Threshold: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: e.st, GitHub: e.github(t), Jobs: e.jobs, Logger: logger()})
	if err != nil {
		t.Fatal(err)
	}
	var ended []string
	for n := 0; n < 3 && len(ended) == 0; n++ {
		if ended, err = bs.Check(ctx, recs); err != nil {
			t.Fatalf("backstop check: %v", err)
		}
	}
	if !slices.Equal(ended, []string{a.ID}) {
		t.Fatalf("backstop ended %v, want %s (its runner gone) alone", ended, a.ID)
	}
	rep := onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
	if !slices.Equal(rep.Completed, []int64{e.number(y)}) {
		t.Errorf("completed jobs %v, want Y's (%d), not X's (%d)", rep.Completed, e.number(y), e.number(x))
	}
	if st := e.ledger(t, y); st != warmpool.JobCompleted {
		t.Errorf("Y's ledger %q, want completed", st)
	}
	if st, res := e.ledger(t, x), e.served(t, x); st != warmpool.JobServed || res.InstanceID != b.ID {
		t.Errorf("X's ledger %q naming %s while X runs, want served naming %s", st, res.InstanceID, b.ID)
	}
	if rec, _ := e.st.Get(ctx, a.ID); rec.State.Live() && rec.State != store.StateTerminating {
		t.Errorf("A after Y's inferred completion: %s, want ended", rec.State)
	}
	if rec, _ := e.st.Get(ctx, b.ID); !rec.State.Live() || rec.State == store.StateTerminating {
		t.Errorf("B while it runs X: %s, want kept", rec.State)
	}
	if j, _ := e.gh.Job(x); j.Status == githubfake.JobCompleted {
		t.Errorf("job X %s: the test's premise (X still running on B) does not hold", j.Status)
	}
}

// served reads the ledger's result of a scale set job (zero when the ledger does not know it).
func (e *env) served(t *testing.T, jobID int64) warmpool.JobResult {
	t.Helper()
	st, _ := e.gh.ScaleSet(org, setName)
	j := warmpool.Job{JobID: e.number(jobID), ScaleSetID: st.ID, ScaleSetJob: githubfake.ScaleSetJobID(jobID)}
	var res warmpool.JobResult
	if r, err := e.st.GetRun(t.Context(), j.LedgerKey()); err == nil {
		_ = json.Unmarshal(r.Result, &res)
	}
	return res
}
