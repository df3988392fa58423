// The webhook path end to end: signed workflow_job webhooks from the GitHub fake's sender into the
// real handler, the job queue on fauxqs, pool workers picking hot and stopped instances (several
// workers at once), cold starts for the overflow, just-in-time runners at the GitHub fake, start
// failures, completions, and redeliveries.
package warmpool_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const hookSecret = "burst-secret"

func (e *env) github(t testing.TB) *ghaccess.Client {
	t.Helper()
	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.ghURL, Token: e.gh.PAT(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return gh
}

// worker is one replica's pool worker, with its own GitHub client, registrar and starter.
func (e *env) worker(t testing.TB, pools pooljob.Pools, jobs *pooljob.JobQueue, opts ...func(*pooljob.WorkerConfig)) *pooljob.Worker {
	t.Helper()
	gh := e.github(t)
	copts := claim.Options{Logger: quiet, Now: e.clock.Now, StartWait: 500 * time.Millisecond}
	reg := claim.NewRegistrar(e.st, gh, e.calls, copts)
	cfg := pooljob.WorkerConfig{
		Store: e.st, EC2: e.calls, Fleet: fleet.New(e.calls, fleet.Options{Logger: quiet}), Starter: claim.NewStarter(e.st, e.calls, reg, copts),
		Discarder: reg, GitHub: gh, Jobs: jobs, Pools: pools, DeploymentID: deployment,
		WaitTime: time.Second, Lease: 30 * time.Second, RetryDelay: time.Second, Now: e.clock.Now, Logger: quiet,
	}
	for _, o := range opts {
		o(&cfg)
	}
	w, err := pooljob.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// hook serves the webhook handler and returns a sender signed with its secret.
func (e *env) hook(t testing.TB, pools webhook.Pools, jobs *pooljob.JobQueue) *githubfake.WebhookSender {
	t.Helper()
	h, err := webhook.New(webhook.Config{Secret: hookSecret, Deliveries: e.st, Pools: pools, Jobs: jobs, GitHub: e.github(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &githubfake.WebhookSender{URL: srv.URL, Secret: hookSecret}
}

// warm launches instances for a pool and records them hot (ready) or stopped (stopped in EC2 too),
// as convergence leaves them: their agents' keys pinned at their warm-up.
func (e *env) warm(t testing.TB, spec warmpool.PoolSpec, state store.State, n int) []store.Instance {
	t.Helper()
	return e.warmWith(t, spec, state, n, true)
}

// warmWith is warm, with the agents' keys pinned or not (a record of an agent that never signed).
func (e *env) warmWith(t testing.TB, spec warmpool.PoolSpec, state store.State, n int, pinned bool) []store.Instance {
	t.Helper()
	if n == 0 {
		return nil
	}
	ctx := context.Background()
	ro, err := e.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceTypeC6iLarge, SubnetId: aws.String(subnetA),
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	out := make([]store.Instance, len(ro.Instances))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, inst := range ro.Instances {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			id := aws.ToString(inst.InstanceId)
			if _, err := e.st.Create(ctx, store.Instance{
				ID: id, State: store.StateWarming, Threshold: e.clock.Now().Add(time.Hour), UsageClass: fleet.OnDemand,
				InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: runnerClass, Pool: spec.Name, Scope: "acme",
				Zone: "us-east-1a", SpecHash: spec.SpecHash,
			}); err != nil {
				t.Errorf("Create %s: %v", id, err)
				return
			}
			if pinned {
				e.pinKey(t, id) // its warm-up pinned its agent's key
			}
			threshold := e.clock.Now().Add(10 * time.Minute)
			if state == store.StateStopped {
				threshold = e.clock.Now().Add(24 * time.Hour)
			}
			rec, err := e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: state, Threshold: threshold})
			if err != nil {
				t.Errorf("%s to %s: %v", id, state, err)
				return
			}
			out[i] = rec
		})
	}
	wg.Wait()
	if state == store.StateStopped {
		for chunk := range slices.Chunk(ids(out), 50) {
			if _, err := e.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: chunk}); err != nil {
				t.Fatalf("StopInstances: %v", err)
			}
		}
	}
	return out
}

