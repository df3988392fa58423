//go:build faults

// The rollback step (issue #28): provisions rolled back after their claims were verified, whose
// reused instances came from an owner-scoped pool and whose runners took a job of the run before
// the rollback. A hand-back of such an instance is a release (release.Releaser.HandBack): it goes
// back only under the run's repository and only when its class reuses instances, never to
// another repository, and never under the owner's scope it was claimed from.
package faults_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// rollbackOwner is the owner whose scope the step's pooled instances are announced under, as an
// owner-scoped warm pool announces its hot instances.
const rollbackOwner = "acme"

// rollbackCauses are the ways a provision fails after its claims were verified: creation gets no
// capacity, or its created instances never register (fleet validation).
var rollbackCauses = []string{"capacity", "never-registers"}

// rollbacks runs, for each reuse rule and cause, a provision of the pool's instances plus one
// created, with a job of the run queued from the start, that rolls back; then it judges every
// instance the provision handed back, and the deployment.
func rollbacks(t *testing.T, e *env) {
	ctx := t.Context()
	healthy := e.replica(replicaOptions{})
	runs, ok := 0, 0
	var healthyTerminated, stuck, crossScope int
	for _, reuse := range []string{declared.ReuseSameRepository, declared.ReuseNever} {
		for _, cause := range rollbackCauses {
			runs++
			v, err := rollbackOnce(ctx, e, healthy, reuse, cause)
			healthyTerminated += v.healthyTerminated
			crossScope += v.crossScope
			stuck += v.stuck
			if err != nil {
				t.Errorf("rollback (reuse %s, %s): %v", reuse, cause, err)
				continue
			}
			ok++
		}
	}
	e.report("rollback", runs, ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d cross_scope=%d", healthyTerminated, stuck, crossScope))
	if healthyTerminated+stuck+crossScope > 0 {
		t.Errorf("healthy_terminated=%d stuck_runs=%d cross_scope=%d, want 0", healthyTerminated, stuck, crossScope)
	}
}

type rollbackVerdict struct{ healthyTerminated, stuck, crossScope int }

func rollbackOnce(ctx context.Context, e *env, healthy *replica, reuse, cause string) (rollbackVerdict, error) {
	var v rollbackVerdict
	if err := e.stock(ctx, healthy, 2); err != nil {
		return v, err
	}
	pooled, err := e.ownerScoped(ctx, healthy)
	if err != nil {
		return v, err
	}
	r := e.replica(replicaOptions{reuse: reuse})
	// A pickup may miss a pooled instance (an SQS short poll samples a subset of its servers, a
	// stale message hides a fresh one for a moment): a rollback that reused none of the pool's
	// instances proves nothing, and the provision is asked again as another run.
	var returned map[string]bool
	var res provision.Result
	for try := 0; try < 3 && len(returned) == 0; try++ {
		if res, err = rolledBack(ctx, e, r, len(pooled)+1, cause); err != nil {
			return v, err
		}
		returned = map[string]bool{}
		for _, u := range res.Undone {
			if pooled[u.InstanceID] {
				returned[u.InstanceID] = true
			}
		}
	}
	if len(returned) == 0 {
		return v, fmt.Errorf("three rollbacks handed back none of the pool's instances %v; the last: %+v", pooled, res.Undone)
	}
	v.crossScope, v.healthyTerminated, err = e.judgeHandBacks(ctx, r, returned, reuse)
	if err != nil {
		return v, err
	}
	rep, verr := e.verifyWith(ctx, invariant.Options{ProvisionDeadline: provisionDeadline})
	for _, vio := range rep.Violations {
		if vio.Rule == invariant.RuleStuckRun {
			v.stuck++
		}
	}
	if verr != nil {
		return v, verr
	}
	if v.crossScope+v.healthyTerminated > 0 {
		return v, fmt.Errorf("cross_scope=%d healthy_terminated=%d", v.crossScope, v.healthyTerminated)
	}
	return v, nil
}

// rolledBack provisions count runners for a new run, with a job of the run queued before the
// provision (a reused runner takes it as soon as it registers, before the rollback: runs-on:
// ${{ github.run_id }}-${{ github.run_attempt }} with no needs), and the fault cause in force: the provision must roll back.
func rolledBack(ctx context.Context, e *env, r *replica, count int, cause string) (provision.Result, error) {
	req := e.request(count)
	run, _ := strconv.ParseInt(req.RunID, 10, 64)
	e.sb.Stack.GitHub.QueueJob("acme", "app", run, []string{req.Label()})
	switch cause {
	case "capacity":
		e.sb.Stack.EC2.SetCapacity("", "", 0)
		defer e.sb.Stack.EC2.SetCapacity("", "", -1)
	case "never-registers":
		e.noAgent.Store(true)
		defer e.noAgent.Store(false)
	}
	res, err := r.prov.Provision(ctx, req)
	if err == nil || res.Outcome != "unsuccessful" {
		return res, fmt.Errorf("provision = %v (%+v), want it rolled back", err, res)
	}
	e.answer(res.RunKey)
	return res, nil
}

// answer records a run whose provision answered (the stuck-run rule's Answered).
func (e *env) answer(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.answered = append(e.answered, key)
}

// ownerScoped re-announces every pooled idle instance of the default class under the owner's
// scope, as an owner-scoped hot pool holds them: the record's scope is the owner's, marked pooled
// anew, with one message of that pooling (the release's message is stale from then on).
func (e *env) ownerScoped(ctx context.Context, r *replica) (map[string]bool, error) {
	recs, err := r.st.ByState(ctx, store.StateIdle, time.Time{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, rec := range recs {
		if rec.PooledAt.IsZero() || rec.RunnerClass != sandbox.RunnerClass || !rec.Threshold.After(time.Now()) {
			continue
		}
		// A record changes scope only on its way to idle: through a claim of a run of the setup's
		// own, at once handed back (its agent is not woken, and no credential is written).
		setup := "rescope-" + rec.ID
		if _, err := r.st.Claim(ctx, rec.ID, setup, rec.Threshold, store.StateIdle); err != nil {
			return nil, fmt.Errorf("scoping %s to %s: %w", rec.ID, rollbackOwner, err)
		}
		none := ""
		in, err := r.st.Transition(ctx, rec.ID, store.Change{
			From: []store.State{store.StateClaimed}, To: store.StateIdle, RunID: setup, SetRunID: &none, Threshold: rec.Threshold,
			SetScope: rollbackOwner, RunnerClass: rec.RunnerClass, MarkPooled: true, Reason: "rollback step: owner-scoped",
		})
		if err != nil {
			return nil, fmt.Errorf("scoping %s to %s: %w", rec.ID, rollbackOwner, err)
		}
		if err := r.queue.Put(ctx, claim.MessageOf(in), 0); err != nil {
			return nil, err
		}
		out[in.ID] = true
	}
	return out, nil
}

// judgeHandBacks reads what became of the instances a rollback handed back: pooled only under the
// run's repository and only when the class reuses instances (cross_scope counts the others, with
// every live pool message naming another scope); under same-repository, an instance whose agent
// confirmed and whose runner GitHub no longer lists is pooled, not terminated (healthy_terminated).
func (e *env) judgeHandBacks(ctx context.Context, r *replica, returned map[string]bool, reuse string) (cross, healthyTerminated int, _ error) {
	for id := range returned {
		rec, err := r.st.Get(ctx, id)
		if err != nil {
			return 0, 0, err
		}
		pooled := rec.State == store.StateIdle && !rec.PooledAt.IsZero() && rec.Threshold.After(time.Now())
		switch {
		case pooled && (reuse == declared.ReuseNever || rec.Scope != sandbox.Scope):
			cross++
			e.t.Logf("rollback: %s pooled under %q (reuse %s)", id, rec.Scope, reuse)
		case !pooled && reuse == declared.ReuseSameRepository:
			healthyTerminated++
			e.t.Logf("rollback: %s is %s (threshold %s), want it pooled for %s", id, rec.State, rec.Threshold, sandbox.Scope)
		}
	}
	msgs, err := peek(ctx, r, r.queue)
	if err != nil {
		return cross, healthyTerminated, err
	}
	for _, m := range msgs {
		rec, err := r.st.Get(ctx, m.InstanceID)
		if err != nil || !returned[m.InstanceID] || !m.Announces(rec.PooledAt) {
			continue // not handed back by this run, or a stale message no claim takes
		}
		if reuse == declared.ReuseNever || m.Scope != sandbox.Scope {
			cross++
			e.t.Logf("rollback: live pool message of %s under %q (reuse %s)", m.InstanceID, m.Scope, reuse)
		}
	}
	return cross, healthyTerminated, nil
}

// peek reads the queue's messages, each hidden for a second only, so the pool is left as it was.
func peek(ctx context.Context, r *replica, q *pool.Queue) ([]pool.Message, error) {
	var out []pool.Message
	seen := map[string]bool{}
	for empty := 0; empty < 3; {
		got, err := r.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 1})
		if err != nil {
			return nil, err
		}
		fresh := 0
		for _, m := range got.Messages {
			if seen[aws.ToString(m.MessageId)] {
				continue
			}
			seen[aws.ToString(m.MessageId)] = true
			fresh++
			if msg, err := pool.Decode(aws.ToString(m.Body)); err == nil {
				out = append(out, msg)
			}
		}
		if fresh == 0 {
			empty++
		}
	}
	return out, nil
}
