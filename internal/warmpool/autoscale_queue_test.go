package warmpool_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// An autoscaled pool's jobs' queue times (creation at GitHub to the runner's registration) are
// kept in its item with their p95 and the goal in the decision; an hour later they are gone.
func TestAutoscaleQueueTimeAgainstGoal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.clock.Set(time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC))
	spec := e.spec("queued", 4, 0, "v1-a")
	spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
	seedDemand(t, e, "queued", e.clock.Now(), 4)
	tg := &targets{}
	tg.set(spec)
	c := e.converger(t, tg.get, poolsize.Options{Autoscale: poolsize.AutoscaleOptions{Store: e.st}})
	pass(t, c)
	e.warmUp(t, "queued", nil, nil)
	e.clock.Add(30 * time.Second)
	hot := poolReport(t, pass(t, c), "queued").Readied
	if len(hot) != 4 {
		t.Fatalf("readied %v, want 4", hot)
	}
	for i, id := range hot {
		wait := time.Duration(2+6*i) * time.Second // 2, 8, 14 and 20 s
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(700 + i), RunID: 11, Repository: "acme/api", Labels: []string{"pool=queued"}, Pool: "queued",
			CreatedAt: e.clock.Now().Add(-wait)}
		served(t, e, j, id)
		e.agentSignal(t, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: j.RunKey()})
	}
	e.clock.Add(30 * time.Second)
	if pr := poolReport(t, pass(t, c), "queued"); len(pr.Promoted) != 4 {
		t.Fatalf("promoted %v, want all 4", pr.Promoted)
	}
	e.clock.Add(30 * time.Second)
	a := poolReport(t, pass(t, c), "queued").Autoscale
	if a.QueueJobs != 4 || a.QueueP95MS != 20000 || a.GoalMS != 5000 {
		t.Errorf("decision: %d jobs, p95 %d ms, goal %d ms; want 4, 20000, 5000", a.QueueJobs, a.QueueP95MS, a.GoalMS)
	}
	st, err := e.st.GetAutoscale(ctx, "queued")
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	for _, q := range st.QueueTimes {
		sum += q.Wait
		if !q.At.Equal(e.clock.Now().Truncate(time.Millisecond)) {
			t.Errorf("queue time dated %s, want this pass's %s", q.At, e.clock.Now())
		}
	}
	if len(st.QueueTimes) != 4 || sum != 44*time.Second {
		t.Errorf("kept queue times %+v; want 2, 8, 14 and 20 s", st.QueueTimes)
	}
	if st.Decision.QueueP95MS != 20000 {
		t.Errorf("stored decision's p95 %d ms, want 20000", st.Decision.QueueP95MS)
	}
	e.clock.Add(poolsize.QueueWindow)
	if a := poolReport(t, pass(t, c), "queued").Autoscale; a.QueueJobs != 0 || a.QueueP95MS != 0 {
		t.Errorf("an hour later: %d jobs, p95 %d ms; want none", a.QueueJobs, a.QueueP95MS)
	}
}