func ids(recs []store.Instance) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// queueJob queues a job at the GitHub fake and delivers its queued webhook.
func queueJob(t testing.TB, e *env, sender *githubfake.WebhookSender, runID int64, labels ...string) (jobID int64, delivery string) {
	t.Helper()
	jobID = e.gh.QueueJob("acme", "api", runID, labels)
	ev, _ := e.gh.WorkflowJobEvent(jobID)
	delivery, status, err := sender.SendWorkflowJob(context.Background(), "queued", ev)
	if err != nil || status != 200 {
		t.Fatalf("webhook for job %d: status %d, %v", jobID, status, err)
	}
	return jobID, delivery
}

// drainWorkers runs workers concurrently until want jobs are served (or the deadline passes), and
// returns their batch reports.
func drainWorkers(t testing.TB, want int, workers ...*pooljob.Worker) []pooljob.BatchReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	var reps []pooljob.BatchReport
	served := 0
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				rep, err := w.Once(ctx)
				if err != nil && ctx.Err() == nil {
					t.Errorf("Once: %v", err)
				}
				mu.Lock()
				reps = append(reps, rep)
				served += len(rep.Served)
				done := served >= want
				mu.Unlock()
				if done {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if served < want {
		t.Fatalf("served %d jobs, want %d", served, want)
	}
	return reps
}

