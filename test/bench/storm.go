// The fault_storm phase: GitHub answers 5xx for 60 s and EC2 refuses every mutating call for 30 s
// (both scaled by the time factor) while a mixed load of workflows runs; then how long until every
// idle instance is pooled again.
package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"golang.org/x/sync/errgroup"
)

// The storm's windows, before scaling.
const (
	stormGitHubOutage = 60 * time.Second
	stormEC2Throttle  = 30 * time.Second
)

// phaseFaultStorm runs Workflows workflows (provision of 1 to MaxCount runners, a job, release),
// Concurrency at a time, starting as GitHub goes down (5xx) and EC2 throttles every mutating call.
// A workflow either succeeds or fails cleanly (the API answered with an error); no instance pooled
// when the storm began may be terminated because of it. Then refresh passes run until every idle
// instance is pooled again.
func phaseFaultStorm(ctx context.Context, h *harness, res *Result) error {
	// A pool to lose: instances pooled before the storm (when earlier phases left none).
	if pooled, err := h.pooledIdle(ctx); err == nil && len(pooled) < h.o.Concurrency {
		if err := h.stormWorkflow(ctx, h.o.Concurrency-len(pooled)); err != nil {
			return fmt.Errorf("filling the pool before the storm: %w", err)
		}
		if _, err := h.repooled(ctx, time.Now()); err != nil {
			return fmt.Errorf("filling the pool before the storm: %w", err)
		}
	}
	pooled, err := h.pooledIdle(ctx)
	if err != nil {
		return err
	}
	outage, throttle := h.o.scaled(stormGitHubOutage), h.o.scaled(stormEC2Throttle)
	began := time.Now()
	h.sb.Stack.GitHub.SetOutage(outage)
	h.sb.Stack.EC2.SetThrottleMutating(throttle)
	ended := began.Add(max(outage, throttle))
	ok, failed := h.stormWorkflows(ctx)
	h.sb.Stack.GitHub.SetOutage(0)
	h.sb.Stack.EC2.SetThrottleMutating(0)
	if wait := time.Until(ended); wait > 0 {
		time.Sleep(wait)
	}
	recovery, rerr := h.repooled(ctx, time.Now())
	lost := 0
	for _, id := range pooled {
		if v, found := h.sb.Stack.EC2.Instance(id); !found || v.State == "shutting-down" || v.State == "terminated" {
			lost++
		}
	}
	how := fmt.Sprintf("%d workflows, %d at a time, during %s of GitHub 5xx and %s of EC2 RequestLimitExceeded on every mutating call (60 s and 30 s scaled by %g)",
		h.o.Workflows, h.o.Concurrency, outage, throttle, h.o.Factor)
	res.add(Figure{Name: "storm_healthy_terminated", Value: float64(lost), How: fmt.Sprintf("of the %d instances pooled when the storm began, those terminated by the end (%s)", len(pooled), how)})
	res.add(Figure{Name: "storm_provisions_ok", Value: float64(ok), How: how})
	res.add(Figure{Name: "storm_provisions_failed_cleanly", Value: float64(failed), How: "workflows whose provision or release answered with an error (" + how + ")"})
	f := Figure{Name: "storm_recovery_s", Value: recovery.Seconds(), Unit: "s",
		How: "from the end of the storm until every idle instance not past its threshold is pooled again, refresh passes run back to back"}
	if rerr != nil {
		f.Missing = rerr.Error()
	}
	res.add(f)
	h.say("  storm: %d ok, %d failed cleanly, %d of %d pooled instances terminated, recovery %s", ok, failed, lost, len(pooled), recovery.Round(time.Millisecond))
	return rerr
}

// stormWorkflows runs the storm's workflows and counts those that succeeded and those that failed
// with an answer.
func (h *harness) stormWorkflows(ctx context.Context) (ok, failed int) {
	var mu sync.Mutex
	var g errgroup.Group // every item runs: failures are recorded, never cancel the others
	g.SetLimit(h.o.Concurrency)
	for range h.o.Workflows {
		count := 1 + h.rng.IntN(h.o.MaxCount)
		g.Go(func() error {
			err := h.stormWorkflow(ctx, count)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else {
				failed++
			}
			return nil
		})
	}
	_ = g.Wait()
	return ok, failed
}

func (h *harness) stormWorkflow(ctx context.Context, count int) error {
	wf, err := h.newWorkflow()
	if err != nil {
		return err
	}
	resp, _, err := wf.provision(ctx, count)
	if err == nil {
		_, err = h.runJob(ctx, wf, resp)
	}
	// The workflow's always() release, after a failed provision too.
	if _, rerr := wf.release(ctx); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// pooledIdle lists the idle instances the control plane marked pooled.
func (h *harness) pooledIdle(ctx context.Context) ([]string, error) {
	idle, err := h.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
	if err != nil {
		return nil, err
	}
	// An instance whose idle time ends before the storm and its recovery can (2 minutes) is
	// terminated for that, not because of the storm: it is not the storm's to lose. (In a whole
	// bench run the earlier phases' pooled instances reach their thresholds around the storm.)
	horizon := time.Now().Add(2 * time.Minute)
	var ids []string
	for _, rec := range idle {
		if rec.RunID == "" && !rec.PooledAt.IsZero() && rec.Threshold.After(horizon) {
			ids = append(ids, rec.ID)
		}
	}
	return ids, nil
}

// repooled runs refresh passes until every idle instance not past its threshold is pooled, and
// returns how long that took from since (at most two minutes).
func (h *harness) repooled(ctx context.Context, since time.Time) (time.Duration, error) {
	cp, err := h.wired(controlplane.Clients{GitHub: h.sb.GitHub}, controlplane.Options{Refresh: refresh.Options{Scopes: []string{sandbox.Scope}}})
	if err != nil {
		return time.Since(since), err
	}
	ref := cp.Refresher
	for deadline := since.Add(2 * time.Minute); ; {
		if _, err := ref.Run(ctx); err != nil {
			h.say("  storm recovery: refresh pass: %v", err)
		}
		idle, err := h.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
		if err != nil {
			return time.Since(since), err
		}
		waiting := 0
		for _, rec := range idle {
			if rec.RunID == "" && rec.PooledAt.IsZero() && !rec.Expired(time.Now()) {
				waiting++
			}
		}
		if waiting == 0 {
			return time.Since(since), nil
		}
		if time.Now().After(deadline) {
			return time.Since(since), errors.New(fmt.Sprint(waiting, " idle instances still not pooled two minutes after the storm"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
