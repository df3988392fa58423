package warmpool_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestReclaimedJobIsRerunOnce: the runner of a pool job is reclaimed by EC2 (its agent signs the
// spot interruption notice) and GitHub reports the job failed. The worker re-runs the run's failed
// jobs through GitHub's API; the re-run job is served on on-demand capacity. When that job's runner
// is reclaimed too, the run is not re-run a second time.
func TestReclaimedJobIsRerunOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	spec := e.spec("spot", 1, 0, "v1-spot")
	hot := e.warm(t, spec, store.StateReady, 1)
	tg := &targets{}
	tg.set(spec)
	catalog := warmpool.NewCatalog(tg.get, time.Nanosecond, nil)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	sender := e.hook(t, catalog, jobs)
	w := e.worker(t, catalog, jobs)

	// A runner of the fake's own stands in for the job's runner, so that GitHub knows the job failed.
	gh := e.github(t)
	reg, err := gh.RegistrationToken(ctx, "acme/api")
	if err != nil {
		t.Fatal(err)
	}
	rc := githubfake.NewRunnerClient(e.ghURL, nil)
	if _, err := rc.Register(ctx, githubfake.RegisterOptions{URL: reg.URL, Token: reg.Token, Name: "stand-in", Labels: []string{"pool=spot"}}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	// reclaim serves the queued job on some instance, has EC2 reclaim that instance and GitHub
	// fail the job, and delivers the completion. It returns the instance.
	reclaim := func(jobID int64) store.Instance {
		t.Helper()
		rep := onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Served) > 0 })
		if len(rep.Served) != 1 || rep.Served[0].JobID != jobID {
			t.Fatalf("served %+v, want job %d", rep.Served, jobID)
		}
		in, err := e.st.Get(ctx, rep.Served[0].InstanceID)
		if err != nil {
			t.Fatal(err)
		}
		if in.AgentKey == "" { // a cold start's, pinned at its agent's first report
			e.pinKey(t, in.ID)
		}
		e.agentSignal(t, in.ID, store.SignalRecord{Signal: store.SignalSpotInterrupted, RunID: in.RunID, Detail: `{"action":"terminate","time":"2025-01-15T12:02:00Z"}`})
		job, err := rc.NextJob(ctx, 10*time.Second)
		if err != nil || job == nil || job.ID != jobID {
			t.Fatalf("stand-in runner got %+v, %v; want job %d", job, err, jobID)
		}
		if err := rc.Complete(ctx, jobID, "failure"); err != nil {
			t.Fatal(err)
		}
		ev, _ := e.gh.WorkflowJobEvent(jobID)
		ev.RunnerName, ev.Conclusion = warmpool.RunnerName(in.ID), "failure"
		if _, status, err := sender.SendWorkflowJob(ctx, "completed", ev); err != nil || status != 200 {
			t.Fatalf("completed webhook: %d %v", status, err)
		}
		onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
		return in
	}

	j1, _ := queueJob(t, e, sender, 41, "pool=spot")
	if in := reclaim(j1); in.ID != hot[0].ID {
		t.Fatalf("job %d served on %s, want the hot instance %s", j1, in.ID, hot[0].ID)
	}
	reruns := e.gh.Reruns()
	if len(reruns) != 1 || reruns[0].Job != j1 || reruns[0].RunID != 41 {
		t.Fatalf("reruns = %+v, want job %d of run 41 re-run once", reruns, j1)
	}

	// The re-run job is queued again: with no hot instance left, it is cold-started on-demand.
	ev, _ := e.gh.WorkflowJobEvent(reruns[0].NewJob)
	if _, status, err := sender.SendWorkflowJob(ctx, "queued", ev); err != nil || status != 200 {
		t.Fatalf("queued webhook of the re-run: %d %v", status, err)
	}
	second := reclaim(reruns[0].NewJob)
	if second.UsageClass != fleet.OnDemand {
		t.Errorf("re-run job served on %s capacity, want %s", second.UsageClass, fleet.OnDemand)
	}
	if n := len(e.gh.Reruns()); n != 1 {
		t.Errorf("reruns after a second reclaim = %d, want 1 (once only)", n)
	}
}
