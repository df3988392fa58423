package pooljob_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestLostWebhookCompletionEndsTheInstance (issue #34): a webhook pool job runs on the sandbox's
// real agent and completes at GitHub, but its `workflow_job completed` delivery never comes (GitHub
// does not retry a failed delivery). The instance is ended anyway, long before its max runtime (an
// hour here): the convergence pass's backstop lists the job's repository's runners, finds the
// job's ephemeral just-in-time runner gone in two listings in a row, and hands the job's
// completion, from the ledger, to the pool worker, which ends the instance. Before the backstop
// served webhook jobs too, the instance ran out its max runtime. The replica is built through the
// composition root (controlplane.New); the queued job reaches it through the webhook handler over
// HTTP, signed as GitHub signs it.
func TestLostWebhookCompletionEndsTheInstance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sb, err := sandbox.Start(ctx, sandbox.Options{Root: t.TempDir()})
	if err != nil {
		t.Fatalf("starting the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	fake := sb.Stack.GitHub
	qo, err := sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("lost-webhook-completion-jobs")})
	if err != nil {
		t.Fatal(err)
	}
	const poolName, maxRuntime = "lost", time.Hour
	spec := warmpool.PoolSpec{
		Name: poolName, Schedule: "test", Hot: 1, SpecHash: "lost-v1", Scope: sandbox.Scope,
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{
			Name: sandbox.RunnerClass, LaunchTemplateID: sb.LaunchTemplate, Subnets: slices.Sorted(maps.Keys(sandbox.Subnets)),
			InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096, MaxRuntime: declared.Duration(maxRuntime),
		}, TemplateVersion: "$Latest"},
	}
	cp, err := controlplane.New(controlplane.Clients{Store: sb.Store, EC2: sb.EC2, SQS: sb.Stack.SQS(), GitHub: sb.GitHub}, controlplane.Options{
		DeploymentID: sandbox.DeploymentID,
		Classes:      func(controlplane.NewProvisioner) (pool.Resolver, error) { return pool.StaticResolver{}, nil },
		Warm: &controlplane.Warm{
			JobQueueURL: aws.ToString(qo.QueueUrl), Targets: warmpool.StaticTargets(spec), CatalogTTL: time.Minute,
			Worker: pooljob.WorkerConfig{WaitTime: time.Second},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hook, err := webhook.New(webhook.Config{Secret: "lost", Deliveries: sb.Store, Pools: cp.Catalog, Jobs: cp.Jobs, GitHub: sb.GitHub})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	sender := &githubfake.WebhookSender{URL: srv.URL, Secret: "lost"}
	until(t, 60*time.Second, "the pool filled", func() bool {
		rep, err := cp.Converger.Pass(ctx)
		pr, _ := rep.Pool(poolName)
		return err == nil && pr.Err == nil && pr.Ready == 1 && pr.Warming == 0
	})

	owner, repo, _ := strings.Cut(sandbox.Scope, "/")
	jobID := fake.QueueJob(owner, repo, 9400, []string{"self-hosted", "pool=" + poolName})
	ev, _ := fake.WorkflowJobEvent(jobID)
	if _, status, err := sender.SendWorkflowJob(ctx, "queued", ev); err != nil || status != http.StatusOK {
		t.Fatalf("queued delivery: %d, %v", status, err)
	}
	var served pooljob.Served
	until(t, 30*time.Second, "the job served", func() bool {
		rep, err := cp.Worker.Once(ctx)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("worker: %v", err)
		}
		if len(rep.Served) == 1 {
			served = rep.Served[0]
		}
		return served.InstanceID != ""
	})
	// The convergence pass records the instance running on its agent's registration; the job
	// runs on its runner and completes at GitHub, which removes the runner. The completed
	// delivery is dropped: nothing sends it.
	until(t, 90*time.Second, "the job completed by the instance's runner", func() bool {
		_, _ = cp.Converger.Pass(ctx)
		j, _ := fake.Job(jobID)
		return j.Status == githubfake.JobCompleted && j.RunnerName == warmpool.RunnerName(served.InstanceID)
	})

	var rec store.Instance
	until(t, 60*time.Second, "the instance ended without its completed delivery", func() bool {
		_, _ = cp.Converger.Pass(ctx)
		_, _ = cp.Worker.Once(ctx)
		rec, err = sb.Store.Get(ctx, served.InstanceID)
		return err == nil && !rec.State.Live()
	})
	if n := cp.Backstop.Inferred(pooljob.SourceWebhook, poolName); n != 1 {
		t.Errorf("%d completions inferred, want 1", n)
	}
	if !strings.Contains(rec.Reason, pooljob.ConclusionRunnerGone) {
		t.Errorf("instance ended for %q, want the inferred completion", rec.Reason)
	}
	if r, err := sb.Store.GetRun(ctx, warmpool.LedgerPrefix+strconv.FormatInt(jobID, 10)); err != nil || r.Status != warmpool.JobCompleted {
		t.Errorf("ledger of job %d: %+v %v, want completed", jobID, r.Status, err)
	}
	rep, err := invariant.Check(ctx, sb.Store, sb.EC2, invariant.Options{DeploymentID: sandbox.DeploymentID})
	if err != nil || !rep.OK() {
		t.Errorf("invariants: %v %s", err, rep.Summary())
	}
}

// until polls cond until it holds, or fails the test after d.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}
