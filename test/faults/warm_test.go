//go:build faults

// The warm-pool steps of the fault matrix: the convergence loop killed at a random call, and
// webhook redelivery (the same workflow_job delivered three times and once more under a new
// delivery id) served by the pool worker.
package faults_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// The matrix's warm pool: a runner class and pool queue of its own.
const (
	warmClass = "warm"
	warmPool  = "faults-warm"
)

// warmTarget is the pool's current size, changed by the convergence step.
type warmTarget struct {
	mu           sync.Mutex
	hot, stopped int
}

func (w *warmTarget) set(hot, stopped int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hot, w.stopped = hot, stopped
}

// warmSpec is the matrix's warm pool as it should be now.
func (e *env) warmSpec(q *pool.Queue) warmpool.PoolSpec {
	e.warm.mu.Lock()
	defer e.warm.mu.Unlock()
	subnets := slices.Sorted(maps.Keys(sandbox.Subnets))
	return warmpool.PoolSpec{
		Name: warmPool, Schedule: "faults", Hot: e.warm.hot, Stopped: e.warm.stopped, SpecHash: "faults-v1", Scope: sandbox.Scope,
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: warmClass, LaunchTemplateID: e.sb.LaunchTemplate, Subnets: subnets, InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: "$Latest", Queue: q},
	}
}

// converger is a replica's convergence loop over the matrix's warm pool.
func (e *env) converger(r *replica) *poolsize.Converger {
	q := pool.NewQueue(r.sqs, e.warmQueue)
	targets := func(context.Context, time.Time) ([]warmpool.PoolSpec, error) {
		return []warmpool.PoolSpec{e.warmSpec(q)}, nil
	}
	c, err := poolsize.NewConverger(r.st, r.ec2, fleet.New(r.ec2, fleet.Options{Logger: e.log}), targets,
		poolsize.Options{DeploymentID: sandbox.DeploymentID, Now: r.now, Logger: e.log})
	if err != nil {
		e.t.Fatalf("converger: %v", err)
	}
	return c
}

// settle runs healthy convergence passes until the pool holds its target with nothing warming, or
// 30 s pass.
func (e *env) settle(ctx context.Context, c *poolsize.Converger) error {
	return settlePool(ctx, c, warmPool)
}

