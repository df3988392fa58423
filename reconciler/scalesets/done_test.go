package scalesets_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
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
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// lossy is the pool job queue with every JobCompleted the listener hands it lost, as when the
// message never came: all the listener replicas down while it waited, or lost in a takeover. The
// backstop hands its completions to the job queue itself.
type lossy struct {
	q    *pooljob.JobQueue
	lost atomic.Int32
}

func (l *lossy) Enqueue(ctx context.Context, j warmpool.Job) (string, error) {
	if j.Action == warmpool.ActionCompleted {
		l.lost.Add(1)
		return pooljob.Enqueued, nil
	}
	return l.q.Enqueue(ctx, j)
}

func (l *lossy) Bind(ctx context.Context, j warmpool.Job, runnerName string, runnerID int64) (bool, error) {
	return l.q.Bind(ctx, j, runnerName, runnerID)
}

// TestLostCompletionEndsTheInstance (issue #34): a scale set job runs on the sandbox's real agent
// and completes at GitHub, but its JobCompleted never reaches the pool worker. The instance is
// ended anyway, long before its max runtime (an hour here): the convergence pass's backstop
// (pooljob/backstop.go) lists the scope's runners after each pass, finds the job's ephemeral
// runner gone at GitHub in two listings in a row, and hands the job's completion from the ledger
// to the worker, which ends the instance. The bound is about three convergence passes after GitHub
// removed the runner, plus a worker batch. Before the backstop the instance ran out its max
// runtime, its agent restarting a runner whose registration is spent; now the agent leaves a spent
// runner stopped (one session in all) and the backstop ends the instance. The replica is built
// through the composition root (controlplane.New, scalesets.Listeners), which wires the backstop
// into convergence.
func TestLostCompletionEndsTheInstance(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sb, err := sandbox.Start(ctx, sandbox.Options{Root: t.TempDir(), Logger: logger()})
	if err != nil {
		t.Fatalf("starting the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	fake := sb.Stack.GitHub
	fake.SetScaleSetShape(githubfake.ShapeAssigned)
	qo, err := sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("ss-lost-completion-jobs")})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(qo.QueueUrl)
	const maxRuntime = time.Hour
	spec := warmpool.PoolSpec{
		Name: poolName, Schedule: "test", Hot: 1, SpecHash: "lost-v1", Scope: sandbox.Scope,
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{
			Name: sandbox.RunnerClass, LaunchTemplateID: sb.LaunchTemplate, Subnets: slices.Sorted(maps.Keys(sandbox.Subnets)),
			InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096, MaxRuntime: declared.Duration(maxRuntime),
		}, TemplateVersion: "$Latest"},
	}
	jobs := &lossy{q: pooljob.NewJobQueue(sb.Stack.SQS(), url, sb.Store)}
	set := declared.ScaleSet{Name: setName, WarmPool: poolName, Scope: sandbox.Scope, MaxRunners: 5}
	var m *scalesets.Manager
	cp, err := controlplane.New(controlplane.Clients{Store: sb.Store, EC2: sb.EC2, SQS: sb.Stack.SQS(), GitHub: sb.GitHub}, controlplane.Options{
		DeploymentID: sandbox.DeploymentID, Logger: logger(),
		Classes: func(controlplane.NewProvisioner) (pool.Resolver, error) { return pool.StaticResolver{}, nil },
		Warm: &controlplane.Warm{
			JobQueueURL: url, Targets: warmpool.StaticTargets(spec), CatalogTTL: time.Minute,
			ScaleSets: scalesets.Listeners(scalesets.Config{
				Store: sb.Store, Jobs: jobs, Holder: "a", LeaseTTL: testLeaseTTL, Resync: 200 * time.Millisecond, Logger: logger(),
				GitHub: sb.GitHub, APIURL: sb.Stack.Endpoints.GitHubAPI,
				ScaleSets: func(context.Context) ([]declared.ScaleSet, error) { return []declared.ScaleSet{set}, nil },
			}, func(made *scalesets.Manager) { m = made }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool filled", func() bool {
		rep, err := cp.Converger.Pass(ctx)
		pr, _ := rep.Pool(poolName)
		return err == nil && pr.Err == nil && pr.Ready == 1 && pr.Warming == 0
	})
	lctx, stopListener := context.WithCancel(context.Background())
	listened := make(chan struct{})
	go func() { defer close(listened); m.Run(lctx) }()
	t.Cleanup(func() { stopListener(); <-listened })
	eventually(t, "the session", func() bool { st, ok := fake.ScaleSet(sandbox.Scope, setName); return ok && st.Session != nil })

	owner, repo, _ := strings.Cut(sandbox.Scope, "/")
	id := fake.QueueScaleSetJob(owner, repo, 9300, setName)
	served := onceUntil(t, cp.Worker, func(r pooljob.BatchReport) bool { return len(r.Served) == 1 }).Served[0]
	eventuallyFor(t, 90*time.Second, "the job completed by the instance's runner", func() bool {
		j, _ := fake.Job(id)
		return j.Status == githubfake.JobCompleted && j.RunnerName == warmpool.RunnerName(served.InstanceID)
	})
	eventually(t, "the JobCompleted lost", func() bool { return jobs.lost.Load() > 0 })

	// What a replica runs meanwhile: convergence (it records the instance running on its agent's
	// registration) and the pool worker.
	var rec store.Instance
	eventuallyFor(t, 60*time.Second, "the instance ended without its JobCompleted", func() bool {
		_, _ = cp.Converger.Pass(ctx)
		_, _ = cp.Worker.Once(ctx)
		rec, err = sb.Store.Get(ctx, served.InstanceID)
		return err == nil && !rec.State.Live()
	})
	if n := cp.Backstop.Inferred(pooljob.SourceScaleSet, setName); n != 1 {
		t.Errorf("%d completions inferred, want 1", n)
	}
	if !strings.Contains(rec.Reason, pooljob.ConclusionRunnerGone) {
		t.Errorf("instance ended for %q, want the inferred completion", rec.Reason)
	}
	// The agent did not start the spent runner again: one session in all (the runner's connect).
	if n := fake.Calls()["POST /_runner/connect"]; n != 1 {
		t.Errorf("%d runner sessions opened, want 1: the agent restarted a spent JIT runner", n)
	}
	rep, err := invariant.Check(ctx, sb.Store, sb.EC2, invariant.Options{DeploymentID: sandbox.DeploymentID})
	if err != nil || !rep.OK() {
		t.Errorf("invariants: %v %s", err, rep.Summary())
	}
}