// The seed's burst: 200 queued jobs over 3 pools holding 120 warm instances (hot and stopped), two
// workers: 120 served warm, 80 cold starts, no instance picked twice, StartInstances at most once
// per 50 started in each batch, and a redelivered webhook changes nothing. A job asking for an
// unknown pool has its run cancelled.
func TestWebhookBurst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type poolPlan struct{ hot, stopped, jobs int }
	plan := map[string]poolPlan{"alpha": {25, 25, 80}, "beta": {20, 20, 70}, "gamma": {10, 20, 50}}
	var specs []warmpool.PoolSpec
	warmIDs := map[string]string{} // instance -> pool
	for _, name := range slices.Sorted(maps.Keys(plan)) {
		p := plan[name]
		spec := e.spec(name, p.hot, p.stopped, "v1-"+name)
		specs = append(specs, spec)
		for _, in := range slices.Concat(e.warm(t, spec, store.StateReady, p.hot), e.warm(t, spec, store.StateStopped, p.stopped)) {
			warmIDs[in.ID] = name
		}
	}
	if len(warmIDs) != 120 {
		t.Fatalf("%d warm instances, want 120", len(warmIDs))
	}
	catalog := warmpool.NewCatalog(warmpool.StaticTargets(specs...), time.Minute, e.clock.Now)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	sender := e.hook(t, catalog, jobs)

	// 200 webhooks, 8 at a time, with the deterministic label form.
	type sent struct {
		job      int64
		pool     string
		delivery string
	}
	var all []sent
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	run := int64(5000)
	for _, name := range slices.Sorted(maps.Keys(plan)) {
		for range plan[name].jobs {
			run++
			runID := run
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				job, d := queueJob(t, e, sender, runID, "self-hosted", fmt.Sprintf("runs-on=%d/pool=%s", runID, name))
				mu.Lock()
				all = append(all, sent{job, name, d})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	unknownJob, _ := queueJob(t, e, sender, 9999, "pool=nope")

	began := time.Now()
	reps := drainWorkers(t, 200, e.worker(t, catalog, jobs), e.worker(t, catalog, jobs))
	batches, startCalls := 0, 0
	for _, rep := range reps {
		if rep.Received > 0 {
			batches++
		}
		for _, g := range rep.Groups {
			startCalls += g.StartCalls
		}
	}
	t.Logf("200 jobs served by 2 workers in %s: %d batches, %d StartInstances calls (%d ids), %d CreateFleet calls",
		time.Since(began).Round(time.Millisecond), batches, startCalls, sum(e.calls.of("StartInstances")), len(e.calls.of("CreateFleet")))

	// Every job served once, every instance picking at most one job.
	byJob := map[int64]pooljob.Served{}
	byInstance := map[string]int64{}
	sources := map[string]map[string]int{}
	for _, rep := range reps {
		for _, s := range rep.Served {
			if prev, dup := byJob[s.JobID]; dup {
				t.Errorf("job %d served twice: %+v and %+v", s.JobID, prev, s)
			}
			if prev, dup := byInstance[s.InstanceID]; dup {
				t.Errorf("instance %s picked for jobs %d and %d", s.InstanceID, prev, s.JobID)
			}
			byJob[s.JobID], byInstance[s.InstanceID] = s, s.JobID
			if sources[s.Pool] == nil {
				sources[s.Pool] = map[string]int{}
			}
			sources[s.Pool][s.Source]++
			if s.Source == warmpool.SourceCreated {
				// A cold start carries the tags of a warm instance of its pool, spec hash included.
				if v, _ := e.ec2srv.Instance(s.InstanceID); v.Tags[tags.Pool] != s.Pool || v.Tags[tags.SpecHash] != "v1-"+s.Pool ||
					v.Tags[tags.Deployment] != deployment {
					t.Errorf("cold-started %s of pool %s: tags %v", s.InstanceID, s.Pool, v.Tags)
				}
			}
		}
		for _, g := range rep.Groups {
			if limit := (g.Started + 49) / 50; g.StartCalls > limit {
				t.Errorf("batch of pool %s started %d with %d StartInstances calls, want at most %d", g.Pool, g.Started, g.StartCalls, limit)
			}
			if g.Err != nil {
				t.Errorf("batch of pool %s: %v", g.Pool, g.Err)
			}
		}
	}
	for _, s := range all {
		if got, ok := byJob[s.job]; !ok || got.Pool != s.pool {
			t.Errorf("job %d of pool %s served as %+v", s.job, s.pool, got)
		}
	}
	wantSources := map[string]map[string]int{
		"alpha": {warmpool.SourceHot: 25, warmpool.SourceStarted: 25, warmpool.SourceCreated: 30},
		"beta":  {warmpool.SourceHot: 20, warmpool.SourceStarted: 20, warmpool.SourceCreated: 30},
		"gamma": {warmpool.SourceHot: 10, warmpool.SourceStarted: 20, warmpool.SourceCreated: 20},
	}
	if !maps.EqualFunc(sources, wantSources, maps.Equal) {
		t.Errorf("served by pool and source %v, want %v", sources, wantSources)
	}
	for id, pool := range warmIDs {
		if _, ok := byInstance[id]; !ok {
			t.Errorf("warm instance %s of %s not picked while its pool overflowed", id, pool)
		}
	}
	for _, n := range e.calls.of("StartInstances") {
		if n > 50 {
			t.Errorf("a StartInstances call carried %d ids", n)
		}
	}

	// The instances hold a runner bound to their job: record claimed (or created) for the job,
	// started in EC2, a JIT runner with the job's labels at GitHub, its config as the credential.
	runners := map[string]githubfake.Runner{}
	for _, r := range e.gh.Runners("acme", "api") {
		runners[r.Name] = r
	}
	if len(runners) != 200 {
		t.Errorf("%d runners at GitHub, want 200", len(runners))
	}
	for id, job := range byInstance {
		rec, err := e.st.Get(t.Context(), id)
		if err != nil || rec.RunID != warmpool.JobRunID(job) || (rec.State != store.StateClaimed && rec.State != store.StateCreated) {
			t.Errorf("instance %s: record %+v, %v; want claimed or created for job %d", id, rec, err, job)
			continue
		}
		if st := e.ec2State(t, id); st != "running" {
			t.Errorf("instance %s of job %d is %s in EC2", id, job, st)
		}
		r, ok := runners[warmpool.RunnerName(id)]
		if !ok || !r.JIT || !r.Ephemeral || !slices.ContainsFunc(r.Labels, func(l string) bool { return strings.Contains(l, "/pool=") }) {
			t.Errorf("runner of %s: %+v", id, r)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byInstance))[:5] {
		cred, err := e.st.TakeCredential(t.Context(), id, store.CredentialRegistration, warmpool.JobRunID(byInstance[id]))
		if err != nil || !cred.JIT || cred.Token == "" {
			t.Errorf("credential of %s: %+v, %v", id, cred, err)
		}
	}

	// The unknown pool's run was cancelled, and nothing was queued for it.
	cancelled := e.gh.CancelledRuns()
	if len(cancelled) != 1 || cancelled[0].RunID != 9999 {
		t.Errorf("cancelled runs %+v, want run 9999", cancelled)
	}
	if j, _ := e.gh.Job(unknownJob); j.Status != githubfake.JobCompleted || j.Conclusion != "cancelled" {
		t.Errorf("job of the unknown pool: %+v", j)
	}

	// Redeliveries change nothing: no message, no instance, no runner.
	instancesBefore := len(e.ec2srv.Instances())
	for _, s := range all[:20] {
		status, err := sender.Redeliver(t.Context(), s.delivery)
		if err != nil || status != 200 {
			t.Errorf("redelivery of %s: %d %v", s.delivery, status, err)
		}
	}
	w := e.worker(t, catalog, jobs)
	for range 2 {
		rep, err := w.Once(t.Context())
		if err != nil || rep.Received != 0 {
			t.Errorf("after redeliveries: %+v, %v; want nothing received", rep, err)
		}
	}
	if n := len(e.ec2srv.Instances()); n != instancesBefore {
		t.Errorf("instances %d after redeliveries, %d before", n, instancesBefore)
	}
	if n := len(e.gh.Runners("acme", "api")); n != 200 {
		t.Errorf("runners %d after redeliveries, want 200", n)
	}
}

// One job's life through the worker and the converger: a stopped instance that cannot start has
// its job re-queued (and served cold next), a registered instance is promoted, completions end the
// instances, a duplicate message is served once, and a pool removed after its jobs were queued
// cancels them.
func TestWorkerJobLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec("solo", 1, 1, "v1-solo")
	hot := e.warm(t, spec, store.StateReady, 1)
	broken := e.warm(t, spec, store.StateStopped, 1)
	// Terminated behind the table's back: StartInstances will refuse it.
	if _, err := e.ec2.TerminateInstances(t.Context(), &ec2.TerminateInstancesInput{InstanceIds: ids(broken)}); err != nil {
		t.Fatal(err)
	}
	tg := &targets{}
	tg.set(spec)
	catalog := warmpool.NewCatalog(tg.get, time.Nanosecond, nil)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	sender := e.hook(t, catalog, jobs)
	w := e.worker(t, catalog, jobs)

	j1, _ := queueJob(t, e, sender, 1, "pool=solo")
	j2, _ := queueJob(t, e, sender, 2, "pool=solo")
	// Whichever job comes first takes the hot instance; the other's stopped instance will not start,
	// so that job goes back to the queue and is cold-started on its next turn.
	bySource := map[string]pooljob.Served{}
	var requeued []int64
	for deadline := time.Now().Add(20 * time.Second); len(bySource) < 2 && time.Now().Before(deadline); {
		rep, err := w.Once(t.Context())
		if err != nil {
			t.Logf("Once: %v", err)
		}
		for _, s := range rep.Served {
			bySource[s.Source] = s
		}
		requeued = append(requeued, rep.Requeued...)
	}
	hotJob, coldJob := bySource[warmpool.SourceHot], bySource[warmpool.SourceCreated]
	if hotJob.InstanceID != hot[0].ID || coldJob.InstanceID == "" || hotJob.JobID == coldJob.JobID || !slices.Equal(requeued, []int64{coldJob.JobID}) {
		t.Fatalf("served %+v, re-queued %v; want one job on the hot instance, the other re-queued once then cold-started", bySource, requeued)
	}
	if rec, _ := e.st.Get(t.Context(), broken[0].ID); rec.State != store.StateTerminated {
		t.Errorf("unstartable instance: record %s, want terminated", rec.State)
	}
	cold := coldJob.InstanceID
	if hotJob.JobID != j1 {
		j1, j2 = j2, j1
	}
	// Served, both stay listed among the pool's jobs in progress with their run and the
	// webhook's workflow_name (the autoscaler's runs in progress), until they complete.
	listed, err := e.st.PoolJobs(t.Context(), "solo")
	if err != nil || len(listed) != 2 {
		t.Fatalf("pool jobs %+v %v; want both served jobs", listed, err)
	}
	for _, pj := range listed {
		if pj.Status != warmpool.JobServed || pj.Workflow != "CI" || pj.RunID == "" || pj.Attempt != 1 || pj.Repository != "acme/api" {
			t.Errorf("pool job %+v; want served, of a run of acme/api's CI", pj)
		}
	}
	// The webhook's head_branch and repository.default_branch are on each job's ledger record, as
	// full refs, for the runner cache's scope (warmpool.LedgerKey names it from the instance's run).
	for _, j := range []int64{j1, j2} {
		k, ok := warmpool.LedgerKey(warmpool.JobRunID(j))
		if r, err := e.st.GetRun(t.Context(), k); !ok || err != nil || r.Ref != "refs/heads/main" || r.DefaultBranch != "refs/heads/main" || r.Event != "" {
			t.Errorf("ledger record %s of job %d: %+v, %v; want the webhook's refs/heads/main twice and no event", k, j, r, err)
		}
	}

	// The hot instance's agent registers: the converger promotes it.
	e.agentSignal(t, hot[0].ID, store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunID(j1)})
	tg.set(e.spec("solo", 0, 0, "v1-solo"))
	c := e.converger(t, tg.get, poolsize.Options{Jobs: jobs})
	if pr := poolReport(t, pass(t, c), "solo"); !slices.Equal(pr.Promoted, []string{hot[0].ID}) {
		t.Fatalf("converger: %+v; want the hot instance promoted", pr)
	}

	// Job 1 ran on it and completed; job 2 was cancelled before a runner took it.
	ev1, _ := e.gh.WorkflowJobEvent(j1)
	ev1.RunnerName, ev1.Conclusion = warmpool.RunnerName(hot[0].ID), "success"
	ev2, _ := e.gh.WorkflowJobEvent(j2)
	ev2.Conclusion = "cancelled"
	for _, ev := range []githubfake.WorkflowJobEvent{ev1, ev2} {
		if _, status, err := sender.SendWorkflowJob(t.Context(), "completed", ev); err != nil || status != 200 {
			t.Fatalf("completed webhook: %d %v", status, err)
		}
	}
	rep := onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
	if len(rep.Completed) != 2 {
		rep2 := onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Completed) > 0 })
		rep.Completed = append(rep.Completed, rep2.Completed...)
	}
	if len(rep.Completed) != 2 {
		t.Fatalf("completed %v, want both jobs", rep.Completed)
	}
	for _, id := range []string{hot[0].ID, cold} {
		if rec, _ := e.st.Get(t.Context(), id); rec.State != store.StateTerminated || e.ec2State(t, id) != "terminated" {
			t.Errorf("instance %s after completion: record %s, EC2 %s", id, rec.State, e.ec2State(t, id))
		}
	}
	if run, err := e.st.GetRun(t.Context(), fmt.Sprintf("pooljob:%d", j1)); err != nil || run.Status != warmpool.JobCompleted {
		t.Errorf("ledger of job %d: %+v %v", j1, run, err)
	}
	if listed, err := e.st.PoolJobs(t.Context(), "solo"); err != nil || len(listed) != 0 {
		t.Errorf("pool jobs after completion: %+v %v; want none", listed, err)
	}

	// A job queued twice (the first send's outcome unknown) is served once.
	dup := warmpool.Job{Action: warmpool.ActionQueued, JobID: 777, RunID: 77, Repository: "acme/api", Labels: []string{"pool=solo"}, Pool: "solo"}
	for range 2 {
		if res, err := jobs.Enqueue(t.Context(), dup); err != nil || res != pooljob.Enqueued {
			t.Fatalf("Enqueue: %s %v", res, err)
		}
	}
	var served []pooljob.Served
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		r, err := w.Once(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		served = append(served, r.Served...)
		if r.Received == 0 && len(served) > 0 {
			break
		}
	}
	if len(served) != 1 || served[0].JobID != 777 {
		t.Errorf("duplicate messages served %+v, want once", served)
	}
	if res, err := jobs.Enqueue(t.Context(), dup); err != nil || res != pooljob.Duplicate {
		t.Errorf("Enqueue of a served job: %s %v; want duplicate", res, err)
	}

	// The pool leaves the configuration while a job of it waits: the run is cancelled.
	tg.set()
	gone := warmpool.Job{Action: warmpool.ActionQueued, JobID: 888, RunID: 88, Repository: "acme/api", Labels: []string{"pool=solo"}, Pool: "solo"}
	if _, err := jobs.Enqueue(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	rep = onceUntil(t, w, func(r pooljob.BatchReport) bool { return r.Received > 0 })
	if !slices.Equal(rep.Cancelled, []int64{888}) || !slices.ContainsFunc(e.gh.CancelledRuns(), func(c githubfake.CancelledRun) bool { return c.RunID == 88 }) {
		t.Errorf("job of a removed pool: %+v, cancelled runs %+v", rep, e.gh.CancelledRuns())
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// onceUntil runs batches until one satisfies ok (bounded).
func onceUntil(t testing.TB, w *pooljob.Worker, ok func(pooljob.BatchReport) bool) pooljob.BatchReport {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
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

// A worker that died half-way (its lease ran out, the job's message came back): an instance its agent
// registered for the job is adopted; one that never registered is discarded and the job served anew.
func TestWorkerTakesOverAnInterruptedAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec("solo", 3, 0, "v1-solo")
	hot := e.warm(t, spec, store.StateReady, 3)
	catalog := warmpool.NewCatalog(warmpool.StaticTargets(spec), time.Minute, e.clock.Now)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	ctx := t.Context()
	interrupted := func(jobID int64, inst store.Instance, registered bool) {
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: jobID, RunID: jobID, Repository: "acme/api", Labels: []string{"pool=solo"}, Pool: "solo"}
		if _, err := jobs.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
		run, err := e.st.GetRun(ctx, fmt.Sprintf("pooljob:%d", jobID))
		if err != nil {
			t.Fatal(err)
		}
		run.Status = warmpool.JobServing
		if _, err := e.st.UpdateRun(ctx, run, run.Version); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Claim(ctx, inst.ID, j.RunKey(), e.clock.Now().Add(10*time.Minute), store.StateReady); err != nil {
			t.Fatal(err)
		}
		if registered {
			e.agentSignal(t, inst.ID, store.SignalRecord{Signal: store.SignalRegistered, RunID: j.RunKey()})
		}
	}
	interrupted(11, hot[0], true)
	interrupted(12, hot[1], false)
	e.clock.Add(31 * time.Second) // past the first attempt's lease

	w := e.worker(t, catalog, jobs)
	got := map[int64]pooljob.Served{}
	for deadline := time.Now().Add(15 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		rep, err := w.Once(ctx)
		if err != nil {
			t.Logf("Once: %v", err)
		}
		for _, s := range rep.Served {
			got[s.JobID] = s
		}
	}
	if s := got[11]; s.InstanceID != hot[0].ID || s.Source != warmpool.SourceAdopted {
		t.Errorf("job 11: %+v; want the registered instance adopted", s)
	}
	if s := got[12]; s.InstanceID != hot[2].ID || s.Source != warmpool.SourceHot {
		t.Errorf("job 12: %+v; want served afresh by the third hot instance", s)
	}
	if rec, _ := e.st.Get(ctx, hot[1].ID); rec.State != store.StateTerminated {
		t.Errorf("unregistered instance of the interrupted attempt: %s, want terminated", rec.State)
	}
	for _, id := range []int64{11, 12} {
		if run, _ := e.st.GetRun(ctx, fmt.Sprintf("pooljob:%d", id)); run.Status != warmpool.JobServed {
			t.Errorf("ledger of job %d: %s", id, run.Status)
		}
	}
}

// TestSlowStartKeepsItsLease: a job served by a stopped instance whose start outlasts the worker's
// lease (3 s of real time for the message's visibility; the clock also jumps 10 s, past the ledger's
// lease). The worker renews both while it starts the instance, so a second worker polling all along
// never takes the job over: the job is served once, by the started instance, which is not discarded.
func TestSlowStartKeepsItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	spec := e.spec("slow", 0, 1, "v1-slow")
	stopped := e.warm(t, spec, store.StateStopped, 1)
	catalog := warmpool.NewCatalog(warmpool.StaticTargets(spec), time.Minute, e.clock.Now)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	starting := make(chan struct{})
	var once sync.Once
	e.calls.beforeStart = func() {
		once.Do(func() {
			close(starting)
			e.clock.Add(10 * time.Second)
			time.Sleep(4 * time.Second)
		})
	}
	lease := func(c *pooljob.WorkerConfig) { c.Lease = 3 * time.Second }
	a, b := e.worker(t, catalog, jobs, lease), e.worker(t, catalog, jobs, lease)
	j := warmpool.Job{Action: warmpool.ActionQueued, JobID: 21, RunID: 21, Repository: "acme/api", Labels: []string{"pool=slow"}, Pool: "slow"}
	if _, err := jobs.Enqueue(ctx, j); err != nil {
		t.Fatal(err)
	}
	var repA pooljob.BatchReport
	done := make(chan error, 1)
	go func() {
		var err error
		for len(repA.Served) == 0 && err == nil && ctx.Err() == nil {
			repA, err = a.Once(ctx)
		}
		done <- err
	}()
	select {
	case <-starting:
	case err := <-done:
		t.Fatalf("the first worker finished without starting an instance: %+v, %v", repA, err)
	}
	var byB []pooljob.Served
	for finished := false; !finished; {
		rep, err := b.Once(ctx)
		if err != nil {
			t.Logf("second worker: %v", err)
		}
		byB = append(byB, rep.Served...)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("first worker: %v", err)
			}
			finished = true
		default:
		}
	}
	if len(repA.Served) != 1 || repA.Served[0].InstanceID != stopped[0].ID || repA.Served[0].Source != warmpool.SourceStarted {
		t.Errorf("first worker served %+v, want job 21 by the started %s", repA.Served, stopped[0].ID)
	}
	if len(byB) > 0 {
		t.Errorf("the second worker took the job over: %+v", byB)
	}
	if rec, err := e.st.Get(ctx, stopped[0].ID); err != nil || rec.State != store.StateClaimed || rec.RunID != j.RunKey() {
		t.Errorf("the started instance: %s run %q, %v; want claimed for %s", rec.State, rec.RunID, err, j.RunKey())
	}
	if run, _ := e.st.GetRun(ctx, "pooljob:21"); run.Status != warmpool.JobServed {
		t.Errorf("ledger of job 21: %s, want served", run.Status)
	}
}