// settlePool is settle for the pool named name of c.
func settlePool(ctx context.Context, c *poolsize.Converger, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := c.Pass(ctx)
		if err != nil {
			return err
		}
		pr, _ := rep.Pool(name)
		if pr.Err != nil {
			return fmt.Errorf("convergence of %s: %w", name, pr.Err)
		}
		if pr.Warming == 0 && pr.Ready == pr.TargetHot && pr.Stopped == pr.TargetStopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm pool not settled in 30 s: %+v", pr)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// warmSizes are the targets the convergence step cycles through: every run has something to
// create, ready, stop or terminate.
var warmSizes = [][2]int{{2, 1}, {0, 2}, {1, 0}, {1, 1}, {0, 0}}

var warmRun int

// killConverge: a convergence pass that has work to do (the target changed), crashed anywhere;
// afterwards a fresh replica converges again.
var killConverge = killStep{name: "converge", prepare: func(ctx context.Context, t *testing.T, e *env, healthy *replica) (func(context.Context, *replica) error, func(context.Context, *replica) error) {
	size := warmSizes[warmRun%len(warmSizes)]
	warmRun++
	e.warm.set(size[0], size[1])
	// Instances launched by an earlier pass finish their warm-up, so this pass readies or stops
	// them as well as creating and terminating.
	time.Sleep(500 * time.Millisecond)
	op := func(ctx context.Context, victim *replica) error {
		return e.converger(victim).Converge(ctx)
	}
	after := func(ctx context.Context, fresh *replica) error {
		return e.settle(ctx, e.converger(fresh))
	}
	return op, after
}}

// webhookRedelivery: a queued pool job delivered three times (GitHub's redelivery keeps the
// delivery id) and once more under a new id; the pool worker serves it once, with one instance;
// the job runs on it; its completion, delivered twice, ends that instance.
func webhookRedelivery(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{})
	e.warm.set(2, 1)
	defer e.warm.set(0, 0)
	conv := e.converger(r)
	if err := e.settle(ctx, conv); err != nil {
		t.Fatalf("filling the warm pool: %v", err)
	}
	worker, sender := e.poolPath(t, r)
	const runs = 2
	ok := 0
	for i := range runs {
		err := func() error {
			run := int64(e.defaultRunID) + e.runSeq.Add(1)
			jobID := e.sb.Stack.GitHub.QueueJob("acme", "app", run, []string{"self-hosted", "pool=" + warmPool})
			ev, _ := e.sb.Stack.GitHub.WorkflowJobEvent(jobID)
			deliver := func(action string) (string, error) {
				id, status, err := sender.SendWorkflowJob(ctx, action, ev)
				if err != nil || status != http.StatusOK {
					return id, fmt.Errorf("%s delivery: %d, %v", action, status, err)
				}
				for range 2 {
					if status, err := sender.Redeliver(ctx, id); err != nil || status != http.StatusOK {
						return id, fmt.Errorf("%s redelivery: %d, %v", action, status, err)
					}
				}
				if _, status, err := sender.SendWorkflowJob(ctx, action, ev); err != nil || status != http.StatusOK {
					return id, fmt.Errorf("%s duplicate under a new delivery id: %d, %v", action, status, err)
				}
				return id, nil
			}
			if _, err := deliver("queued"); err != nil {
				return err
			}
			served, err := serveUntil(ctx, worker, func() (bool, error) {
				j, _ := e.sb.Stack.GitHub.Job(jobID)
				return j.Status == githubfake.JobCompleted, nil
			})
			if err != nil {
				return fmt.Errorf("serving job %d (%d batches): %w", jobID, served, err)
			}
			runKey := warmpool.JobRunID(jobID)
			recs, err := e.sb.Store.ByRun(ctx, runKey)
			if err != nil {
				return err
			}
			if len(recs) != 1 {
				return fmt.Errorf("job %d served by %d instances, want 1: %v", jobID, len(recs), recs)
			}
			job, _ := e.sb.Stack.GitHub.Job(jobID)
			if job.RunnerName != "runnerpool-"+recs[0].ID {
				return fmt.Errorf("job %d ran on %q, not on its instance %s", jobID, job.RunnerName, recs[0].ID)
			}
			ev, _ = e.sb.Stack.GitHub.WorkflowJobEvent(jobID)
			if _, err := deliver("completed"); err != nil {
				return err
			}
			if _, err := serveUntil(ctx, worker, func() (bool, error) {
				rec, err := e.sb.Store.Get(ctx, recs[0].ID)
				return err == nil && (!rec.State.Live() || rec.State == store.StateTerminating || rec.RunID != runKey), err
			}); err != nil {
				return fmt.Errorf("completing job %d: %w", jobID, err)
			}
			if err := e.settle(ctx, conv); err != nil {
				return err
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("webhook-redelivery", runs, ok, "")
}

// poolPath is replica r's webhook path to the matrix's warm pool: the pool-job worker, and a
// sender of signed webhook deliveries to r's webhook handler (closed with the test).
func (e *env) poolPath(t *testing.T, r *replica) (*pooljob.Worker, *githubfake.WebhookSender) {
	jq := pooljob.NewJobQueue(r.sqs, e.jobQueue, r.st)
	q := pool.NewQueue(r.sqs, e.warmQueue)
	targets := func(context.Context, time.Time) ([]warmpool.PoolSpec, error) {
		return []warmpool.PoolSpec{e.warmSpec(q)}, nil
	}
	catalog := warmpool.NewCatalog(targets, time.Second, time.Now)
	copts := claim.Options{Logger: e.log}
	worker, err := pooljob.NewWorker(pooljob.WorkerConfig{
		Store: r.st, EC2: r.ec2, Fleet: fleet.New(r.ec2, fleet.Options{Logger: e.log}), Starter: claim.NewStarter(r.st, r.ec2, r.reg, copts),
		Discarder: r.reg, GitHub: r.gh, Jobs: jq, Pools: catalog, DeploymentID: sandbox.DeploymentID,
		// A short lease: a message whose receive answer was lost (lost-answer) comes back soon.
		WaitTime: time.Second, Lease: 10 * time.Second, Logger: e.log,
	})
	if err != nil {
		t.Fatal(err)
	}
	hook, err := webhook.New(webhook.Config{Secret: "faults", Deliveries: r.st, Pools: catalog, Jobs: jq, GitHub: r.gh, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	return worker, &githubfake.WebhookSender{URL: srv.URL, Secret: "faults"}
}

// serveUntil runs worker batches until done says so (at most 60 s).
func serveUntil(ctx context.Context, w *pooljob.Worker, done func() (bool, error)) (int, error) {
	deadline := time.Now().Add(60 * time.Second)
	for n := 1; ; n++ {
		if _, err := w.Once(ctx); err != nil {
			return n, err
		}
		ok, err := done()
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return n, err
		}
		if ok {
			return n, nil
		}
		if time.Now().After(deadline) {
			return n, errors.New("not done within 60 s")
		}
	}
}
