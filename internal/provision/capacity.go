// The instance caps around creation: the fleet's instances are reserved before it is launched and
// the reservation is settled on the instances recorded (Options.Capacity).
package provision

import (
	"context"
	"fmt"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// reserve reserves the n instances the job's fleet will launch. A refusal is the request's
// (unsuccessful: what was claimed goes back to the pool) and retryable: the same run attempt may
// ask again once capacity is freed.
func (p *Provisioner) reserve(ctx context.Context, j *job, n int) error {
	if p.opts.Capacity == nil {
		return nil
	}
	if err := p.opts.Capacity.Reserve(ctx, j.token, j.rc.Name, n); err != nil {
		return &stepError{err: fmt.Errorf("creation: %w", err), unsuccessful: true}
	}
	return nil
}

// settle names the recorded instances of the job's fleet (none: the fleet launched nothing, and
// the reservation is given back). A failure is logged: refresh's quota repair settles the account.
func (p *Provisioner) settle(ctx context.Context, j *job, recs []store.Instance) {
	if p.opts.Capacity == nil {
		return
	}
	var err error
	if len(recs) == 0 {
		err = p.opts.Capacity.Release(ctx, j.token, j.rc.Name)
	} else {
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.ID
		}
		err = p.opts.Capacity.Settle(ctx, j.token, j.rc.Name, ids)
	}
	if err != nil {
		j.log.Warn("instance reservation not settled; refresh repairs it", "err", err)
	}
}
