// The scale set's statistics kept for its warm pool's autoscale: the leader's convergence reads
// them as live demand (warmpool/autoscale_live.go) wherever this listener runs. Written when they
// change, and at least every statsRefresh while messages come, so a reading is never older than
// the leader can tell; a failed write is logged, never holds up the messages.

package scalesets

import (
	"context"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// statsRefresh is how often unchanged statistics are written again while messages come.
const statsRefresh = time.Minute

// keptStats is what this session last wrote.
type keptStats struct {
	stats scaleset.Statistic
	at    time.Time
}

// keepStats writes the statistics of a message or session, if they changed or are due.
func (p *poller) keepStats(ctx context.Context, st scaleset.Statistic) {
	now := p.l.m.cfg.Now()
	if !p.stats.at.IsZero() && st == p.stats.stats && now.Sub(p.stats.at) < statsRefresh {
		return
	}
	err := p.l.m.cfg.Store.PutScaleSetStats(ctx, store.ScaleSetStats{
		Pool: p.l.set.WarmPool, ScaleSet: p.l.key, ScaleSetID: p.ss.ID,
		Available: st.TotalAvailableJobs, Acquired: st.TotalAcquiredJobs, Assigned: st.TotalAssignedJobs, Running: st.TotalRunningJobs,
		At: now,
	})
	if err != nil {
		p.l.log.Warn("scale set statistics not kept: the pool's autoscale counts without them", "err", err)
		return
	}
	p.stats = keptStats{stats: st, at: now}
}
