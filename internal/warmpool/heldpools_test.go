// Pools whose configuration went away or broke, on the local stack: a removed pool's pool jobs
// are still promoted and handed to the backstop until they end, and a pool whose item cannot be
// used keeps its warm instances while its pool jobs are looked after.
package warmpool_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// backstopSpy records the running pool-job records each pass hands the backstop.
type backstopSpy struct {
	mu     sync.Mutex
	checks [][]string
}

func (b *backstopSpy) Check(_ context.Context, recs []store.Instance) ([]string, error) {
	var running []string
	for _, in := range recs {
		if in.State == store.StateRunning {
			running = append(running, in.ID)
		}
	}
	slices.Sort(running)
	b.mu.Lock()
	b.checks = append(b.checks, running)
	b.mu.Unlock()
	return nil, nil
}

// last returns what the last check was handed.
func (b *backstopSpy) last() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.checks) == 0 {
		return nil
	}
	return b.checks[len(b.checks)-1]
}

// hotJobs makes a pool of n hot instances and serves job 100+i on the i-th of them; the first
// registers and is promoted to running. The pool's target is then zero, so it holds nothing but
// its jobs' instances.
func hotJobs(t *testing.T, e *env, tg *targets, c *poolsize.Converger, name string, n int) []string {
	t.Helper()
	tg.set(e.spec(name, n, 0, "v1-a"))
	pass(t, c)
	e.warmUp(t, name, nil, nil)
	hot := poolReport(t, pass(t, c), name).Readied
	if len(hot) != n {
		t.Fatalf("readied %v, want %d", hot, n)
	}
	for i, id := range hot {
		served(t, e, warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(100 + i), RunID: 7, Repository: "acme/api", Labels: []string{"pool=" + name}, Pool: name}, id)
	}
	e.agentSignal(t, hot[0], store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "100"})
	tg.set(e.spec(name, 0, 0, "v1-a"))
	if pr := poolReport(t, pass(t, c), name); !slices.Equal(pr.Promoted, []string{hot[0]}) {
		t.Fatalf("promotion pass: %+v; want %s promoted", pr, hot[0])
	}
	return hot
}

// A pool deleted while all its instances serve jobs has no warm record left. Its jobs are still
// looked after: one that registers after the deletion is promoted (the old search for removed
// pools read warm records only, so the pool was never found: the instance stayed claimed until
// refresh ended it at its registration deadline, job and all), and the running ones are handed
// to the backstop at every pass until they end (before, never: a lost completion left the
// instance running to its max runtime). The pool is forgotten once its last job's record ends.
func TestRemovedPoolJobsAreLookedAfterUntilTheyEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	spy := &backstopSpy{}
	c := e.converger(t, tg.get, poolsize.Options{Backstop: spy})
	hot := hotJobs(t, e, tg, c, "gone", 2)

	tg.set() // terraform destroy of the pool
	e.agentSignal(t, hot[1], store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "101"})
	e.clock.Add(30 * time.Second)
	rep := pass(t, c)
	pr, ok := rep.Pool("gone")
	if !ok || !pr.Removed || !slices.Equal(pr.Promoted, []string{hot[1]}) {
		t.Fatalf("removed pool: %+v (reported %v); want removed, %s promoted", pr, ok, hot[1])
	}
	if rec, _ := e.st.Get(t.Context(), hot[1]); rec.State != store.StateRunning {
		t.Errorf("job instance %s is %s after registering, want running", hot[1], rec.State)
	}
	// Every later pass, between searches too, hands the running job records to the backstop.
	for range 3 {
		e.clock.Add(30 * time.Second)
		if pr := poolReport(t, pass(t, c), "gone"); len(pr.Excess)+len(pr.Errored) != 0 {
			t.Errorf("a job's instance was ended as excess: %+v", pr)
		}
		if got := spy.last(); !slices.Equal(got, slices.Sorted(slices.Values(hot))) {
			t.Errorf("backstop handed %v, want the running jobs %v", got, hot)
		}
	}

	// The jobs end (their completion, or the backstop's): the pool is forgotten after one more
	// look, and not found again by the next search.
	for _, id := range hot {
		if _, err := e.st.Transition(t.Context(), id, store.Change{From: []store.State{store.StateRunning}, To: store.StateTerminating, Reason: "job completed"}); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Add(30 * time.Second)
	if _, ok := pass(t, c).Pool("gone"); !ok {
		t.Error("the removed pool was not looked at while its instances were terminating")
	}
	for _, id := range hot {
		if _, err := e.st.Transition(t.Context(), id, store.Change{From: []store.State{store.StateTerminating}, To: store.StateTerminated}); err != nil {
			t.Fatal(err)
		}
	}
	for _, after := range []time.Duration{30 * time.Second, 30 * time.Second, 10 * time.Minute} {
		e.clock.Add(after)
		pass(t, c)
	}
	if rep := pass(t, c); len(rep.Pools) != 0 {
		t.Errorf("pools after the removed pool's last job ended: %+v; want none", rep.Pools)
	}
}

