package scalesets_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// servedJob queues a job on a one-hot-instance pool, serves it and returns the job, the instance
// and the instance's JIT credential.
func (e *env) servedJob(t *testing.T, w *pooljob.Worker, runID int64) (int64, store.Instance, store.Credential) {
	t.Helper()
	hot := e.warm(t, store.StateReady, 1)[0]
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
	id := e.gh.QueueScaleSetJob(org, "api", runID, setName)
	served := onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Served) == 1 }).Served[0]
	if served.JobID != e.number(id) || served.InstanceID != hot.ID {
		t.Fatalf("served %+v, want job %d on %s", served, id, hot.ID)
	}
	st, _ := e.gh.ScaleSet(org, setName)
	run := warmpool.Job{JobID: served.JobID, ScaleSet: setName, ScaleSetID: st.ID, ScaleSetScope: org, ScaleSetJob: githubfake.ScaleSetJobID(id)}.RunKey()
	cred, err := e.st.ReadCredential(t.Context(), hot.ID, store.CredentialRegistration, run)
	if err != nil || !cred.JIT {
		t.Fatalf("credential %+v, %v: want a JIT configuration", cred, err)
	}
	return id, hot, cred
}

// runner starts the instance's runner with its credential; jobs last d.
func (e *env) runner(t *testing.T, in store.Instance, cred store.Credential, d time.Duration) *fakerunner.Runner {
	t.Helper()
	fr, err := fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: t.TempDir(), WorkDir: t.TempDir(), JobDuration: d, PollWait: time.Second, Logger: logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fr.Register(t.Context(), cred, warmpool.RunnerName(in.ID)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	t.Cleanup(stop)
	go func() { _ = fr.Run(ctx) }()
	return fr
}

// TestCancelledAssignmentKeepsItsRunner (github.com's shape): no runner takes the assigned job in
// time, so the service cancels the assignment (JobCompleted, canceled, no runner) and assigns it
// again. The instance brought up for it is kept, nothing is served twice, and when its runner comes
// up it takes the reassigned job; its completion then ends the instance.
func TestCancelledAssignmentKeepsItsRunner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gh.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 300 * time.Millisecond, SessionIdle: time.Minute, StartTimeout: 2 * time.Second})
	r := e.start(t, "a", func(c *scalesets.Config) { c.CancelGrace = time.Minute })
	w := e.worker(t, r.m)
	id, hot, cred := e.servedJob(t, w, 800)
	eventually(t, "the assignment cancelled and made again", func() bool {
		return r.m.Metrics().Jobs(setName, "JobCompleted") >= 1 && r.m.Metrics().Jobs(setName, "JobAssigned") >= 2
	})
	if rep, _ := w.Once(t.Context()); len(rep.Served) > 0 || len(rep.Completed) > 0 {
		t.Errorf("after the reassignment the worker served %v and completed %v, want nothing", rep.Served, rep.Completed)
	}
	if got := e.ledger(t, id); got != warmpool.JobServed {
		t.Errorf("ledger after the cancelled assignment: %q, want served (its runner kept for the reassignment)", got)
	}
	if rec, _ := e.st.Get(t.Context(), hot.ID); !rec.State.Live() {
		t.Fatalf("instance brought up for the job: %s, want kept", rec.State)
	}
	fr := e.runner(t, hot, cred, 10*time.Millisecond)
	eventually(t, "the reassigned job run by the kept runner", func() bool { return slices.Contains(fr.Jobs(), id) })
	onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
	if rec, _ := e.st.Get(t.Context(), hot.ID); rec.State.Live() {
		t.Errorf("instance after its job completed: %s, want ended", rec.State)
	}
}

