// The instance caps in convergence: each fleet's instances are reserved before it is launched
// (Options.Capacity) and the reservation is settled on the instances recorded. Where a cap leaves
// less room than the pool lacks, convergence creates what fits and the pool's report says how many
// the cap held back and which cap.
package warmpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
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

// reserve reserves up to n instances of the batch id, of the missing ones; it returns how many
// may be created (0 when a cap has no room left, recorded in pr).
func (c *Converger) reserve(ctx context.Context, id, class string, n, missing int, pr *PoolReport) (int, error) {
	if c.opts.Capacity == nil {
		return n, nil
	}
	err := c.opts.Capacity.Reserve(ctx, id, class, n)
	var refused *quota.RefusedError
	if err != nil && !errors.As(err, &refused) {
		return 0, fmt.Errorf("reserving %d instances: %w", n, err)
	}
	if err == nil {
		return n, nil
	}
	// A refusal writes nothing: what the cap has room for may be reserved under the same id.
	if room := refused.Max - refused.Current; room > 0 && room < n {
		if c.opts.Capacity.Reserve(ctx, id, class, room) == nil {
			c.capped(pr, missing-room, refused.Kind)
			return room, nil
		}
	}
	c.capped(pr, missing, refused.Kind)
	return 0, nil
}

func (c *Converger) capped(pr *PoolReport, n int, limit string) {
	if pr.CappedBy == "" && c.opts.OnCapped != nil {
		c.opts.OnCapped(limit)
	}
	pr.Capped, pr.CappedBy = n, limit
}

// settle names the recorded instances of a batch (none: the fleet launched nothing, and the
// reservation is given back). A failure is logged: refresh's quota repair settles the account.
func settle(ctx context.Context, capacity Capacity, id, class string, recs []store.Instance, log *slog.Logger) {
	if capacity == nil {
		return
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	var err error
	if len(recs) == 0 {
		err = capacity.Release(dctx, id, class)
	} else {
		err = capacity.Settle(dctx, id, class, ids(recs))
	}
	if err != nil {
		log.Warn("instance reservation not settled; refresh repairs it", "reservation", id, "err", err)
	}
}
