package sandbox_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestReRunsGetRunners (issue #33 item 4): the sample workflow (examples/github-actions) runs in
// the GitHub fake with GitHub's re-run semantics (githubfake/runs.go), its self-hosted jobs on
// real agents, its provision and release played as the actions call them, and every job's
// workflow_job webhook delivered to the real webhook endpoint, whose job queue the real pool
// worker serves. Attempt 1's test job fails; then each kind of re-run: its jobs get runners and
// run, its release ends them, and nothing is left running. On the old code "re-run failed jobs"
// and "re-run a job" left the re-run's jobs queued (GitHub fails them after 24 hours): nothing
// provided attempt 1's label any more.
func TestReRunsGetRunners(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name string
		// label is the runs-on of build and test: the provision's output, or the run attempt's own
		// label, which the sample workflow says works as well.
		label string
		rerun func(ctx context.Context, gh *github.Client, run int64, jobs map[string]githubfake.Job) error
	}{
		{"all jobs", provisionLabel, func(ctx context.Context, gh *github.Client, run int64, _ map[string]githubfake.Job) error {
			_, err := gh.Actions.RerunWorkflowByID(ctx, "acme", "app", run)
			return err
		}},
		{"failed jobs", provisionLabel, func(ctx context.Context, gh *github.Client, run int64, _ map[string]githubfake.Job) error {
			_, err := gh.Actions.RerunFailedJobsByID(ctx, "acme", "app", run)
			return err
		}},
		{"failed jobs asking for their own attempt's label", attemptLabel, func(ctx context.Context, gh *github.Client, run int64, _ map[string]githubfake.Job) error {
			_, err := gh.Actions.RerunFailedJobsByID(ctx, "acme", "app", run)
			return err
		}},
		{"a single job", provisionLabel, func(ctx context.Context, gh *github.Client, _ int64, jobs map[string]githubfake.Job) error {
			_, err := gh.Actions.RerunJobByID(ctx, "acme", "app", jobs["build"].ID)
			return err
		}},
	}
	sb := start(t, sandbox.Options{})
	cp := sb.Components(sandbox.ComponentOptions{})
	w := newRerunWiring(t, sb, cp)
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			run := w.fake.StartRun("acme", "app", sampleWorkflow(kind.label))
			first := w.play(t, run)
			if first["test"].Conclusion != "failure" || first["build"].Conclusion != "success" || first["release"].Conclusion != "success" {
				t.Fatalf("attempt 1: %+v", first)
			}
			if err := kind.rerun(ctx, w.gh, run, first); err != nil {
				t.Fatalf("re-run: %v", err)
			}
			second := w.play(t, run)
			for name, j := range second {
				if j.ID == first[name].ID {
					continue // not re-run: keeps attempt 1's result and outputs
				}
				if j.RunAttempt != 2 || j.Status != githubfake.JobCompleted || j.Conclusion != "success" {
					t.Errorf("re-run job %s: attempt %d, %s %s; want attempt 2 completed successfully", name, j.RunAttempt, j.Status, j.Conclusion)
				}
				if name == "build" || name == "test" {
					if j.RunnerName == "" {
						t.Errorf("re-run job %s ran on no runner", name)
					}
				}
			}
			if second["release"].ID == first["release"].ID {
				t.Error("the release job was not re-run")
			}
			w.nothingRunning(t, run)
		})
	}
}

// The runs-on of the sample workflow's jobs, and the alternative its comment offers.
const (
	provisionLabel = "${{ needs.provision.outputs.label }}"
	attemptLabel   = "${{ github.run_id }}-${{ github.run_attempt }}"
)

// sampleWorkflow is examples/github-actions/workflow.yml's shape; test fails in attempt 1.
func sampleWorkflow(label string) []githubfake.WorkflowJob {
	return []githubfake.WorkflowJob{
		{Name: "provision", RunsOn: []string{"ubuntu-latest"}},
		{Name: "build", Needs: []string{"provision"}, RunsOn: []string{label}},
		{Name: "test", Needs: []string{"provision"}, RunsOn: []string{label}, FailIn: []int64{1}},
		{Name: "release", Needs: []string{"provision", "build", "test"}, RunsOn: []string{"ubuntu-latest"}, Always: true},
	}
}

