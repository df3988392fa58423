package scalesets_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

func onceUntil(t *testing.T, w *pooljob.Worker, ok func(pooljob.BatchReport) bool) pooljob.BatchReport {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		rep, err := w.Once(t.Context())
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("Once: %v", err)
		}
		if ok(rep) {
			return rep
		}
	}
	t.Fatal("no batch came as expected")
	return pooljob.BatchReport{}
}

// TestScaleSetJobsServedFromThePool: scale set jobs go through the pool worker like webhook jobs:
// the hot instance first, then the stopped one (started), then a cold start; each gets a JIT runner
// of the scale set. The hot instance's agent registers with it and its runner takes a job of the
// scale set; JobCompleted ends the instance through the completion path, and the capacity the
// listener announces counts the instances serving the scale set.
func TestScaleSetJobsServedFromThePool(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		r := e.replica(t, "a")
		w := e.worker(t, r.m)
		hot := e.warm(t, store.StateReady, 1)
		stopped := e.warm(t, store.StateStopped, 1)
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })

		byNumber := map[int64]int64{}
		for i := range 3 {
			id := e.gh.QueueScaleSetJob(org, "api", int64(600+i), setName)
			byNumber[e.number(id)] = id
		}
		bySource := map[string]pooljob.Served{}
		for deadline := time.Now().Add(30 * time.Second); len(bySource) < 3 && time.Now().Before(deadline); {
			rep, err := w.Once(t.Context())
			if err != nil {
				t.Logf("Once: %v", err)
			}
			for _, s := range rep.Served {
				bySource[s.Source] = s
			}
		}
		if bySource[warmpool.SourceHot].InstanceID != hot[0].ID || bySource[warmpool.SourceStarted].InstanceID != stopped[0].ID || bySource[warmpool.SourceCreated].InstanceID == "" {
			t.Fatalf("served %+v: want the hot instance, then the stopped one, then a cold start", bySource)
		}
		eventually(t, "the capacity announced to count the three instances", func() bool {
			st, _ := e.gh.ScaleSet(org, setName)
			return st.MaxCapacity == e.set.MaxRunners-3
		})

		// The hot instance's agent: its credential is a JIT configuration of the scale set.
		served := bySource[warmpool.SourceHot]
		st, _ := e.gh.ScaleSet(org, setName)
		run := warmpool.Job{JobID: served.JobID, ScaleSet: setName, ScaleSetID: st.ID, ScaleSetScope: org, ScaleSetJob: githubfake.ScaleSetJobID(byNumber[served.JobID])}.RunKey()
		cred, err := e.st.ReadCredential(t.Context(), hot[0].ID, store.CredentialRegistration, run)
		if err != nil || !cred.JIT {
			t.Fatalf("hot instance's credential %+v, %v: want a JIT configuration for %s", cred, err, run)
		}
		// The agent's runner (the fake actions runner the agent drives) registers with it and runs one job.
		fr, err := fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: t.TempDir(), WorkDir: t.TempDir(), JobDuration: 10 * time.Millisecond, PollWait: 2 * time.Second, Logger: logger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := fr.Register(t.Context(), cred, warmpool.RunnerName(hot[0].ID)); err != nil {
			t.Fatalf("the agent's runner refused the scale set's JIT config: %v", err)
		}
		rctx, stopRunner := context.WithCancel(t.Context())
		defer stopRunner()
		go func() { _ = fr.Run(rctx) }()
		eventually(t, "the agent's runner to run a job of the scale set", func() bool { return len(fr.Jobs()) == 1 })
		job := struct{ ID int64 }{fr.Jobs()[0]}
		if j, _ := e.gh.Job(job.ID); j.Status != githubfake.JobCompleted || j.RunnerName != warmpool.RunnerName(hot[0].ID) {
			t.Errorf("job %d at GitHub: %+v, want completed by the hot instance's runner", job.ID, j)
		}
		// JobCompleted names the hot instance's runner: the worker ends it (no recycling in this pool).
		onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
		if rec, _ := e.st.Get(t.Context(), hot[0].ID); rec.State != store.StateTerminated {
			t.Errorf("hot instance after its job completed: %s, want terminated", rec.State)
		}
		if got := e.ledger(t, job.ID); got != warmpool.JobCompleted {
			t.Errorf("ledger of the completed job %d: %q", job.ID, got)
		}
	})
}

// TestRunnerThatNeverComesUpIsWithdrawn: a scale set job is served by a hot instance whose agent
// never registers its just-in-time runner. When its claim deadline passes, convergence ends the
// instance and the job queue withdraws the runner at GitHub (so a late boot cannot take the job)
// and leaves the job for the Actions service to offer again; the service does (no runner of the set
// took it in time), and the job is served once more, by another instance.
func TestRunnerThatNeverComesUpIsWithdrawn(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.gh.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 300 * time.Millisecond, SessionIdle: time.Minute, StartTimeout: time.Second})
		r := e.replica(t, "a")
		e.jobs.WithdrawRunners(r.m)
		w := e.worker(t, r.m)
		e.warm(t, store.StateReady, 2)
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })

		id := e.gh.QueueScaleSetJob(org, "api", 700, setName)
		first := onceUntil(t, w, func(rep pooljob.BatchReport) bool { return len(rep.Served) == 1 }).Served[0]
		name := warmpool.RunnerName(first.InstanceID)
		if !slices.ContainsFunc(e.gh.Runners(org, ""), func(rn githubfake.Runner) bool { return rn.Name == name }) {
			t.Fatalf("no runner %s at GitHub after the job was served", name)
		}

		// The claim deadline (10 min) has passed for convergence: the instance never registered.
		later := func() time.Time { return time.Now().Add(11 * time.Minute) }
		conv, err := poolsize.NewConverger(e.st, e.ec2, fleet.New(e.ec2, fleet.Options{Logger: logger()}), warmpool.StaticTargets(e.spec()),
			poolsize.Options{DeploymentID: deployment, Jobs: e.jobs, Now: later, Logger: logger()})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := conv.Pass(t.Context())
		if err != nil {
			t.Fatalf("convergence pass: %v", err)
		}
		pr, _ := rep.Pool(poolName)
		if len(pr.Requeued) != 1 {
			t.Fatalf("convergence re-queued %v, want the job whose runner never came up", pr.Requeued)
		}
		if rec, _ := e.st.Get(t.Context(), first.InstanceID); rec.State.Live() {
			t.Errorf("instance %s that never registered is %s, want ended", first.InstanceID, rec.State)
		}
		if slices.ContainsFunc(e.gh.Runners(org, ""), func(rn githubfake.Runner) bool { return rn.Name == name }) {
			t.Errorf("runner %s still at GitHub: its JIT configuration was not withdrawn", name)
		}
		if n := r.m.Metrics().Withdrawn(org); n != 1 {
			t.Errorf("runners withdrawn = %d, want 1", n)
		}
		if got := e.ledger(t, id); got != warmpool.JobQueued {
			t.Errorf("ledger of job %d after the withdrawal: %q, want queued (left for the service to offer again)", id, got)
		}

		// The service offers the job again; the listener acquires it and another instance serves it.
		again := onceUntil(t, w, func(rep pooljob.BatchReport) bool { return len(rep.Served) == 1 }).Served[0]
		if again.JobID != e.number(id) || again.InstanceID == first.InstanceID {
			t.Errorf("served again: %+v, want job %d on another instance than %s", again, id, first.InstanceID)
		}
		if got := e.ledger(t, id); got != warmpool.JobServed {
			t.Errorf("ledger of job %d: %q, want served", id, got)
		}
	})
}
