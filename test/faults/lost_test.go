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

	"github.com/runnerpool/terraform-provider-runnerpool/internal/condwrite"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/faults"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// lostShare is the part of the lossy replica's other AWS requests whose answer is lost.
const lostShare = 0.2

// lostAnswer: one replica whose every conditional write, and a fifth of its other DynamoDB, SQS
// and EC2 requests (first attempts), is applied and its answer lost. Each run is a workflow
// (provision of two, a job on the first run, release), a refresh pass, a convergence after the
// warm pool's target changed, and on every fourth run a pool job served through the webhook path
// by the pool-job worker. Every provision and release must succeed, no instance the run used may be
// terminated or expired (all are healthy), no run record may be left provisioning, and the whole
// deployment must pass env.judge (env.verify with the checker's rules of transient faults). After
// the runs, otherWrites makes the conditional writes no workflow makes; every conditional write
// internal/condwrite declares must have lost an answer at least once, and none may be unnamed.
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
			w, err := judgedWorkflow(ctx, e, r, i)
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
			n, err := e.judge(ctx, w)
			healthyTerminated += n
			return err
		}()
		if err != nil {
			t.Errorf("lost-answer run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	if err := otherWrites(t, e, r); err != nil {
		t.Errorf("lost-answer, the writes no workflow makes: %v", err)
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
	hit, missed, unnamed := coverage(writes)
	if len(missed) > 0 {
		t.Errorf("conditional writes never hit: %s", strings.Join(missed, ", "))
	}
	if len(unnamed) > 0 {
		t.Errorf("conditional writes without a name (declare them with condwrite): %s", strings.Join(unnamed, "; "))
	}
	e.report("lost-answer", runs, ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d lost=%d conditional_writes=%d/%d",
		healthyTerminated, stuck, total, hit, len(condwrite.All())))
}

var errStuck = errors.New("run left waiting")

func errorsIsStuck(err error) bool { return errors.Is(err, errStuck) }

// answerDeadline is the deadline of a provision and of a release under a fault: the workflow
// step's own (a minute, as the sandbox scales time).
const answerDeadline = time.Minute

// judged is what a workflow under a fault leaves for the checker: the instances its run used (all
// healthy) and how its provision and release answered.
type judged struct {
	used    []string
	answers []invariant.Answer
}

// judgedWorkflow is one workflow (provision of two, a job on the first run, release) on replica r
// under a fault: the provision must answer within a minute, leave no run record provisioning, and
// the release must pool every instance.
func judgedWorkflow(ctx context.Context, e *env, r *replica, i int) (judged, error) {
	pctx, cancel := context.WithTimeout(ctx, answerDeadline)
	defer cancel()
	var j judged
	began := time.Now()
	res, err := e.provision(pctx, r, 2)
	j.answers = append(j.answers, invariant.Answer{Op: "provision", Run: res.RunKey, Took: time.Since(began), Deadline: answerDeadline, Err: err})
	for _, rn := range res.Runners {
		j.used = append(j.used, rn.InstanceID)
	}
	if res.RunKey != "" {
		e.mu.Lock()
		e.answered = append(e.answered, res.RunKey)
		e.mu.Unlock()
		if run, gerr := e.sb.Store.GetRun(ctx, res.RunKey); gerr == nil && run.Status == provision.StatusProvisioning {
			return j, fmt.Errorf("%w: run %s still provisioning after its provision returned (%v)", errStuck, res.RunKey, err)
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, provision.ErrInProgress) {
			return j, fmt.Errorf("%w: provision: %w", errStuck, err)
		}
		return j, fmt.Errorf("provision: %w", err)
	}
	if i == 0 {
		if err := runJob(e, res); err != nil {
			return j, err
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, answerDeadline)
	defer rcancel()
	began = time.Now()
	rep, err := e.release(rctx, r, res.RunKey)
	j.answers = append(j.answers, invariant.Answer{Op: "release", Run: res.RunKey, Took: time.Since(began), Deadline: answerDeadline, Err: err})
	if err != nil {
		return j, fmt.Errorf("release: %w", err)
	}
	for _, in := range rep.Instances {
		if in.Outcome != release.Pooled {
			return j, fmt.Errorf("release of run %s: %s %s (%s), want pooled", res.RunKey, in.ID, in.Outcome, in.Reason)
		}
	}
	return j, nil
}

// judge is what follows a run under a fault: env.verify, whose late check also asks the checker's
// rules of transient faults: no instance of j.used (all healthy) terminated or expired, no
// termination for a transient fault or without a reason, the provision and release answered within
// their deadline, no run provisioning past it, and every idle instance pooled again. It returns
// how many healthy instances were terminated.
func (e *env) judge(ctx context.Context, j judged) (int, error) {
	rep, err := e.verifyWith(ctx, invariant.Options{
		Healthy: j.used, Terminations: true, Answers: j.answers, ProvisionDeadline: answerDeadline, IdlePooled: true,
	})
	return rep.Count(invariant.RuleHealthyTerminated), err
}

// lostPoolJob: a pool job delivered once by webhook, served by the worker, run, and completed.
func lostPoolJob(ctx context.Context, e *env, worker *pooljob.Worker, sender *githubfake.WebhookSender) error {
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
