package scalesets_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestScaleSetJobsRunOnRealAgents: the sandbox's simulated instances, each running the real agent,
// serve scale set jobs from a warm pool filled by the real convergence loop: one hot instance, one
// stopped instance (started) and one cold start. Each job is taken by the runner its instance's
// agent starts with the scale set's JIT configuration and completes; JobCompleted ends each
// instance (the pool does not recycle), and the invariant checker finds nothing. Under both shapes
// of the Actions service: github.com's, which assigns the jobs itself (JobAssigned, runnerRequestId
// 0; a listener acting only on JobAvailable serves nothing), and GHES's, which offers them to
// acquire.
func TestScaleSetJobsRunOnRealAgents(t *testing.T) {
	t.Parallel()
	for _, shape := range allShapes {
		t.Run(string(shape), func(t *testing.T) {
			t.Parallel()
			jobsRunOnRealAgents(t, shape)
		})
	}
}

func jobsRunOnRealAgents(t *testing.T, shape githubfake.ScaleSetShape) {
	ctx := t.Context()
	sb, err := sandbox.Start(ctx, sandbox.Options{Root: t.TempDir(), Logger: logger()})
	if err != nil {
		t.Fatalf("starting the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	sb.Stack.GitHub.SetScaleSetShape(shape)
	qo, err := sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("ss-agents-jobs-" + string(shape))})
	if err != nil {
		t.Fatal(err)
	}
	jobs := pooljob.NewJobQueue(sb.Stack.SQS(), aws.ToString(qo.QueueUrl), sb.Store)
	spec := warmpool.PoolSpec{
		Name: poolName, Schedule: "test", Hot: 1, Stopped: 1, SpecHash: "agents-v1", Scope: sandbox.Scope,
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: sandbox.RunnerClass, LaunchTemplateID: sb.LaunchTemplate, Subnets: slices.Sorted(maps.Keys(sandbox.Subnets)), InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: "$Latest"},
	}
	fl := fleet.New(sb.EC2, fleet.Options{Logger: logger()})
	conv, err := poolsize.NewConverger(sb.Store, sb.EC2, fl, warmpool.StaticTargets(spec), poolsize.Options{DeploymentID: sandbox.DeploymentID, Logger: logger()})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool filled: one hot, one stopped", func() bool {
		rep, err := conv.Pass(ctx)
		pr, _ := rep.Pool(poolName)
		return err == nil && pr.Err == nil && pr.Ready == 1 && pr.Stopped == 1 && pr.Warming == 0
	})

	set := declared.ScaleSet{Name: setName, WarmPool: poolName, Scope: sandbox.Scope, MaxRunners: 5}
	m, err := scalesets.New(scalesets.Config{
		Store: sb.Store, Jobs: jobs, Holder: "a", LeaseTTL: testLeaseTTL, Resync: 200 * time.Millisecond, Logger: logger(),
		ScaleSets: func(context.Context) ([]declared.ScaleSet, error) { return []declared.ScaleSet{set}, nil },
		Client: func(scope string) (scalesets.Client, error) {
			return scaleset.New(scaleset.Config{
				APIURL: sb.Stack.Endpoints.GitHubAPI, Logger: logger(),
				RegistrationToken: func(ctx context.Context) (string, string, error) {
					rt, err := sb.GitHub.RegistrationToken(ctx, scope)
					return rt.Token, rt.URL, err
				},
			})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stopListener := context.WithCancel(context.Background())
	listened := make(chan struct{})
	go func() { defer close(listened); m.Run(lctx) }()
	t.Cleanup(func() { stopListener(); <-listened })
	copts := claim.Options{Logger: logger()}
	reg := claim.NewRegistrar(sb.Store, sb.GitHub, sb.EC2, copts)
	w, err := pooljob.NewWorker(pooljob.WorkerConfig{
		Store: sb.Store, EC2: sb.EC2, Fleet: fl, Starter: claim.NewStarter(sb.Store, sb.EC2, reg, copts),
		Discarder: reg, GitHub: sb.GitHub, Jobs: jobs, Pools: warmpool.NewCatalog(warmpool.StaticTargets(spec), time.Minute, nil),
		ScaleSets: m, DeploymentID: sandbox.DeploymentID, Logger: logger(),
	})
	if err != nil {
		t.Fatal(err)
	}

	fake := sb.Stack.GitHub
	owner, repo, _ := strings.Cut(sandbox.Scope, "/")
	eventually(t, "the session", func() bool {
		st, ok := fake.ScaleSet(sandbox.Scope, setName)
		return ok && st.Session != nil
	})
	// One job at a time, so each takes the next source: hot, then stopped, then a cold start.
	bySource := map[string]string{} // source -> instance
	for i, want := range []string{warmpool.SourceHot, warmpool.SourceStarted, warmpool.SourceCreated} {
		id := fake.QueueScaleSetJob(owner, repo, int64(9100+i), setName)
		served := onceUntil(t, w, func(r pooljob.BatchReport) bool { return len(r.Served) == 1 }).Served[0]
		if served.JobID != jobNumber(shape, id) || served.Source != want {
			t.Fatalf("job %d served %+v, want from %s", id, served, want)
		}
		bySource[want] = served.InstanceID
		eventuallyFor(t, 90*time.Second, fmt.Sprintf("job %d (%s) completed by its instance's runner", id, want), func() bool {
			j, _ := fake.Job(id)
			return j.Status == githubfake.JobCompleted && j.RunnerName == warmpool.RunnerName(served.InstanceID)
		})
	}
	// JobCompleted hands each instance back: ended, since the pool does not recycle.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		_, _ = w.Once(ctx)
		live := 0
		for _, id := range bySource {
			if rec, err := sb.Store.Get(ctx, id); err == nil && rec.State.Live() {
				live++
			}
		}
		if live == 0 {
			break
		}
	}
	for src, id := range bySource {
		if rec, err := sb.Store.Get(ctx, id); err != nil || rec.State.Live() {
			t.Errorf("%s instance %s after its job completed: %s (%v), want ended", src, id, rec.State, err)
		}
	}
	rep, err := invariant.Check(ctx, sb.Store, sb.EC2, invariant.Options{DeploymentID: sandbox.DeploymentID})
	if err != nil || !rep.OK() {
		t.Errorf("invariants: %v %s", err, rep.Summary())
	}
}

// eventuallyFor polls cond every 50 ms for up to d.
func eventuallyFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}
