//go:build faults

// The lost-answer step of the fault matrix: DynamoDB, SQS and EC2 apply a request and its answer
// is lost (a 500 after the write), so the SDK retries a request that was applied.
package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/faults"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// lostShare is the part of the lossy replica's other AWS requests whose answer is lost.
const lostShare = 0.2

// lostAnswer: one replica whose every conditional write, and a fifth of its other DynamoDB, SQS
// and EC2 requests (first attempts), is applied and its answer lost. Each run is a workflow
// (provision of two, a job on the first run, release), a refresh pass, a convergence after the
// warm pool's target changed, and on every fourth run a pool job served through the webhook path
// by the pool-job worker. Every provision and release must succeed, no instance the run used may be
// terminated or expired (all are healthy), no run record may be left provisioning, and the whole
// deployment must pass env.verify.
func lostAnswer(t *testing.T, e *env) {
	ctx := t.Context()
	lost := &faults.LostAnswer{Conditional: true, Share: lostShare, Rand: rand.New(rand.NewPCG(e.rng.Uint64(), 1))}
	r := e.replica(replicaOptions{lost: lost, quickRetries: true})
	worker, sender := e.poolPath(t, r)
	conv := e.converger(r)
	defer e.warm.set(0, 0)
	// Each run loses a hundred-odd answers: a sixth of the crash steps' runs covers every
	// conditional write many times over in about three minutes.
	runs := max(2, runsPerStep(t)/6)
	ok, healthyTerminated, stuck := 0, 0, 0
	for i := range runs {
		err := func() error {
			began := time.Now()
			lap := func(what string) { t.Logf("run %d: %s at %s", i+1, what, time.Since(began).Round(time.Millisecond)) }
			defer lap("end")
			used, err := judgedWorkflow(ctx, e, r, i)
			lap("workflow")
			if err != nil {
				if errors.Is(err, errStuck) {
					stuck++
				}
				return err
			}
			size := warmSizes[i%len(warmSizes)]
			e.warm.set(size[0], size[1])
			if err := e.settle(ctx, conv); err != nil {
				return fmt.Errorf("convergence: %w", err)
			}
			lap("converge")
			if i%4 == 0 {
				e.warm.set(max(size[0], 1), size[1])
				if err := e.settle(ctx, conv); err != nil {
					return fmt.Errorf("convergence: %w", err)
				}
				if err := lostPoolJob(ctx, e, worker, sender); err != nil {
					return fmt.Errorf("pool job: %w", err)
				}
			}
			lap("pool job")
			if _, err := r.ref.Run(ctx); err != nil {
				return fmt.Errorf("refresh: %w", err)
			}
			lap("refresh")
			if err := e.verify(ctx); err != nil {
				return err
			}
			n, err := terminatedOf(ctx, e, used)
			healthyTerminated += n
			return err
		}()
		if err != nil {
			t.Errorf("lost-answer run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	byName := lost.Lost()
	total := 0
	for _, n := range byName {
		total += n
	}
	writes := lost.Writes()
	t.Logf("lost-answer: answers lost %v", byName)
	t.Logf("lost-answer: conditional writes hit %v", writes)
	if total < 20 {
		t.Errorf("only %d answers lost, want at least 20", total)
	}
	e.report("lost-answer", runs, ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d lost=%d conditional_writes=%d",
		healthyTerminated, stuck, total, len(writes)))
}

var errStuck = errors.New("run left waiting")

func errorsIsStuck(err error) bool { return errors.Is(err, errStuck) }

// judgedWorkflow is one workflow (provision of two, a job on the first run, release) on replica r
// under a fault: the provision must answer within a minute, leave no run record provisioning, and
// the release must pool every instance. It returns the instances the run used.
func judgedWorkflow(ctx context.Context, e *env, r *replica, i int) ([]string, error) {
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, rep, err := workflow(pctx, e, r, 2, i == 0)
	used := make([]string, 0, len(res.Runners))
	for _, rn := range res.Runners {
		used = append(used, rn.InstanceID)
	}
	if res.RunKey != "" {
		e.mu.Lock()
		e.answered = append(e.answered, res.RunKey)
		e.mu.Unlock()
		if run, gerr := e.sb.Store.GetRun(ctx, res.RunKey); gerr == nil && run.Status == provision.StatusProvisioning {
			return used, fmt.Errorf("%w: run %s still provisioning after its provision returned (%v)", errStuck, res.RunKey, err)
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, provision.ErrInProgress) {
			return used, fmt.Errorf("%w: %w", errStuck, err)
		}
		return used, err
	}
	for _, in := range rep.Instances {
		if in.Outcome != release.Pooled {
			return used, fmt.Errorf("release of run %s: %s %s (%s), want pooled", res.RunKey, in.ID, in.Outcome, in.Reason)
		}
	}
	return used, nil
}

// terminatedOf counts the instances of ids that were terminated or expired: all were healthy.
func terminatedOf(ctx context.Context, e *env, ids []string) (int, error) {
	var bad []string
	for _, id := range ids {
		rec, err := e.sb.Store.Get(ctx, id)
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", id, err)
		}
		if !rec.State.Live() || rec.State == store.StateTerminating || rec.Expired(time.Now()) {
			bad = append(bad, fmt.Sprintf("%s %s (%s)", id, rec.State, rec.Reason))
		}
	}
	if len(bad) > 0 {
		return len(bad), fmt.Errorf("healthy instances terminated: %s", strings.Join(bad, ", "))
	}
	return 0, nil
}

// lostPoolJob: a pool job delivered once by webhook, served by the worker, run, and completed.
func lostPoolJob(ctx context.Context, e *env, worker *warmpool.Worker, sender *githubfake.WebhookSender) error {
	run := e.defaultRunID + e.runSeq.Add(1)
	jobID := e.sb.Stack.GitHub.QueueJob("acme", "app", run, []string{"self-hosted", "pool=" + warmPool})
	ev, _ := e.sb.Stack.GitHub.WorkflowJobEvent(jobID)
	if _, status, err := sender.SendWorkflowJob(ctx, "queued", ev); err != nil || status != http.StatusOK {
		return fmt.Errorf("queued delivery: %d, %v", status, err)
	}
	if _, err := serveUntil(ctx, worker, func() (bool, error) {
		j, _ := e.sb.Stack.GitHub.Job(jobID)
		return j.Status == githubfake.JobCompleted, nil
	}); err != nil {
		return fmt.Errorf("serving job %d: %w", jobID, err)
	}
	recs, err := e.sb.Store.ByRun(ctx, warmpool.JobRunID(jobID))
	if err != nil || len(recs) != 1 {
		return fmt.Errorf("job %d served by %d instances, want 1: %v", jobID, len(recs), err)
	}
	ev, _ = e.sb.Stack.GitHub.WorkflowJobEvent(jobID)
	if _, status, err := sender.SendWorkflowJob(ctx, "completed", ev); err != nil || status != http.StatusOK {
		return fmt.Errorf("completed delivery: %d, %v", status, err)
	}
	_, err = serveUntil(ctx, worker, func() (bool, error) {
		rec, err := e.sb.Store.Get(ctx, recs[0].ID)
		return err == nil && (!rec.State.Live() || rec.State == store.StateTerminating || rec.RunID != recs[0].RunID), err
	})
	return err
}
