// Phase 6: the agent partitions' sweep. An agent partition holds what an instance's agent reports
// (heartbeat, signals, acknowledgements), and whatever a job that reached the instance role wrote
// there. The sweep deletes:
//   - items no live instance owns (the instance is terminated or was never recorded): the agent's
//     own carry a TTL, a job's may not;
//   - items that carry an index key (idx_state, idx_run, idx_pool): never the agent's writing, and
//     listings skip them anyway (store/foreign.go); their keys are logged, for the audit.
//
// It is a Scan of the table, so it runs at most every Options.AgentSweepInterval.

package refresh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// PhaseAgents names the agent partitions' sweep in reports and errors.
const PhaseAgents = "agents"

// DefaultAgentSweepInterval is the default pace of the agent partitions' sweep.
const DefaultAgentSweepInterval = 10 * time.Minute

// AgentReport covers phase 6.
type AgentReport struct {
	// Swept is set when the pass ran the sweep (at most every AgentSweepInterval).
	Swept bool `json:"swept"`
	// Checked counts the items of agent partitions.
	Checked int `json:"checked"`
	// Unowned counts the items deleted because no live instance owns them.
	Unowned int `json:"unowned"`
	// Foreign lists the keys ("pk sk") of the items deleted because they carried an index key.
	Foreign []string `json:"foreign,omitempty"`
}

// agents runs the sweep when it is due.
func (r *Refresher) agents(ctx context.Context, p *pass) {
	r.mu.Lock()
	due := r.lastSweep.IsZero() || p.now.Sub(r.lastSweep) >= r.opts.AgentSweepInterval
	if due {
		r.lastSweep = p.now
	}
	r.mu.Unlock()
	if !due {
		return
	}
	items, err := r.st.AgentItems(ctx)
	if err != nil {
		p.fail(PhaseAgents, fmt.Errorf("listing agent items: %w", err))
		return
	}
	p.update(func(rep *Report) { rep.Agents.Swept, rep.Agents.Checked = true, len(items) })
	owned := r.owners(ctx, p, items)
	forEach(r.opts.Concurrency, items, func(it store.AgentItem) {
		live, known := owned[it.ID]
		if !it.Indexed && (live || !known) {
			return
		}
		if err := r.st.DeleteAgentItem(ctx, it); err != nil {
			p.fail(PhaseAgents, err)
			return
		}
		if it.Indexed {
			r.log.WarnContext(ctx, "refresh: deleted an agent item carrying an index key (a job that reached the instance role, or a bug)",
				"instance", it.ID, "key", it.PK+" "+it.SK)
		}
		p.update(func(rep *Report) {
			if it.Indexed {
				rep.Agents.Foreign = append(rep.Agents.Foreign, it.PK+" "+it.SK)
			} else {
				rep.Agents.Unowned++
			}
		})
	})
}

// owners says, for each instance owning agent items, whether it is live. An instance missing from
// the pass's listing (eventually consistent) is read again with a strongly consistent Get before
// its items are called unowned; an owner that could not be read is left out (its items are kept).
func (r *Refresher) owners(ctx context.Context, p *pass, items []store.AgentItem) map[string]bool {
	owned := map[string]bool{}
	var unknown []string
	for _, it := range items {
		if _, seen := owned[it.ID]; seen {
			continue
		}
		_, live := p.live[it.ID]
		owned[it.ID] = live
		if !live {
			unknown = append(unknown, it.ID)
		}
	}
	var mu sync.Mutex
	forEach(r.opts.Concurrency, unknown, func(id string) {
		rec, err := r.st.Get(ctx, id)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil && rec.State.Live():
			owned[id] = true
		case err != nil && !errors.Is(err, store.ErrNotFound):
			delete(owned, id)
		}
	})
	return owned
}
