// Autoscaled pools: a pool with an autoscale block keeps what the policy (internal/autoscale)
// decides instead of its schedule window's counts, which become the decision's maxima. Each pass
// the leader counts the jobs that arrived for the pool since the previous pass (its records newly
// claimed or created for a job: hot, stopped or cold), adds them to the minute being counted,
// records finished minutes in the pool's demand profile, decides, and writes the pool's autoscale
// item once (conditional on its version): profile, minute, targets and hysteresis, and the
// decision's reasons. A new leader continues from the item.
package poolsize

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// AutoscaleStore keeps the pools' autoscale items; *store.Store satisfies it.
type AutoscaleStore interface {
	GetAutoscale(ctx context.Context, pool string) (store.AutoscaleState, error)
	PutAutoscale(ctx context.Context, st store.AutoscaleState, expectVersion int64) (store.AutoscaleState, error)
}

// AutoscaleOptions are what the policy needs beyond a pool's block. Zero values take the defaults
// (those of `runnerpool simulate`).
type AutoscaleOptions struct {
	Store AutoscaleStore
	// Starts are the start times of a kind the pool has too few measurements of
	// (autoscale_inputs.go).
	Starts autoscale.Starts
	// Prices are the prices the price book does not give: the stopped price always, the hot one
	// when Price knows none of the pool's instance types.
	Prices autoscale.Prices
	// Price, when set, prices the pool's instance types (the price book: price file first).
	Price    PriceFunc
	Interval time.Duration // time between passes (default 30 s; the cooldown counts the time between decisions)
	Cooldown time.Duration // how long lower targets must hold before the pool shrinks (default 10 min)
	// Now, when set, is the policy's clock: the slot of the week, the minutes demand is counted in,
	// the decision's time and the cooldown follow it instead of the pass's clock (the bench replays
	// an hour of a trace at a scaled speed through it). Default: the pass's clock.
	Now func() time.Time
}

// Defaults of AutoscaleOptions.
var (
	DefaultStarts   = autoscale.Starts{Hot: 2 * time.Second, Stopped: 14 * time.Second, Cold: 27 * time.Second}
	DefaultPrices   = autoscale.Prices{HotPerHour: 0.085, StoppedPerHour: 0.0033}
	DefaultCooldown = 10 * time.Minute
)

// GoalPercentile is the percentile an autoscaled pool's queue-time goal is for.
const GoalPercentile = 0.95

// maxGapMinutes is the longest run of minutes without a pass recorded as minutes without jobs; a
// longer gap (no leader) is not recorded at all rather than as a quiet spell nobody saw.
const maxGapMinutes = 15

