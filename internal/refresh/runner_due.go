// runner_due.go: idle instances whose Actions runner fell behind. GitHub stops assigning jobs to a
// runner 30 days after a newer release, at once after a critical security release; an idle instance
// still running an older runner than the operator's lag allows (Options.RunnerDue) is expired here,
// run-less and conditionally, so no claim can take it (claims need a threshold ahead) and the next
// expiry phase terminates it. Instances holding a run are never touched: never during a job.
package refresh

import (
	"context"
	"errors"
	"fmt"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// PhaseRunnerDue names the errors of the runner-due phase.
const PhaseRunnerDue = "runner-due"

// dueStates are the states of instances that wait for a run: pooled, hot and stopped warm ones.
var dueStates = map[store.State]bool{store.StateIdle: true, store.StateReady: true, store.StateStopped: true}

func (r *Refresher) retireDue(ctx context.Context, p *pass) {
	if r.opts.RunnerDue == nil || p.live == nil {
		return
	}
	var due []store.Instance
	for _, rec := range p.live {
		if dueStates[rec.State] && rec.RunID == "" {
			if why := r.opts.RunnerDue(rec); why != "" {
				rec.Reason = why
				due = append(due, rec)
			}
		}
	}
	forEach(r.opts.Concurrency, due, func(rec store.Instance) {
		_, err := r.st.ExpireNoRun(ctx, rec.ID, rec.Reason)
		switch {
		case err == nil:
			r.log.InfoContext(ctx, "refresh: idle instance retired, its runner is behind", "instance", rec.ID, "reason", rec.Reason)
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// Claimed or gone since the listing: not ours to retire.
		default:
			p.fail(PhaseRunnerDue, fmt.Errorf("retiring %s: %w", rec.ID, err))
		}
	})
}