// TestVanishedDemandWithdrawsRunner (github.com's shape): the assignment is cancelled for the last
// time (3 reassignments, no runner took it): the runner brought up for it serves no demand; once
// CancelGrace passes without a reassignment its instance is ended and the runner withdrawn at
// GitHub.
func TestVanishedDemandWithdrawsRunner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gh.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 300 * time.Millisecond, SessionIdle: time.Minute, StartTimeout: 300 * time.Millisecond})
	r := e.start(t, "a", func(c *scalesets.Config) { c.CancelGrace = time.Second })
	e.jobs.WithdrawRunners(r.m)
	w := e.worker(t, r.m)
	id, hot, _ := e.servedJob(t, w, 810)
	name := warmpool.RunnerName(hot.ID)
	if !slices.ContainsFunc(e.gh.Runners(org, ""), func(rn githubfake.Runner) bool { return rn.Name == name }) {
		t.Fatalf("no runner %s at GitHub after the job was served", name)
	}
	eventually(t, "the job cancelled at GitHub", func() bool { j, _ := e.gh.Job(id); return j.Status == githubfake.JobCompleted })
	onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
	if rec, _ := e.st.Get(t.Context(), hot.ID); rec.State.Live() {
		t.Errorf("instance of the vanished job: %s, want ended", rec.State)
	}
	if got := e.ledger(t, id); got != warmpool.JobCompleted {
		t.Errorf("ledger of the vanished job: %q, want completed", got)
	}
	if slices.ContainsFunc(e.gh.Runners(org, ""), func(rn githubfake.Runner) bool { return rn.Name == name }) {
		t.Errorf("runner %s still at GitHub: the runner of the vanished job was not withdrawn", name)
	}
}

// TestLateCompletionKeepsRunningJob: a JobCompleted arrives while the job still runs
// (actions/runner#4492). Its instance is not ended while the runner is busy; the completion goes
// through once the job is really done.
func TestLateCompletionKeepsRunningJob(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) { lateCompletionKeepsRunningJob(t, e, 820, false) })
}

// lateCompletionKeepsRunningJob serves a job of run runID, injects its JobCompleted while its
// runner runs it, and checks the instance is kept until the job is done, then ended. With
// skipListing the runner listings leave the busy runner out.
func lateCompletionKeepsRunningJob(t *testing.T, e *env, runID int64, skipListing bool) {
	r := e.replica(t, "a")
	w := e.worker(t, r.m)
	id, hot, cred := e.servedJob(t, w, runID)
	if skipListing {
		e.skipRunnerOf(hot)
	}
	e.runner(t, hot, cred, 8*time.Second)
	eventually(t, "the job running", func() bool { j, _ := e.gh.Job(id); return j.Status == githubfake.JobInProgress })
	early := map[string]any{
		"messageType": "JobCompleted", "jobId": githubfake.ScaleSetJobID(id), "ownerName": org, "repositoryName": "api",
		"workflowRunId": runID, "runnerName": warmpool.RunnerName(hot.ID), "runnerId": 1, "result": "succeeded",
	}
	if e.shape == githubfake.ShapeAvailable {
		early["runnerRequestId"] = id
	}
	body, _ := json.Marshal([]any{early})
	e.gh.InjectScaleSetMessage(org, setName, "RunnerScaleSetJobMessages", string(body))
	onceUntil(t, w, func(r pooljob.BatchReport) bool {
		return slices.Contains(r.Requeued, e.number(id)) || slices.Contains(r.Completed, e.number(id))
	})
	if j, _ := e.gh.Job(id); j.Status != githubfake.JobInProgress {
		t.Fatalf("job %s before the check: the test's premise (a completion while it runs) does not hold", j.Status)
	}
	if rec, _ := e.st.Get(t.Context(), hot.ID); !rec.State.Live() || rec.State == store.StateTerminating {
		t.Fatalf("instance running the job after an early JobCompleted (runner left out of the listing: %v): %s, want kept", skipListing, rec.State)
	}
	eventually(t, "the job done", func() bool { j, _ := e.gh.Job(id); return j.Status == githubfake.JobCompleted })
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		_, _ = w.Once(t.Context())
		if rec, _ := e.st.Get(t.Context(), hot.ID); !rec.State.Live() {
			return
		}
	}
	t.Errorf("instance still live after its job completed")
}