func (o AutoscaleOptions) withDefaults() AutoscaleOptions {
	if o.Starts == (autoscale.Starts{}) {
		o.Starts = DefaultStarts
	}
	if o.Prices == (autoscale.Prices{}) {
		o.Prices = DefaultPrices
	}
	if o.Interval <= 0 {
		o.Interval = 30 * time.Second
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	return o
}

// AutoscaleReport is a pass's decision for an autoscaled pool.
type AutoscaleReport struct {
	store.AutoscaleDecision
	// Err is why the decision could not be read or kept (the pool then keeps the window's counts).
	Err error
}

// arrivals counts the pool's records held by a job (instance and run) not seen at the previous
// pass, and remembers them. The first pass of this converger only learns them (a new leader does
// not count the jobs its predecessor counted).
func (c *Converger) arrivals(pool string, recs []store.Instance) (n int) {
	now := map[string]bool{}
	for _, in := range recs {
		if in.RunID != "" && in.State != store.StateTerminating {
			now[in.ID+" "+in.RunID] = true // a runner per job: a run holding three instances is three jobs
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]map[string]bool{}
	}
	prev, ok := c.seen[pool]
	c.seen[pool] = now
	if !ok {
		return 0
	}
	for id := range now {
		if !prev[id] {
			n++
		}
	}
	return n
}

// autoscale replaces spec's window counts by the policy's targets.
func (c *Converger) autoscale(ctx context.Context, spec *warmpool.PoolSpec, recs []store.Instance, cat categories, now time.Time) *AutoscaleReport {
	o := c.opts.Autoscale.withDefaults()
	passNow := now // the ledger's clock, which the runs' jobs are dated by
	if o.Now != nil {
		now = o.Now()
	}
	a := spec.Autoscale
	rep := &AutoscaleReport{}
	rep.WindowHot, rep.WindowStopped = spec.Hot, spec.Stopped
	arrived := c.arrivals(spec.Name, recs)
	st, err := o.Store.GetAutoscale(ctx, spec.Name)
	version := st.Version
	switch {
	case errors.Is(err, store.ErrNotFound):
		st, version = store.AutoscaleState{Pool: spec.Name}, 0
	case err != nil:
		rep.Err = fmt.Errorf("reading the autoscale state: %w", err)
		return rep
	}
	prof := &autoscale.Profile{}
	if st.Profile != "" {
		if prof, err = autoscale.DecodeProfile(st.Profile); err != nil {
			c.log.Warn("autoscale: recorded demand unreadable, starting afresh", "pool", spec.Name, "err", err)
			prof = &autoscale.Profile{}
		}
	}
	if n := ageProfile(&st, prof, now); n > 0 {
		c.log.Info("autoscale: recorded demand halved", "pool", spec.Name, "times", n, "half_life", ProfileHalfLife)
	}
	recordMinutes(&st, prof, now, a.Loc)
	c.takeStarts(spec.Name, &st)
	queueP95, queueJobs := c.takeQueueTimes(spec.Name, &st, now)
	startTimes, startsFrom := starts(&st, o.Starts, c.log)
	prices, pricesFrom := o.prices(ctx, *spec, recs, c.log)
	live := c.live(ctx, spec.Name, cat, now)
	waiting, inFlight := live.waiting, live.inFlight
	runs := c.followRuns(spec.Name, &st, live, passNow, startTimes.Cold+o.Interval)
	// Jobs a fan-out's pre-warm serves are left out of the recorded demand, or the week plan
	// would hold them hot all week as well (autoscale.Fanouts.Covers).
	st.Count += max(0, arrived-runs.covered)
	slot := autoscale.SlotOf(now, a.Loc)
	local := now
	if a.Loc != nil {
		local = now.In(a.Loc)
	}
	into := time.Duration(local.Minute()%15)*time.Minute + time.Duration(local.Second())*time.Second
	// The plan is chosen as `runnerpool simulate` chooses it (autoscale.ChoosePlan, the goal's
	// p95 less the margin), judged by the recorded demand: the reconciler keeps no jobs to replay.
	plan, err := autoscale.ChoosePlan(prof, 1-GoalPercentile, autoscale.Target(GoalPercentile, 0, false), autoscale.ModelJudge(prof))
	if err != nil {
		plan.Chosen.Plan = autoscale.PlanWeek(prof, 0)
	}
	d := autoscale.Decide(autoscale.Input{
		Slot: slot, Into: into, Plan: plan.Chosen.Plan, Profile: prof, Fanouts: runs.fanouts,
		Live:   autoscale.Live{Arrived: arrived, Waiting: waiting, InFlight: inFlight, Runs: runs.runs},
		Prev:   autoscale.State{Hot: st.Hot, Stopped: st.Stopped, LowFor: st.LowFor},
		Starts: startTimes, Prices: prices, Goal: a.Goal, GoalP99: a.GoalP99, Budget: a.Budget, Interval: sincePrev(st, now, o.Interval), Cooldown: o.Cooldown,
		Bounds: autoscale.Bounds{MinHot: a.MinHot, MaxHot: spec.Hot, MinStopped: a.MinStopped, MaxStopped: spec.Stopped},
	})
	// The window's counts are maxima even when 0 (which Bounds reads as no limit).
	hot, stopped := min(d.Hot, spec.Hot), min(d.Stopped, spec.Stopped)
	rep.Forecast, rep.Level, rep.Reasons, rep.Conflict = d.Forecast, d.Level, d.Reasons, d.Conflict
	rep.Arrived, rep.Waiting, rep.InFlight = arrived, waiting, inFlight
	rep.Queued, rep.ScaleSetWaiting = live.queued, live.service
	rep.GoalMS, rep.QueueP95MS, rep.QueueJobs = a.Goal.Milliseconds(), queueP95.Milliseconds(), queueJobs
	rep.Runs, rep.Fanouts, rep.Prewarm = len(runs.runs), len(runs.fanouts), d.Prewarm
	rep.HotStartMS, rep.StoppedStartMS, rep.ColdStartMS = startTimes.Hot.Milliseconds(), startTimes.Stopped.Milliseconds(), startTimes.Cold.Milliseconds()
	rep.StartsFrom, rep.HotPerHour, rep.StoppedPerHour, rep.PricesFrom = startsFrom, prices.HotPerHour, prices.StoppedPerHour, pricesFrom
	st.Profile, st.Hot, st.Stopped, st.LowFor, st.DecidedAt = prof.Encode(), hot, stopped, d.Next.LowFor, now
	st.Decision = rep.AutoscaleDecision
	if _, err := o.Store.PutAutoscale(ctx, st, version); err != nil {
		rep.Err = fmt.Errorf("keeping the autoscale state: %w", err)
		return rep
	}
	spec.Hot, spec.Stopped = hot, stopped
	return rep
}

// sincePrev is the time since the previous decision, which the cooldown counts, whatever the
// passes' pace; def (the configured pace) for the first decision, a clock gone back or a gap of
// more than maxGapMinutes (no leader).
func sincePrev(st store.AutoscaleState, now time.Time, def time.Duration) time.Duration {
	if d := now.Sub(st.DecidedAt); !st.DecidedAt.IsZero() && d > 0 && d <= maxGapMinutes*time.Minute {
		return d
	}
	return def
}

// recordMinutes closes the minutes st counted before now's: the counted one with its count, the
// ones without a pass as minutes without jobs (when at most maxGapMinutes).
func recordMinutes(st *store.AutoscaleState, prof *autoscale.Profile, now time.Time, loc *time.Location) {
	minute := now.Truncate(time.Minute)
	if st.Minute.IsZero() || st.Minute.After(minute) {
		st.Minute, st.Count = minute, 0
		return
	}
	if !minute.After(st.Minute) {
		return
	}
	prof.Record(autoscale.SlotOf(st.Minute, loc), st.Count)
	if gap := int(minute.Sub(st.Minute)/time.Minute) - 1; gap <= maxGapMinutes {
		for m := st.Minute.Add(time.Minute); m.Before(minute); m = m.Add(time.Minute) {
			prof.Record(autoscale.SlotOf(m, loc), 0)
		}
	}
	st.Minute, st.Count = minute, 0
}
