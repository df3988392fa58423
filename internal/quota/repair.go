// Giving back what is no longer held, from the instance records: Recount (one reservation, e.g.
// after a release) and Repair (all of them, every refresh).
package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"golang.org/x/sync/errgroup"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Instances is the part of the instance store a recount reads; *store.Store satisfies it.
type Instances interface {
	Get(ctx context.Context, id string) (store.Instance, error)
}

// runInstances is what a store may also offer: the records of one run (store.Store.ByRun). Without
// it, and without a listing, a pending run reservation past its deadline is settled on nothing.
type runInstances interface {
	ByRun(ctx context.Context, runID string) ([]store.Instance, error)
}

// InstanceCounters are the counters an instance of a runner class counts on.
func InstanceCounters(class string) []string { return []string{DeploymentCounter, ClassCounter(class)} }

// readConcurrency bounds the consistent reads of one recount, and the reservations Repair recounts
// at once.
const readConcurrency = 16

// Recount gives back the units of a settled reservation whose instances no longer hold them
// (terminated, gone, or no longer serving the reservation's run), and settles a pending one past
// its deadline on what it pays for (recount). It reads every instance record strongly consistent,
// so a record just written is never missed. It returns the units given back.
func (l *Ledger) Recount(ctx context.Context, st Instances, id string) (int, error) {
	for range l.o.Attempts {
		r, err := l.Reservation(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		freed, err := l.recount(ctx, st, r, listing{})
		if !errors.Is(err, errChanged) {
			return freed, err
		}
	}
	return 0, fmt.Errorf("recounting %s: %w", id, errChanged)
}

// listing is a recent listing of the live records (refresh's brief listing), trusted to keep a
// unit: an instance it shows holding is not read again. What it does not show holding (or shows
// as changed since: changed) is confirmed with a consistent read, so a record written after the
// listing is never missed. The zero listing confirms everything.
type listing struct {
	live    map[string]store.Instance // nil: no listing
	changed map[string]bool
}

// holds reports whether rec keeps a unit of r.
func holds(rec store.Instance, r Reservation) bool {
	return rec.State.Live() && (r.Run == "" || rec.RunID == r.Run)
}

// recount brings one reservation in line with the records. A pending one is left alone until its
// deadline; past it, its owner crashed or never settled, and it is settled on what it pays for now:
// a run's reservation on the run's live records (a repository's runners run on: giving the units
// back whole let the repository hold twice its limit while they do), an instance cap's on nothing
// (its instances are adopted, Repair). A settled one keeps a unit per instance that still holds it.
func (l *Ledger) recount(ctx context.Context, st Instances, r Reservation, ls listing) (int, error) {
	if !r.Settled {
		if l.o.Now().Before(r.Deadline) {
			return 0, nil
		}
		held, err := l.runRecords(ctx, st, r, ls)
		if err != nil {
			return 0, fmt.Errorf("settling %s past its deadline: %w", r.ID, err)
		}
		held = held[:min(len(held), r.Amount)]
		if len(held) == 0 {
			return r.Amount, l.adjust(ctx, r, 0, nil)
		}
		return r.Amount - len(held), l.adjust(ctx, r, len(held), held)
	}
	held, err := l.holding(ctx, st, r, ls)
	if err != nil {
		return 0, fmt.Errorf("recounting %s: %w", r.ID, err)
	}
	if len(held) >= r.Amount {
		return 0, nil
	}
	if held == nil {
		held = []string{}
	}
	return r.Amount - len(held), l.adjust(ctx, r, len(held), held)
}

// runRecords lists the live records serving r's run (none for a reservation of no run), from the
// listing, else from the store's run index.
func (l *Ledger) runRecords(ctx context.Context, st Instances, r Reservation, ls listing) ([]string, error) {
	if r.Run == "" {
		return nil, nil
	}
	var held []string
	if ls.live != nil {
		for id, rec := range ls.live {
			if holds(rec, r) && !ls.changed[id] {
				held = append(held, id)
			}
		}
		slices.Sort(held)
		return held, nil
	}
	byRun, ok := st.(runInstances)
	if !ok {
		return nil, nil
	}
	recs, err := byRun.ByRun(ctx, r.Run)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if holds(rec, r) {
			held = append(held, rec.ID)
		}
	}
	slices.Sort(held)
	return held, nil
}

