// The instance caps in convergence: each fleet's instances are reserved before it is launched
// (Options.Capacity) and the reservation is settled on the instances recorded. Where a cap leaves
// less room than the pool lacks, convergence creates what fits and the pool's report says how many
// the cap held back and which cap.
package warmpool

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Capacity reserves instances against the instance caps; *quota.Caps satisfies it.
type Capacity interface {
	Reserve(ctx context.Context, id, runnerClass string, n int) error
	Settle(ctx context.Context, id, runnerClass string, instances []string) error
	Release(ctx context.Context, id, runnerClass string) error
}

// reservationID names one fleet's reservation. It must be new for every fleet: reserving an id
// that exists counts nothing (that is how a retried call counts once).
func reservationID(prefix string) string {
	return fmt.Sprintf("%s/%016x", prefix, rand.Uint64())
}

func (c *Converger) capped(pr *PoolReport, n int, limit string) {
	if pr.CappedBy == "" && c.opts.OnCapped != nil {
		c.opts.OnCapped(limit)
	}
	pr.Capped, pr.CappedBy = n, limit
}