// The lost completion of a removed pool's job, end to end: the pool is destroyed while its one
// instance runs a job, and the job's completed webhook never comes. The pass hands the running
// record to the real backstop, which finds the job's runner gone from two listings of its
// repository at the GitHub fake and hands the completion to the job queue; the pool worker ends
// the instance. Before, the removed pool was never found (it had no warm record), the backstop
// never saw the instance, and it ran to its max runtime.
func TestRemovedPoolLostCompletionEndsItsInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	tg := &targets{}
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	bs, err := pooljob.NewBackstop(pooljob.BackstopConfig{Ledger: e.st, GitHub: e.github(t), Jobs: jobs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := e.converger(t, tg.get, poolsize.Options{Backstop: bs, Jobs: jobs})
	ran := hotJobs(t, e, tg, c, "gone", 1)[0]

	// terraform destroy of the pool. The job completes and GitHub removes its ephemeral runner (the
	// fake never lists it); the completed delivery is lost.
	tg.set()
	var inferred []string
	for range 3 {
		e.clock.Add(30 * time.Second)
		inferred = append(inferred, pass(t, c).Inferred...)
	}
	if !slices.Equal(inferred, []string{ran}) {
		t.Fatalf("completions inferred for %v, want %s", inferred, ran)
	}
	w := e.worker(t, warmpool.NewCatalog(tg.get, time.Nanosecond, nil), jobs)
	rep, err := w.Once(ctx)
	if err != nil || !slices.Equal(rep.Completed, []int64{100}) {
		t.Fatalf("worker: %+v, %v; want job 100 completed", rep, err)
	}
	if rec, _ := e.st.Get(ctx, ran); rec.State.Live() || e.ec2State(t, ran) != "terminated" {
		t.Errorf("instance %s after the inferred completion: record %s, EC2 %s", ran, rec.State, e.ec2State(t, ran))
	}
}

// A pool whose item cannot be used is held: its warm instances are not ended by convergence,
// whatever its targets said, and the pool's report says why. Its pool jobs do not depend on the
// configuration: a registered one is promoted and the running ones go to the backstop (before,
// the pass read nothing of the pool: neither happened).
func TestBrokenPoolHoldsItsInstancesAndLooksAfterItsJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	spy := &backstopSpy{}
	c := e.converger(t, tg.get, poolsize.Options{Backstop: spy})
	hot := hotJobs(t, e, tg, c, "frozen", 2)
	// Two hot instances beside the jobs, then the item becomes unreadable.
	tg.set(e.spec("frozen", 2, 0, "v1-a"))
	pass(t, c)
	e.warmUp(t, "frozen", nil, nil)
	warm := poolReport(t, pass(t, c), "frozen").Readied
	if len(warm) != 2 {
		t.Fatalf("readied %v, want 2", warm)
	}
	broken := e.spec("frozen", 0, 0, "v1-a")
	broken.Err = errors.New("warm pool \"frozen\": spec written by a newer provider")
	tg.set(broken)
	e.agentSignal(t, hot[1], store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "101"})

	for i := range 3 {
		e.clock.Add(30 * time.Second)
		rep := pass(t, c)
		pr := poolReport(t, rep, "frozen")
		if pr.Skipped == "" || pr.Removed || len(pr.Excess)+len(pr.Errored)+len(pr.Dangling)+len(pr.Outdated) != 0 || pr.Ready != 2 {
			t.Errorf("pass %d: broken pool %+v; want it held with its 2 hot instances", i, pr)
		}
		if i == 0 && !slices.Equal(pr.Promoted, []string{hot[1]}) {
			t.Errorf("broken pool promoted %v, want %s", pr.Promoted, hot[1])
		}
		if got := spy.last(); i > 0 && !slices.Equal(got, slices.Sorted(slices.Values(hot))) {
			t.Errorf("pass %d: backstop handed %v, want the running jobs %v", i, got, hot)
		}
	}
	for _, id := range warm {
		if rec, _ := e.st.Get(t.Context(), id); rec.State != store.StateReady || e.ec2State(t, id) != "running" {
			t.Errorf("held hot instance %s: record %s, EC2 %s", id, rec.State, e.ec2State(t, id))
		}
	}
}