// holding lists the instances of a settled reservation that still hold their unit: those the
// listing shows holding, and, of the rest, those a consistent read (in parallel) shows holding.
func (l *Ledger) holding(ctx context.Context, st Instances, r Reservation, ls listing) ([]string, error) {
	var held, unsure []string
	for _, id := range r.Instances {
		if rec, ok := ls.live[id]; ok && !ls.changed[id] && holds(rec, r) {
			held = append(held, id)
		} else {
			unsure = append(unsure, id)
		}
	}
	if len(held) >= r.Amount || len(unsure) == 0 {
		return held, nil
	}
	confirmed := make([]bool, len(unsure))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readConcurrency)
	for i, id := range unsure {
		g.Go(func() error {
			rec, err := st.Get(gctx, id)
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return err
			default:
				confirmed[i] = holds(rec, r)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i, id := range unsure {
		if confirmed[i] {
			held = append(held, id)
		}
	}
	return held, nil
}

// RepairOptions say what Repair reads and may adopt.
type RepairOptions struct {
	// Live are the live instance records (refresh's brief listing is enough: IDs, states, runs,
	// classes, creation times). When set, recounts trust it to keep a unit and read only what it
	// does not show holding; and with AdoptAfter, every live record that no reservation pays for,
	// and that no pending instance reservation may still pay for (or older than AdoptAfter), is
	// adopted: counted on its deployment and class counters (instances created before the caps
	// were set, or whose reservation passed its deadline before it was settled). Zero AdoptAfter
	// adopts nothing. Nil Live: every instance a reservation names is read.
	Live       []store.Instance
	AdoptAfter time.Duration
	// Changed are instances the listing shows live that changed since (refresh terminated them
	// in the same pass): read, not trusted.
	Changed []string
	// Adopt, when set, says which runner classes' instances are adopted (Caps.Adopt); nil: all.
	Adopt func(class string) bool
}

// Report is what one Repair did.
type Report struct {
	Reservations int
	Freed        int // units given back by recounts and pending reservations past their deadline
	Adopted      int // live instances counted that no reservation paid for
	Reset        int // counters set back to the sum of their reservations
	Errors       int
}

// Repair recounts every reservation (several at once), adopts unpaid live instances, then resets
// any counter that drifted from the sum of its reservations. One reservation that fails is counted
// and skipped.
func (l *Ledger) Repair(ctx context.Context, st Instances, o RepairOptions) (Report, error) {
	var rep Report
	all, err := l.Reservations(ctx)
	if err != nil {
		return rep, err
	}
	rep.Reservations = len(all)
	ls := listing{changed: map[string]bool{}}
	if o.Live != nil {
		ls.live = make(map[string]store.Instance, len(o.Live))
		for _, rec := range o.Live {
			ls.live[rec.ID] = rec
		}
	}
	for _, id := range o.Changed {
		ls.changed[id] = true
	}
	var mu sync.Mutex
	var errs []error
	var g errgroup.Group
	g.SetLimit(readConcurrency)
	for _, r := range all {
		g.Go(func() error {
			freed, err := l.recount(ctx, st, r, ls)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !errors.Is(err, errChanged) {
				rep.Errors++
				errs = append(errs, err)
			}
			rep.Freed += freed
			return nil
		})
	}
	_ = g.Wait()
	if o.AdoptAfter > 0 {
		adopted, aerrs := l.adoptUnpaid(ctx, all, o)
		rep.Adopted, rep.Errors, errs = adopted, rep.Errors+len(aerrs), append(errs, aerrs...)
	}
	reset, err := l.resetDrift(ctx)
	rep.Reset = reset
	if err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// adoptUnpaid counts the live instances no instance reservation pays for. One that a pending
// instance reservation (not past its deadline) may still pay for (its fleet is being settled) is
// left to it until AdoptAfter; once that reservation is settled or past its deadline (the same
// DefaultPendingDeadline by default), the instance is adopted in the same pass: never uncounted
// in between.
func (l *Ledger) adoptUnpaid(ctx context.Context, all []Reservation, o RepairOptions) (int, []error) {
	now := l.o.Now()
	paid := map[string]bool{}
	pending := false
	for _, r := range all {
		switch {
		case r.Run != "":
		case r.Settled:
			for _, id := range r.Instances {
				paid[id] = true
			}
		case now.Before(r.Deadline):
			pending = true
		}
	}
	adopted := 0
	var errs []error
	for _, rec := range o.Live {
		young := now.Sub(rec.CreatedAt) < o.AdoptAfter
		if paid[rec.ID] || (young && pending) || !rec.State.Live() || (o.Adopt != nil && !o.Adopt(rec.RunnerClass)) {
			continue
		}
		if err := l.adopt(ctx, rec); err != nil {
			errs = append(errs, err)
			continue
		}
		adopted++
	}
	return adopted, errs
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
