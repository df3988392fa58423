// Convergence scenarios on the local stack with an injected clock: scale from zero, error and
// dangling instances, excess after a lowered target, a removed pool, batching, and a pool that fails
// without blocking the others. The schedule boundary and the rollout run through the real
// configuration (config_test.go).
package warmpool_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func TestConvergeScaleFromZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("small", 2, 3, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})

	// Pass 1 launches the whole target with one fleet; nothing is hot or stopped yet.
	pr := poolReport(t, pass(t, c), "small")
	if len(pr.Created) != 5 || pr.CreateCalls != 1 || pr.Warming != 5 || pr.Ready != 0 || pr.Stopped != 0 || pr.Err != nil {
		t.Fatalf("pass 1: %+v; want 5 created warming with one fleet", pr)
	}
	for _, id := range pr.Created {
		v, _ := e.ec2srv.Instance(id)
		if v.Lifecycle != "on-demand" || v.Tags[tags.Pool] != "small" || v.Tags[tags.SpecHash] != "v1-a" ||
			v.Tags[tags.Deployment] != deployment || v.Tags[tags.RunnerClass] != runnerClass {
			t.Errorf("instance %s: lifecycle %s tags %v", id, v.Lifecycle, v.Tags)
		}
	}
	warming := e.records(t, "small")[store.StateWarming]
	for _, r := range warming {
		if !r.Threshold.Equal(e.clock.Now().Add(warmpool.DefaultWarmupTimeout)) || r.SpecHash != "v1-a" || r.RunnerClass != runnerClass || r.Scope != "acme" {
			t.Errorf("warming record %+v", r)
		}
	}

	// Until the agents report, a pass changes nothing.
	e.clock.Add(30 * time.Second)
	pr = poolReport(t, pass(t, c), "small")
	if len(pr.Created) != 0 || pr.Warming != 5 {
		t.Fatalf("pass 2 before warm-up: %+v; want no change", pr)
	}

	// Warmed up: hot first (2, announced in the pool queue), the rest stopped with one call.
	e.warmUp(t, "small", nil, nil)
	e.clock.Add(30 * time.Second)
	pr = poolReport(t, pass(t, c), "small")
	if len(pr.Readied) != 2 || len(pr.StoppedNow) != 3 || pr.StopCalls != 1 || pr.Ready != 2 || pr.Stopped != 3 || pr.Warming != 0 || len(pr.Created) != 0 {
		t.Fatalf("pass 3 after warm-up: %+v; want 2 hot, 3 stopped", pr)
	}
	recs := e.records(t, "small")
	for _, r := range recs[store.StateReady] {
		if !r.Threshold.Equal(e.clock.Now().Add(warmpool.DefaultDanglingAfter)) || e.ec2State(t, r.ID) != "running" {
			t.Errorf("hot %s: threshold %s, EC2 %s", r.ID, r.Threshold, e.ec2State(t, r.ID))
		}
	}
	for _, r := range recs[store.StateStopped] {
		if !r.Threshold.Equal(e.clock.Now().Add(warmpool.DefaultMaxStoppedAge)) || e.ec2State(t, r.ID) != "stopped" {
			t.Errorf("stopped %s: threshold %s, EC2 %s", r.ID, r.Threshold, e.ec2State(t, r.ID))
		}
	}
	if got, want := e.poolMessages(t), slices.Sorted(slices.Values(pr.Readied)); !slices.Equal(got, want) {
		t.Errorf("pool queue announces %v, want the hot instances %v", got, want)
	}

	// Steady: a pass makes no EC2 call at all.
	e.calls.reset()
	pr = poolReport(t, pass(t, c), "small")
	if pr.Ready != 2 || pr.Stopped != 3 || pr.CreateCalls+pr.StopCalls+pr.TerminateCalls != 0 || len(e.calls.of("CreateFleet")) != 0 {
		t.Fatalf("steady pass: %+v", pr)
	}
}

