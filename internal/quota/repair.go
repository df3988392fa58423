// Giving back what is no longer held, from the instance records: Recount (one reservation, e.g.
// after a release) and Repair (all of them, every refresh).
package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Instances is the part of the instance store a recount reads; *store.Store satisfies it.
type Instances interface {
	Get(ctx context.Context, id string) (store.Instance, error)
}

// InstanceCounters are the counters an instance of a runner class counts on.
func InstanceCounters(class string) []string { return []string{DeploymentCounter, ClassCounter(class)} }

// Recount gives back the units of a settled reservation whose instances no longer hold them
// (terminated, gone, or no longer serving the reservation's run), and releases a pending one past
// its deadline. It reads every instance record strongly consistent, so a record just written is
// never missed. It returns the units given back.
func (l *Ledger) Recount(ctx context.Context, st Instances, id string) (int, error) {
	for range l.o.Attempts {
		r, err := l.Reservation(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		freed, err := l.recount(ctx, st, r)
		if !errors.Is(err, errChanged) {
			return freed, err
		}
	}
	return 0, fmt.Errorf("recounting %s: %w", id, errChanged)
}

func (l *Ledger) recount(ctx context.Context, st Instances, r Reservation) (int, error) {
	if !r.Settled {
		if l.o.Now().Before(r.Deadline) {
			return 0, nil
		}
		return r.Amount, l.adjust(ctx, r, 0, nil)
	}
	var held []string
	for _, id := range r.Instances {
		rec, err := st.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return 0, fmt.Errorf("recounting %s: %w", r.ID, err)
		case rec.State.Live() && (r.Run == "" || rec.RunID == r.Run):
			held = append(held, id)
		}
	}
	if len(held) >= r.Amount {
		return 0, nil
	}
	if held == nil {
		held = []string{}
	}
	return r.Amount - len(held), l.adjust(ctx, r, len(held), held)
}

// RepairOptions say what Repair may adopt.
type RepairOptions struct {
	// Live are the live instance records (refresh's listing). With AdoptAfter, every live record
	// older than AdoptAfter that no instance reservation names is adopted: counted on its
	// deployment and class counters (instances created before the caps were set, or whose
	// reservation expired before it was settled). Zero AdoptAfter adopts nothing.
	Live       []store.Instance
	AdoptAfter time.Duration
	// Adopt, when set, says which runner classes' instances are adopted (Caps.Adopt); nil: all.
	Adopt func(class string) bool
}

// Report is what one Repair did.
type Report struct {
	Reservations int
	Freed        int // units given back by recounts and expired pending reservations
	Adopted      int // live instances counted that no reservation paid for
	Reset        int // counters set back to the sum of their reservations
	Errors       int
}

// Repair recounts every reservation, adopts unpaid live instances, then resets any counter that
// drifted from the sum of its reservations. One reservation that fails is counted and skipped.
func (l *Ledger) Repair(ctx context.Context, st Instances, o RepairOptions) (Report, error) {
	var rep Report
	all, err := l.Reservations(ctx)
	if err != nil {
		return rep, err
	}
	rep.Reservations = len(all)
	var errs []error
	paid := map[string]bool{}
	for _, r := range all {
		freed, err := l.recount(ctx, st, r)
		if err != nil && !errors.Is(err, errChanged) {
			rep.Errors++
			errs = append(errs, err)
		}
		rep.Freed += freed
		if r.Run == "" {
			for _, id := range r.Instances {
				paid[id] = true
			}
		}
	}
	if o.AdoptAfter > 0 {
		now := l.o.Now()
		for _, rec := range o.Live {
			if paid[rec.ID] || now.Sub(rec.CreatedAt) < o.AdoptAfter || !rec.State.Live() || (o.Adopt != nil && !o.Adopt(rec.RunnerClass)) {
				continue
			}
			err := l.adopt(ctx, rec)
			if err != nil {
				rep.Errors++
				errs = append(errs, err)
				continue
			}
			rep.Adopted++
		}
	}
	reset, err := l.resetDrift(ctx)
	rep.Reset = reset
	if err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

func (l *Ledger) adopt(ctx context.Context, rec store.Instance) error {
	var limits []Limit
	for _, c := range InstanceCounters(rec.RunnerClass) {
		limits = append(limits, Limit{Counter: c})
	}
	return l.Reserve(ctx, Reservation{ID: "adopt#" + rec.ID, Amount: 1, Instances: []string{rec.ID}, Settled: true}, limits)
}

// resetDrift sets every counter whose value differs from the sum of its reservations to that sum.
// The counters are read before the reservations and each write is conditional on the value read:
// a reservation or recount that lands in between changes the counter, and the write loses (the
// next Repair looks again).
func (l *Ledger) resetDrift(ctx context.Context) (int, error) {
	counters, err := l.Counters(ctx)
	if err != nil {
		return 0, err
	}
	all, err := l.Reservations(ctx)
	if err != nil {
		return 0, err
	}
	sums := map[string]int{}
	for _, r := range all {
		for _, c := range r.Counters {
			sums[c] += r.Amount
		}
	}
	reset := 0
	for _, c := range counters {
		name, held := c.Name, c.Held
		if sums[name] == held {
			continue
		}
		_, err := l.db.UpdateItem(writeResetCounter.Context(ctx), &dynamodb.UpdateItemInput{
			TableName: &l.table, Key: key(pkCounter, name),
			UpdateExpression:    aws.String("SET held = :sum, updated_at = :now"),
			ConditionExpression: aws.String("held = :seen"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":sum": num(int64(sums[name])), ":seen": num(int64(held)), ":now": num(l.o.Now().UnixMilli()),
			},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			continue
		}
		if err != nil {
			return reset, fmt.Errorf("resetting counter %s: %w", name, err)
		}
		reset++
	}
	return reset, nil
}
