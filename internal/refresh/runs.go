// The stuck-run phase: a run left provisioning by a replica that crashed or hung is taken over
// (Options.TakeOver, provision.Provisioner.TakeOverAbandoned), so its retries are answered, its
// release proceeds and its instances are handed back, discarded or adopted rather than left
// claimed, created or running until their thresholds.
package refresh

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
)

// PhaseRuns names the stuck-run phase in reports and errors.
const PhaseRuns = "runs"

// settledRuns remembers the runs found with no provision in progress, so each run named by live
// records is read once per replica, not once per pass: a stored result is final (a rolled-back
// run provisions again only with nothing of it left running). Pruned to the runs still named.
type settledRuns struct {
	mu   sync.Mutex
	keys map[string]bool
}

// runs asks the takeover about every run the pass's live records name that is not known settled.
func (r *Refresher) runs(ctx context.Context, p *pass) {
	if r.opts.TakeOver == nil || p.live == nil {
		return
	}
	named := map[string]bool{}
	for _, rec := range p.live {
		// Any state: a provision claims, creates and promotes records of the run, and refresh may
		// have begun terminating them (past their thresholds) before the run was taken over.
		if rec.RunID != "" {
			named[rec.RunID] = true
		}
	}
	r.settled.mu.Lock()
	if r.settled.keys == nil {
		r.settled.keys = map[string]bool{}
	}
	maps.DeleteFunc(r.settled.keys, func(k string, _ bool) bool { return !named[k] })
	var ask []string
	for _, k := range slices.Sorted(maps.Keys(named)) {
		if !r.settled.keys[k] {
			ask = append(ask, k)
		}
	}
	r.settled.mu.Unlock()

	var g errgroup.Group
	g.SetLimit(r.opts.Concurrency)
	for _, key := range ask {
		g.Go(func() error {
			settled, err := r.opts.TakeOver(ctx, key)
			if err != nil {
				p.fail(PhaseRuns, fmt.Errorf("run %s: %w", key, err))
				return nil
			}
			r.settled.mu.Lock()
			r.settled.keys[key] = settled
			r.settled.mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
}