func TestConvergeErrorAndDangling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("mixed", 2, 1, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	created := poolReport(t, pass(t, c), "mixed").Created
	if len(created) != 3 {
		t.Fatalf("created %v, want 3", created)
	}
	failed, silent := created[0], created[1]

	// One pre-runner script fails, one agent never reports, one warms up.
	e.warmUp(t, "mixed", []string{failed}, []string{silent})
	e.clock.Add(30 * time.Second)
	pr := poolReport(t, pass(t, c), "mixed")
	if !slices.Equal(pr.Errored, []string{failed}) || len(pr.Readied) != 1 || len(pr.Created) != 1 || pr.Warming != 2 {
		t.Fatalf("after warm-up: %+v; want the failed one terminated, one hot, one replacement", pr)
	}
	if st := e.ec2State(t, failed); st != "terminated" {
		t.Errorf("errored instance is %s in EC2", st)
	}
	hot := pr.Readied[0]

	// A step-driven run claims the hot instance: from then on the pool never touches it.
	if _, err := e.st.Claim(t.Context(), hot, "4242:1:1", e.clock.Now().Add(time.Hour), store.StateReady); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	e.warmUp(t, "mixed", nil, []string{silent})
	e.clock.Add(30 * time.Second)
	pr = poolReport(t, pass(t, c), "mixed")
	if pr.Detached != 1 || len(pr.Readied) != 1 || pr.Ready != 1 || pr.Warming != 2 || len(pr.Created) != 1 {
		t.Fatalf("after a claim: %+v; want the claimed one detached, the replacement hot and one more launched", pr)
	}
	replacement := pr.Readied[0]

	// Past the dangling limit the hot instance is replaced; past the warm-up limit the silent one
	// is an error (the one launched a pass later is not, yet). The claimed one stays whatever its age.
	e.clock.Add(warmpool.DefaultWarmupTimeout - 30*time.Second)
	pr = poolReport(t, pass(t, c), "mixed")
	if !slices.Equal(pr.Dangling, []string{replacement}) || !slices.Equal(pr.Errored, []string{silent}) {
		t.Fatalf("after the limits: %+v; want %s dangling, %s errored", pr, replacement, silent)
	}
	if len(pr.Created) != 2 || pr.Warming != 3 || pr.Detached != 1 {
		t.Errorf("after the limits: %+v; want 2 replacements and the claimed one detached", pr)
	}
	if rec, _ := e.st.Get(t.Context(), hot); rec.State != store.StateClaimed || e.ec2State(t, hot) != "running" {
		t.Errorf("claimed instance: record %s, EC2 %s", rec.State, e.ec2State(t, hot))
	}
}

func TestConvergeExcessAndRemovedPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("big", 3, 2, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	pass(t, c)
	e.warmUp(t, "big", nil, nil)
	pr := poolReport(t, pass(t, c), "big")
	if pr.Ready != 3 || pr.Stopped != 2 {
		t.Fatalf("steady: %+v", pr)
	}

	// A lowered target: the excess is terminated, nothing is created.
	tg.set(e.spec("big", 1, 1, "v1-a"))
	pr = poolReport(t, pass(t, c), "big")
	if len(pr.Excess) != 3 || pr.Ready != 1 || pr.Stopped != 1 || len(pr.Created) != 0 {
		t.Fatalf("lowered target: %+v; want 2 hot and 1 stopped terminated", pr)
	}
	for _, id := range pr.Excess {
		if st := e.ec2State(t, id); st != "terminated" {
			t.Errorf("excess %s is %s in EC2", id, st)
		}
	}
	recs := e.records(t, "big")
	if len(recs[store.StateReady]) != 1 || len(recs[store.StateStopped]) != 1 || len(recs) != 2 {
		t.Errorf("records after the lowered target: %v", recs)
	}

	// The pool leaves the configuration: its instances are scaled to zero.
	tg.set()
	pr = poolReport(t, pass(t, c), "big")
	if !pr.Removed || len(pr.Excess) != 2 || len(e.records(t, "big")) != 0 {
		t.Fatalf("removed pool: %+v", pr)
	}
}