// rerunWiring is the reconciler's webhook path over the sandbox: endpoint, job queue, pool worker.
type rerunWiring struct {
	sb        *sandbox.Sandbox
	cp        *sandbox.Components
	fake      *githubfake.Server
	gh        *github.Client
	hooks     *githubfake.WebhookSender
	delivered map[int64]bool
	actions   workflowActions
}

func newRerunWiring(t *testing.T, sb *sandbox.Sandbox, cp *sandbox.Components) *rerunWiring {
	t.Helper()
	ctx := t.Context()
	q, err := sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-pool-jobs")})
	if err != nil {
		t.Fatal(err)
	}
	jobs := pooljob.NewJobQueue(sb.Stack.SQS(), aws.ToString(q.QueueUrl), sb.Store)
	worker, err := pooljob.NewWorker(pooljob.WorkerConfig{
		Store: sb.Store, EC2: sb.EC2, Fleet: cp.Fleet, Starter: claim.NewStarter(sb.Store, sb.EC2, cp.Registrar, claim.Options{}),
		Discarder: cp.Registrar, GitHub: sb.GitHub, Jobs: jobs, Pools: noPools{}, DeploymentID: sandbox.DeploymentID,
		WaitTime: time.Second, RetryDelay: 500 * time.Millisecond, Logger: sb.Log,
		// What the reconciler wires (reconciler/service.serveRerun).
		Rerun: func(ctx context.Context, j warmpool.Job) error {
			_, err := provision.ServeRerun(ctx, sb.Store, cp.Provisioner, provision.Rerun{
				RepositoryID: strconv.FormatInt(j.RepositoryID, 10), RunID: strconv.FormatInt(j.RunID, 10),
				Attempt: int(j.RunAttempt), Labels: j.Labels,
			})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = worker.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })

	const secret = "rerun-webhook-secret"
	h, err := webhook.New(webhook.Config{Secret: secret, Deliveries: sb.Store, Pools: noPools{}, Jobs: jobs, GitHub: sb.GitHub,
		Reruns: true, Logger: sb.Log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	gh, err := github.NewClient(nil).WithAuthToken(sb.Stack.GitHub.PAT()).WithEnterpriseURLs(sb.Stack.Endpoints.GitHubAPI+"/", sb.Stack.Endpoints.GitHubAPI+"/")
	if err != nil {
		t.Fatal(err)
	}
	return &rerunWiring{sb: sb, cp: cp, fake: sb.Stack.GitHub, gh: gh, hooks: &githubfake.WebhookSender{URL: srv.URL, Secret: secret}, delivered: map[int64]bool{},
		actions: componentActions{}}
}

type noPools struct{}

func (noPools) Known(context.Context, string) (bool, error) { return false, nil }
func (noPools) Lookup(context.Context, string) (warmpool.PoolSpec, bool, error) {
	return warmpool.PoolSpec{}, false, nil
}

// play runs the run's current attempt to its end, as GitHub and the sample workflow's actions do:
// every newly queued job's workflow_job webhook is delivered; provision and release (GitHub-hosted
// jobs) are played with the job's own run attempt, release with provision's run-key output; the
// self-hosted jobs run on whatever runner takes them.
func (w *rerunWiring) play(t *testing.T, run int64) map[string]githubfake.Job {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		attempt, jobs := w.fake.RunJobs(run)
		for _, j := range jobs {
			if !w.delivered[j.ID] && j.Conclusion != "skipped" {
				ev, _ := w.fake.WorkflowJobEvent(j.ID)
				if _, status, err := w.hooks.SendWorkflowJob(ctx, "queued", ev); err != nil || status != 200 {
					t.Fatalf("delivering job %d's webhook: %d %v", j.ID, status, err)
				}
				w.delivered[j.ID] = true
			}
		}
		if p := jobs["provision"]; p.Status == githubfake.JobQueued {
			ev, _ := w.fake.WorkflowJobEvent(p.ID)
			outputs := w.actions.provision(t, w, ev, attempt)
			if err := w.fake.CompleteJob(p.ID, "success", outputs); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if r, ok := jobs["release"]; ok && r.Status == githubfake.JobQueued {
			ev, _ := w.fake.WorkflowJobEvent(r.ID)
			w.actions.release(t, w, ev, attempt, jobs["provision"])
			if err := w.fake.CompleteJob(r.ID, "success", nil); err != nil {
				t.Fatal(err)
			}
			_, jobs = w.fake.RunJobs(run)
			return jobs
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, jobs := w.fake.RunJobs(run)
	t.Fatalf("the run's attempt did not end: %+v", jobs)
	return nil
}

// workflowActions play the sample workflow's provision and release jobs (GitHub-hosted) for a
// job's event and run attempt: provision returns the job's outputs (label, run-key).
type workflowActions interface {
	provision(t *testing.T, w *rerunWiring, ev githubfake.WorkflowJobEvent, attempt int64) map[string]string
	release(t *testing.T, w *rerunWiring, ev githubfake.WorkflowJobEvent, attempt int64, provisionJob githubfake.Job)
}

// componentActions call the control plane's provisioner and releaser directly; the rehearsal's
// sample-workflow step runs the actions' own scripts through the public API instead
// (TestSampleWorkflowWithTheActions).
type componentActions struct{}

func (componentActions) provision(t *testing.T, w *rerunWiring, ev githubfake.WorkflowJobEvent, attempt int64) map[string]string {
	t.Helper()
	req := request(strconv.FormatInt(ev.RunID, 10))
	req.RepositoryID, req.Attempt = strconv.FormatInt(ev.RepoID, 10), int(attempt)
	res, err := w.cp.Provisioner.Provision(t.Context(), req)
	if err != nil {
		t.Fatalf("provision of attempt %d: %v", attempt, err)
	}
	return map[string]string{"label": res.Label, "run-key": res.RunKey}
}

func (componentActions) release(t *testing.T, w *rerunWiring, ev githubfake.WorkflowJobEvent, attempt int64, p githubfake.Job) {
	t.Helper()
	ctx := t.Context()
	// The release action names the provision's run key; the API adds what the re-run
	// provisioned for its own attempt (reconciler/api releaseRerun).
	keys := []string{p.Outputs["run-key"]}
	if p.RunAttempt < attempt {
		if key, ok, err := provision.RerunOwn(ctx, w.sb.Store, strconv.FormatInt(ev.RepoID, 10), strconv.FormatInt(ev.RunID, 10), int(attempt)); err != nil {
			t.Fatal(err)
		} else if ok {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		if _, err := w.cp.Releaser.Release(ctx, key, 10*time.Minute); err != nil {
			t.Fatalf("release of attempt %d: %v", attempt, err)
		}
	}
}

// nothingRunning checks that no instance of any of the run's provisions still serves it.
func (w *rerunWiring) nothingRunning(t *testing.T, run int64) {
	t.Helper()
	ev, _ := w.fake.WorkflowJobEvent(w.fakeJob(run))
	for attempt := 1; attempt <= 2; attempt++ {
		key := store.RunKey(strconv.FormatInt(ev.RepoID, 10), strconv.FormatInt(run, 10), attempt)
		recs, err := w.sb.Store.ByRun(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range recs {
			if in.RunID == key && in.State.Live() {
				t.Errorf("instance %s of %s is still %s after the re-run's release", in.ID, key, in.State)
			}
		}
	}
}

func (w *rerunWiring) fakeJob(run int64) int64 {
	_, jobs := w.fake.RunJobs(run)
	return jobs["provision"].ID
}
