//go:build faults

// The spot-reclaim step of the fault matrix: EC2 announces the interruption of running instances
// through instance metadata and terminates them later, as it reclaims spot capacity.
package faults_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// spotNotice is the interruption's notice in this step: EC2's two minutes scaled down, but longer
// than the agents' 5 s poll and the release, so the step judges the announced reclaim.
const spotNotice = 30 * time.Second

// spotReclaim: each run provisions spotPerRun+1 runners, runs a job, has EC2 announce the
// interruption of all but the last, waits until their agents reported it, and releases the run.
// Every interrupted instance must be expired with the reclaim named, never pooled, and terminated by
// refresh; the one left alone must be pooled (a healthy instance is never terminated); no run record
// may be left provisioning; and the whole deployment must pass env.verify.
func spotReclaim(t *testing.T, e *env) {
	ctx := t.Context()
	const runs, spotPerRun = 5, 4
	r := e.replica(replicaOptions{})
	ok, injected, healthyTerminated, stuck := 0, 0, 0, 0
	for i := range runs {
		n, bad, err := spotRun(ctx, e, r, spotPerRun, i == 0)
		injected += n
		healthyTerminated += bad
		if err != nil {
			if errorsIsStuck(err) {
				stuck++
			}
			t.Errorf("spot-reclaim run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	if injected < 20 {
		t.Errorf("only %d interruptions announced, want at least 20", injected)
	}
	e.report("spot-reclaim", runs, ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d interruptions=%d", healthyTerminated, stuck, injected))
}

// spotRun is one run of spotReclaim: the interruptions announced, the healthy instances terminated,
// and what failed.
func spotRun(ctx context.Context, e *env, r *replica, spot int, job bool) (int, int, error) {
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := e.provision(pctx, r, spot+1)
	if res.RunKey != "" {
		e.mu.Lock()
		e.answered = append(e.answered, res.RunKey)
		e.mu.Unlock()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("provision: %w", err)
	}
	if run, gerr := e.sb.Store.GetRun(ctx, res.RunKey); gerr == nil && run.Status == provision.StatusProvisioning {
		return 0, 0, fmt.Errorf("%w: run %s still provisioning", errStuck, res.RunKey)
	}
	interrupted := map[string]bool{}
	for _, rn := range res.Runners[:spot] {
		if err := e.sb.Stack.EC2.InterruptSpot(rn.InstanceID, spotNotice); err != nil {
			return len(interrupted), 0, err
		}
		interrupted[rn.InstanceID] = true
	}
	healthy := res.Runners[spot].InstanceID
	deadline := time.Now().Add(20 * time.Second)
	for id := range interrupted {
		for {
			sig, err := e.sb.Store.LastSignal(ctx, id)
			if err == nil && sig.Signal == store.SignalSpotInterrupted {
				break
			}
			if time.Now().After(deadline) {
				return len(interrupted), 0, fmt.Errorf("agent of %s did not report the notice within 20 s (last %+v, %v)", id, sig, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	rep, err := e.release(ctx, r, res.RunKey)
	if err != nil {
		return len(interrupted), 0, fmt.Errorf("release: %w", err)
	}
	for _, in := range rep.Instances {
		want, reason := release.Pooled, ""
		if interrupted[in.ID] {
			want, reason = release.Expired, "runner "+in.ID+" was reclaimed by EC2 (spot interruption) at "
		}
		if in.Outcome != want || !strings.HasPrefix(in.Reason, reason) {
			return len(interrupted), 0, fmt.Errorf("release of %s: %s (%s), want %s %q", in.ID, in.Outcome, in.Reason, want, reason)
		}
	}
	bad, err := e.judge(ctx, judged{used: []string{healthy}})
	if err != nil {
		return len(interrupted), bad, err
	}
	for id := range interrupted {
		rec, err := e.sb.Store.Get(ctx, id)
		if err != nil {
			return len(interrupted), 0, err
		}
		if rec.State != store.StateTerminated && rec.State != store.StateTerminating {
			return len(interrupted), 0, fmt.Errorf("interrupted %s is %s after refresh (pooled at %v), want terminated", id, rec.State, rec.PooledAt)
		}
	}
	return len(interrupted), bad, nil
}