// Large pools: every EC2 mutation carries at most 50 ids, creations at most 50 instances.
func TestConvergeBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("wide", 0, 60, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	pr := poolReport(t, pass(t, c), "wide")
	if len(pr.Created) != 60 || !slices.Equal(e.calls.of("CreateFleet"), []int{50, 10}) {
		t.Fatalf("created %d with fleets of %v; want 60 with 50 and 10", len(pr.Created), e.calls.of("CreateFleet"))
	}
	e.warmUp(t, "wide", nil, nil)
	pr = poolReport(t, pass(t, c), "wide")
	if len(pr.StoppedNow) != 60 || !slices.Equal(e.calls.of("StopInstances"), []int{50, 10}) {
		t.Fatalf("stopped %d with calls of %v; want 60 with 50 and 10", len(pr.StoppedNow), e.calls.of("StopInstances"))
	}
	// A new runner class spec: every instance is outdated and goes at once, in batches.
	tg.set(e.spec("wide", 0, 60, "v1-b"))
	pr = poolReport(t, pass(t, c), "wide")
	if len(pr.Outdated) != 60 || !slices.Equal(e.calls.of("TerminateInstances"), []int{50, 10}) || len(pr.Created) != 60 {
		t.Fatalf("rollout: %d outdated with terminations of %v, %d created", len(pr.Outdated), e.calls.of("TerminateInstances"), len(pr.Created))
	}
}

// A pool that fails is reported and skipped; the others converge. A pool whose configuration cannot
// be used is left exactly as it is.
func TestConvergeFailingPoolDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	broken := e.spec("broken", 1, 0, "v1-a")
	broken.Class.LaunchTemplateID = "lt-00000000000000000" // unknown to EC2: every fleet fails
	frozen := e.spec("frozen", 1, 0, "v1-a")
	tg.set(broken, frozen, e.spec("good", 1, 0, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	rep := pass(t, c)
	if pr := poolReport(t, rep, "broken"); pr.Err == nil || len(pr.Created) != 0 {
		t.Errorf("broken pool: %+v; want an error", pr)
	}
	if pr := poolReport(t, rep, "good"); pr.Err != nil || len(pr.Created) != 1 {
		t.Errorf("good pool: %+v; want one created", pr)
	}
	frozenIDs := poolReport(t, rep, "frozen").Created
	if len(rep.Failed()) != 1 || len(frozenIDs) != 1 {
		t.Fatalf("failed pools %+v, frozen created %v", rep.Failed(), frozenIDs)
	}
	// The cron job's error names the failed pool; the last report is kept for status.
	if err := c.Converge(t.Context()); err == nil || !strings.Contains(err.Error(), "pool broken") {
		t.Errorf("Converge = %v, want the broken pool's error", err)
	}
	if last, ok := c.Last(); !ok || len(last.Pools) != 3 {
		t.Errorf("Last = %+v, %v", last, ok)
	}

	// The frozen pool's configuration becomes unreadable and its target drops: nothing is touched.
	frozen.Err, frozen.Hot = errors.New("spec written by a newer provider"), 0
	tg.set(broken, frozen, e.spec("good", 1, 0, "v1-a"))
	e.clock.Add(time.Hour) // even past every deadline
	pr := poolReport(t, pass(t, c), "frozen")
	if pr.Skipped == "" || len(pr.Excess)+len(pr.Errored) != 0 {
		t.Errorf("frozen pool: %+v; want it skipped", pr)
	}
	if got := e.records(t, "frozen")[store.StateWarming]; len(got) != 1 || e.ec2State(t, got[0].ID) != "running" {
		t.Errorf("frozen pool's instance: %+v", got)
	}
}

// Pool jobs: an instance that registered is promoted to running; one whose registration failed is
// terminated and its job goes back to the job queue.
func TestConvergePoolJobInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("jobs", 2, 0, "v1-a"))
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	c := e.converger(t, tg.get, poolsize.Options{Jobs: jobs})
	pass(t, c)
	e.warmUp(t, "jobs", nil, nil)
	hot := poolReport(t, pass(t, c), "jobs").Readied
	ctx := t.Context()

	// Two jobs were served by the hot instances (as the pool worker does: ledger served, claimed).
	for i, id := range hot {
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(100 + i), RunID: 7, Repository: "acme/api", Labels: []string{"pool=jobs"}, Pool: "jobs"}
		served(t, e, j, id)
	}
	e.agentSignal(t, hot[0], store.SignalRecord{Signal: store.SignalRegistered, RunID: "job:100"})
	if err := e.st.PutSignal(ctx, hot[1], store.SignalRecord{Signal: store.SignalRegistrationFailed, RunID: "job:101", Detail: "simulated"}); err != nil {
		t.Fatal(err)
	}
	pr := poolReport(t, pass(t, c), "jobs")
	if !slices.Equal(pr.Promoted, []string{hot[0]}) || !slices.Equal(pr.Requeued, []string{"101"}) || len(pr.Created) != 2 {
		t.Fatalf("pass: %+v; want %s promoted, job 101 re-queued, 2 replacements", pr, hot[0])
	}
	if rec, _ := e.st.Get(ctx, hot[0]); rec.State != store.StateRunning || !rec.Threshold.Equal(e.clock.Now().Add(warmpool.DefaultMaxRuntime)) {
		t.Errorf("promoted record %+v", rec)
	}
	if rec, _ := e.st.Get(ctx, hot[1]); rec.State != store.StateTerminated {
		t.Errorf("failed instance record %s, want terminated", rec.State)
	}
	run, err := e.st.GetRun(ctx, "pooljob:101")
	if err != nil || run.Status != warmpool.JobQueued {
		t.Errorf("ledger of job 101: %+v %v; want queued again", run, err)
	}
	// The running instance is never touched again, whatever its age within its deadline.
	e.clock.Add(time.Hour)
	if pr := poolReport(t, pass(t, c), "jobs"); pr.Detached != 1 || slices.Contains(pr.Excess, hot[0]) {
		t.Errorf("later pass: %+v", pr)
	}
}

// served records a job as served by instance id, as the pool worker does.
func served(t testing.TB, e *env, j warmpool.Job, id string) {
	t.Helper()
	ctx := context.Background()
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "served"), e.st)
	if _, err := jobs.Enqueue(ctx, j); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	run, err := e.st.GetRun(ctx, "pooljob:"+itoa(j.JobID))
	if err != nil {
		t.Fatal(err)
	}
	run.Status, run.Result = warmpool.JobServed, []byte(`{"instanceId":"`+id+`","source":"hot"}`)
	if _, err := e.st.UpdateRun(ctx, run, run.Version); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Claim(ctx, id, j.RunKey(), e.clock.Now().Add(10*time.Minute), store.StateReady); err != nil {
		t.Fatalf("Claim %s: %v", id, err)
	}
}

// The warm-up pins the key the agent signs with (the instance's first sight, before any job); a
// pool-job instance is then promoted only on a registration signed by that key, never on one a job
// holding the instance role forged.
func TestConvergePinsTheAgentKeyAndIgnoresForgedRegistrations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("signed", 1, 0, "v1-a"))
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "signed-jobs"), e.st)
	c := e.converger(t, tg.get, poolsize.Options{Jobs: jobs})
	pass(t, c)
	ctx := t.Context()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	warming := e.records(t, "signed")[store.StateWarming]
	if len(warming) != 1 {
		t.Fatalf("warming %v, want one", warming)
	}
	id := warming[0].ID
	ok := store.SignalRecord{Signal: store.SignalPreRunnerOK}
	ok.Sign(id, key, e.clock.Now())
	if err := e.st.PutSignal(ctx, id, ok); err != nil {
		t.Fatal(err)
	}
	if hot := poolReport(t, pass(t, c), "signed").Readied; !slices.Equal(hot, []string{id}) {
		t.Fatalf("readied %v, want %s", hot, id)
	}
	if rec, err := e.st.Get(ctx, id); err != nil || rec.AgentKey != ok.Key {
		t.Fatalf("agent key after the warm-up %q, %v; want the signing key pinned", rec.AgentKey, err)
	}

	served(t, e, warmpool.Job{Action: warmpool.ActionQueued, JobID: 300, RunID: 7, Repository: "acme/api", Labels: []string{"pool=signed"}, Pool: "signed"}, id)
	if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: "job:300", Detail: "forged"}); err != nil {
		t.Fatal(err)
	}
	if pr := poolReport(t, pass(t, c), "signed"); len(pr.Promoted) != 0 {
		t.Fatalf("promoted %v on a forged registration", pr.Promoted)
	}
	reg := store.SignalRecord{Signal: store.SignalRegistered, RunID: "job:300"}
	reg.Sign(id, key, e.clock.Now())
	if err := e.st.PutSignal(ctx, id, reg); err != nil {
		t.Fatal(err)
	}
	if pr := poolReport(t, pass(t, c), "signed"); !slices.Equal(pr.Promoted, []string{id}) {
		t.Errorf("promoted %v on the agent's signed registration, want %s", pr.Promoted, id)
	}
}
