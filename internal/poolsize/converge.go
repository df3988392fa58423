// The convergence loop (seed 002, "Rebalance Algorithm"): one Pass per 30 s under the leader lease.
// Per pool, in this order: categorize the pool's records; terminate the errored ones, the dangling
// ones (hot past the dangling limit, stopped past MaxStoppedAge) and the outdated ones (spec hash
// changed: terminated at once to free quota, so a rollout briefly shrinks the pool); turn warmed-up
// instances into hot (ready) or stopped ones; create what is missing through the fleet code; and
// terminate the excess. Records claimed by a run or a job (claimed, running, created) are never
// counted or terminated. A pool that fails is reported and skipped; it never blocks the others.
//
// A pool the configuration no longer has (its item deleted) is converged to zero while it has a
// record the pass looks after (tended: a warm instance or a pool job's), found by a search of the
// deployment's records (removedPools). A pool whose item is present but unusable (PoolSpec.Err) is
// held: its warm instances are left as they are, since a bad write must not end a fleet, and only
// its pool jobs are looked after (hold). Both hand their running pool-job records to the backstop,
// so a job whose completion was lost ends however its pool was changed.
package poolsize

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launch"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"golang.org/x/sync/errgroup"
)

// Requeuer puts a served pool job back in the job queue when its instance failed, and reports
// whether it did; *pooljob.JobQueue satisfies it.
type Requeuer interface {
	Requeue(ctx context.Context, jobID, instanceID, reason string) (bool, error)
}

// Backstop infers the completions of pool jobs that never came, from the running pool-job records
// a pass read (the records of every pool it converged); *pooljob.Backstop satisfies it. It returns
// the instances whose job's completion it handed on.
type Backstop interface {
	Check(ctx context.Context, recs []store.Instance) ([]string, error)
}

// Options tune a Converger. Zero values take the defaults.
type Options struct {
	// DeploymentID is tagged on every instance launched (required): destructive sweeps only touch
	// instances carrying it.
	DeploymentID string
	// WarmupTimeout bounds the warming state: an instance without UD_OK by then is errored
	// (default 15 min).
	WarmupTimeout time.Duration
	// DanglingAfter is the default dangling limit of hot instances (default 10 min); a pool's
	// PoolSpec.DanglingAfter overrides it.
	DanglingAfter time.Duration
	// MaxStoppedAge bounds how long an instance stays stopped before it is replaced by a fresh one
	// (latest image, fresh EBS warm-up; default 24 h).
	MaxStoppedAge time.Duration
	// CreateBatch is the most instances one CreateFleet launches (default 50, at most 100).
	CreateBatch int
	// Concurrency is how many pools converge at once (default 4).
	Concurrency int
	// DiscoverEvery is the pace of the search for pools removed from the configuration (the pool of
	// every warm or pool-job record: six brief listings of the deployment by state). It also runs at
	// a converger's first pass and whenever the configured pools change (default 10 min).
	DiscoverEvery time.Duration
	// Jobs, when set, lets a pass put a pool job back in the job queue when the instance that
	// served it failed to register (UD_REG_FAILED, or no registration before its deadline).
	Jobs Requeuer
	// Capacity, when set, reserves every fleet's instances against the instance caps before it is
	// launched (*quota.Caps): convergence never creates past a cap, and says so in the pool's
	// report (PoolReport.Capped).
	Capacity warmpool.Capacity
	// OnCapped, when set, is called once per pool a cap held back (the refusing limit's kind).
	OnCapped func(limit string)
	// Backstop, when set, runs after the pools of every pass over the running pool-job records the
	// pass read: a pool job whose completion never came is ended (pooljob/backstop.go).
	Backstop Backstop
	// Autoscale, when its Store is set, sizes the pools with an autoscale block (autoscale.go).
	Autoscale AutoscaleOptions
	// OnAutoscale, when set, is called with each autoscaled pool's report after its decision.
	OnAutoscale func(pr PoolReport)
	Now         func() time.Time
	// Logger receives a line per pool and pass; default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.WarmupTimeout, warmpool.DefaultWarmupTimeout)
	def(&o.DanglingAfter, warmpool.DefaultDanglingAfter)
	def(&o.MaxStoppedAge, warmpool.DefaultMaxStoppedAge)
	def(&o.DiscoverEvery, warmpool.DefaultDiscoverEvery)
	if o.CreateBatch <= 0 {
		o.CreateBatch = 50
	}
	o.CreateBatch = min(o.CreateBatch, fleet.MaxCount)
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Converger runs convergence passes. One pass at a time per deployment (the leader's); a pass is
// idempotent, and every change is a conditional write, so an overlapping pass of a replica that
// just lost the lease cannot hand one instance to two owners.
type Converger struct {
	st      warmpool.Store
	api     warmpool.EC2API
	launch  *launch.Launcher
	targets warmpool.Targets
	opts    Options
	log     *slog.Logger
	term    *warmpool.Terminator

	mu   sync.Mutex
	last Report
	disc discovery
	seen map[string]map[string]bool // per autoscaled pool, the records held by a job at the last pass
	// starts are the start times (ms) measured per autoscaled pool and kind since its last write.
	starts map[string]map[string][]int64
	// queued are the queue times measured per autoscaled pool since its last write.
	queued map[string][]time.Duration
}

// discovery is what the last search for removed pools found.
type discovery struct {
	at      time.Time       // when it ran (the injected clock); zero: never
	names   []string        // the configured pools then, sorted
	removed map[string]bool // pools with warm records but no spec, until a pass finds them empty
}

// NewConverger returns a Converger.
func NewConverger(st warmpool.Store, api warmpool.EC2API, fl warmpool.Launcher, targets warmpool.Targets, opts Options) (*Converger, error) {
	if st == nil || api == nil || fl == nil || targets == nil {
		return nil, errors.New("warm pool converger: store, EC2, fleet and targets are required")
	}
	if opts.DeploymentID == "" {
		return nil, errors.New("warm pool converger: deployment id is required")
	}
	opts = opts.withDefaults()
	return &Converger{
		st: st, api: api, targets: targets, opts: opts, log: opts.Logger,
		launch: launch.New(launch.Config{Fleet: fl, Store: st, EC2: api, Capacity: opts.Capacity, Timeout: 2 * time.Minute, Logger: opts.Logger}),
		term:   warmpool.NewTerminator(st, api, opts.Logger),
	}, nil
}

// Report is what one pass did.
type Report struct {
	At    time.Time
	Pools []PoolReport // by pool name
	Took  time.Duration
	// Inferred are the instances whose pool job's completion the backstop (Options.Backstop)
	// handed on, for want of the completion itself.
	Inferred []string
	// Err is a failure outside the pools: finding pools removed from the configuration, or the
	// backstop's check.
	Err error
}

// Failed lists the pools whose convergence failed (in part).
func (r Report) Failed() []PoolReport {
	var out []PoolReport
	for _, p := range r.Pools {
		if p.Err != nil {
			out = append(out, p)
		}
	}
	return out
}

// Pool returns the report of one pool.
func (r Report) Pool(name string) (PoolReport, bool) {
	for _, p := range r.Pools {
		if p.Pool == name {
			return p, true
		}
	}
	return PoolReport{}, false
}

// PoolReport is what a pass did to one pool.
type PoolReport struct {
	Pool, Schedule           string
	TargetHot, TargetStopped int
	// Removed: the pool is no longer configured; its instances are scaled to zero.
	Removed bool
	// Skipped says why the pool's warm instances were left alone (its configuration cannot be
	// used); its pool jobs were still looked after (Promoted, Requeued).
	Skipped string

	// What the pool holds after the pass (instances launched or marked by it included).
	Warming, Ready, Stopped int
	// Detached counts the pool's instances that belong to a run or a job (left alone).
	Detached int

	// Instances terminated, by reason.
	Errored, Dangling, Outdated, Excess []string
	// Readied became hot; StoppedNow were stopped; Created were launched.
	Readied, StoppedNow, Created []string
	// Promoted: pool-job instances that registered, moved to running. Requeued: jobs put back in
	// the job queue because their instance failed.
	Promoted, Requeued []string

	// Capped is how many instances the pool lacks that an instance cap kept convergence from
	// creating, and CappedBy the limit (quota.LimitDeployment or quota.LimitRunnerClass).
	Capped   int
	CappedBy string

	// Autoscale is the policy's decision for a pool with an autoscale block (TargetHot and
	// TargetStopped are then its targets); nil otherwise.
	Autoscale *AutoscaleReport

	TerminateCalls, StopCalls, CreateCalls int
	Err                                    error
	Took                                   time.Duration

	tended  int              // records the pass read that it looks after (tended)
	records []store.Instance // the records the pass read, for the backstop
}

// Converge runs one pass: the reconciler's convergence cron job (every 30 s, leader only). Its
// error joins everything that failed: the targets, the search for removed pools, and each pool
// that failed (named); the pools that did not fail were converged all the same.
func (c *Converger) Converge(ctx context.Context) error {
	rep, err := c.Pass(ctx)
	if err != nil {
		return err
	}
	errs := []error{rep.Err}
	for _, p := range rep.Failed() {
		errs = append(errs, p.Err)
	}
	return errors.Join(errs...)
}

// Last returns the report of the last pass (for status and metrics); ok is false before the first.
func (c *Converger) Last() (_ Report, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, !c.last.At.IsZero()
}

// Pass converges every pool once. The error is only for a failure to know the targets; pools that
// fail are in the report (Report.Failed) and never stop the others.
func (c *Converger) Pass(ctx context.Context) (Report, error) {
	began := time.Now()
	now := c.opts.Now()
	rep := Report{At: now}
	specs, err := c.targets(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("warm pool targets: %w", err)
	}
	byName := map[string]warmpool.PoolSpec{}
	for _, s := range specs {
		byName[s.Name] = s
	}
	// Pools removed from the configuration still have records: find them so they are scaled in.
	removed, derr := c.removedPools(ctx, byName, now)
	if derr != nil {
		rep.Err = derr
		c.log.Warn("warm pools: removed pools not looked for", "err", derr)
	}
	for _, name := range removed {
		byName[name] = warmpool.PoolSpec{Name: name}
	}
	names := slices.Sorted(maps.Keys(byName))
	rep.Pools = make([]PoolReport, len(names))
	// One pool that fails is reported in its PoolReport and never stops the others.
	var g errgroup.Group
	g.SetLimit(c.opts.Concurrency)
	for i, name := range names {
		g.Go(func() error {
			spec := byName[name]
			pr := c.converge(ctx, spec, slices.Contains(removed, name), now)
			rep.Pools[i] = pr
			c.logPool(pr)
			return nil
		})
	}
	_ = g.Wait()
	c.backstop(ctx, &rep)
	rep.Took = time.Since(began)
	c.mu.Lock()
	c.last = rep
	for _, pr := range rep.Pools {
		if pr.Removed && pr.Err == nil && pr.tended == 0 {
			delete(c.disc.removed, pr.Pool) // scaled in, its jobs ended: nothing left to look after
		}
	}
	c.mu.Unlock()
	return rep, nil
}

// backstop hands the records the pass read to the backstop (Options.Backstop): no second read.
func (c *Converger) backstop(ctx context.Context, rep *Report) {
	if c.opts.Backstop == nil {
		return
	}
	var recs []store.Instance
	for i := range rep.Pools {
		recs = append(recs, rep.Pools[i].records...)
		rep.Pools[i].records = nil
	}
	ended, err := c.opts.Backstop.Check(ctx, recs)
	rep.Inferred = ended
	if err != nil {
		rep.Err = errors.Join(rep.Err, fmt.Errorf("pool jobs whose completion never came: %w", err))
		c.log.Warn("warm pools: looking for pool jobs whose completion never came", "err", err)
	}
}

func (c *Converger) logPool(pr PoolReport) {
	attrs := []any{"pool", pr.Pool, "schedule", pr.Schedule, "target_hot", pr.TargetHot, "target_stopped", pr.TargetStopped,
		"warming", pr.Warming, "ready", pr.Ready, "stopped", pr.Stopped, "detached", pr.Detached, "took", pr.Took}
	changed := map[string][]string{"errored": pr.Errored, "dangling": pr.Dangling, "outdated": pr.Outdated, "excess": pr.Excess,
		"readied": pr.Readied, "stopped_now": pr.StoppedNow, "created": pr.Created, "promoted": pr.Promoted, "requeued": pr.Requeued}
	for _, k := range slices.Sorted(maps.Keys(changed)) {
		if n := len(changed[k]); n > 0 {
			attrs = append(attrs, k, n)
		}
	}
	if pr.Capped > 0 {
		attrs = append(attrs, "capped", pr.Capped, "capped_by", pr.CappedBy)
	}
	if a := pr.Autoscale; a != nil && a.Err == nil {
		attrs = append(attrs, "autoscale_forecast", a.Forecast, "window_hot", a.WindowHot, "window_stopped", a.WindowStopped, "reasons", a.Reasons)
		if a.Conflict != "" {
			attrs = append(attrs, "autoscale_conflict", a.Conflict)
		}
	}
	switch {
	case pr.Err != nil:
		c.log.Error("warm pool convergence failed", append(attrs, "err", pr.Err)...)
	case pr.Capped > 0:
		c.log.Warn("warm pool held below its target by an instance cap", attrs...)
	case pr.Skipped != "":
		c.log.Warn("warm pool held: its configuration cannot be used", "pool", pr.Pool, "reason", pr.Skipped,
			"warming", pr.Warming, "ready", pr.Ready, "stopped", pr.Stopped, "detached", pr.Detached,
			"promoted", len(pr.Promoted), "requeued", len(pr.Requeued))
	default:
		c.log.Debug("warm pool converged", attrs...)
	}
}

// removedPools returns the pools removed from the configuration that still have records a pass
// looks after (tended).
// Finding them reads every warm record of the deployment, so a pass does it only when it may have
// changed: at the converger's first pass, when the configured pools change (this replica's
// configuration removed one), and every DiscoverEvery (another replica's older configuration
// created instances of a pool this one no longer has). In between, each pass converges the pools
// the last search found until a pass finds none it looks after; a steady pass reads each pool's
// records once.
func (c *Converger) removedPools(ctx context.Context, known map[string]warmpool.PoolSpec, now time.Time) ([]string, error) {
	names := slices.Sorted(maps.Keys(known))
	c.mu.Lock()
	due := c.disc.at.IsZero() || !slices.Equal(names, c.disc.names) || !now.Before(c.disc.at.Add(c.opts.DiscoverEvery))
	c.mu.Unlock()
	var err error
	if due {
		var found map[string]bool
		if found, err = c.discover(ctx); err == nil {
			c.mu.Lock()
			c.disc = discovery{at: now, names: names, removed: found}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.disc.removed {
		if _, ok := known[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, err
}

// discover returns the pools of every record a pass looks after (tended): warm (warming, ready,
// stopped) or a pool job's (claimed, created, running), the six states listed in parallel, brief.
// The pool-job states matter: a pool removed while its instances all serve jobs has no warm record
// left, and its jobs' instances still need promoting, or ending when their completion is lost.
func (c *Converger) discover(ctx context.Context) (map[string]bool, error) {
	states := []store.State{store.StateWarming, store.StateReady, store.StateStopped, store.StateClaimed, store.StateCreated, store.StateRunning}
	recs := make([][]store.Instance, len(states))
	errs := make([]error, len(states))
	warmpool.Each(len(states), func(i int) {
		recs[i], errs[i] = c.st.ByStateBrief(ctx, states[i], time.Time{})
		if errs[i] != nil {
			errs[i] = fmt.Errorf("listing %s instances: %w", states[i], errs[i])
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	found := map[string]bool{}
	for _, rs := range recs {
		for _, r := range rs {
			if r.Pool != "" && tended(r) {
				found[r.Pool] = true
			}
		}
	}
	return found, nil
}

// tended reports whether a pass looks after a pool's record whatever the pool's configuration
// says: a warm instance (warming, hot, stopped, or terminating after a pass ended it) or a pool
// job's (picked or created for the job, or running it). A removed pool is converged while a pass
// finds one. A run's record (a step-driven run's instance that once was warm: claimed, running or
// idle in the resource pool) is not: the run's release and refresh's deadlines end it.
func tended(in store.Instance) bool {
	switch in.State {
	case store.StateWarming, store.StateReady, store.StateStopped, store.StateTerminating:
		return true
	case store.StateRunning:
		return strings.HasPrefix(in.RunID, warmpool.JobRunPrefix)
	}
	return pendingJob(in)
}

// pendingJob reports a record picked (claimed) or created for a pool job whose agent has not yet
// been seen registered: the pass promotes it, or ends it and re-queues its job (Converger.jobs).
func pendingJob(in store.Instance) bool {
	return (in.State == store.StateClaimed || in.State == store.StateCreated) && strings.HasPrefix(in.RunID, warmpool.JobRunPrefix)
}

// categories sorts a pool's records.
type categories struct {
	errored, dangling, outdated []warmpool.Victim
	warming                     []store.Instance // warming up, no signal yet
	warmed                      []store.Instance // UD_OK: to become hot or stopped
	ready, stopped              []store.Instance
	jobs                        []store.Instance // claimed or created for a pool job, not yet running
	detached                    int
}

// converge runs the steps for one pool: observe (categorize its records, and size it where it
// autoscales), end what must go (errored, dangling, outdated, failed pool jobs), put warmed-up
// instances to use, create what is missing, and end the excess.
func (c *Converger) converge(ctx context.Context, spec warmpool.PoolSpec, removed bool, now time.Time) (pr PoolReport) {
	began := time.Now()
	pr = PoolReport{Pool: spec.Name, Schedule: spec.Schedule, TargetHot: spec.Hot, TargetStopped: spec.Stopped, Removed: removed}
	defer func() { pr.Took = time.Since(began) }()
	if spec.Err == nil && (spec.Hot < 0 || spec.Stopped < 0) {
		pr.Err = fmt.Errorf("pool %s: negative target %d hot, %d stopped", spec.Name, spec.Hot, spec.Stopped)
		return pr
	}
	var errs []error
	defer func() {
		if err := errors.Join(errs...); err != nil {
			pr.Err = fmt.Errorf("pool %s: %w", spec.Name, err)
		}
	}()
	if spec.Err != nil {
		c.hold(ctx, spec, now, &pr, &errs)
		return pr
	}
	cat, ok := c.observe(ctx, &spec, removed, now, &pr, &errs)
	if !ok {
		return pr
	}
	c.endDoomed(ctx, spec, cat, now, &pr, &errs)
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
		return pr
	}
	excessWarmed, failedStops := c.useWarmed(ctx, spec, &cat, now, &pr, &errs)
	keep := c.fill(ctx, spec, removed, &cat, now, &pr, &errs)
	c.endExcess(ctx, &cat, keep, slices.Concat(warmedVictims(excessWarmed), failedStops), &pr, &errs)
	return pr
}

// observe is step 1: the pool's records, categorized, and (for an autoscaled pool) its targets
// decided. Brief records: every step reads only their id, state, run, threshold, spec hash,
// creation time and agent key (the writes return full records).
func (c *Converger) observe(ctx context.Context, spec *warmpool.PoolSpec, removed bool, now time.Time, pr *PoolReport, errs *[]error) (categories, bool) {
	// An autoscaled pool's prices are read from its records; no other step reads them.
	autoscaled := spec.Autoscale != nil && c.opts.Autoscale.Store != nil && !removed
	recs, err := c.st.ByPoolBrief(ctx, spec.Name, autoscaled)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("listing instances: %w", err))
		return categories{}, false
	}
	cat, err := c.categorize(ctx, *spec, recs, now)
	if err != nil {
		*errs = append(*errs, err)
	}
	pr.Detached = cat.detached
	pr.tended = countTended(recs)
	if c.opts.Backstop != nil {
		pr.records = recs
	}
	if autoscaled {
		pr.Autoscale = c.autoscale(ctx, spec, recs, cat, now)
		pr.TargetHot, pr.TargetStopped = spec.Hot, spec.Stopped
		if pr.Autoscale.Err != nil {
			*errs = append(*errs, pr.Autoscale.Err)
		} else if c.opts.OnAutoscale != nil {
			c.opts.OnAutoscale(*pr)
		}
	}
	return cat, true
}

// hold is the pass over a pool whose item is present but unusable (spec.Err: a spec of a newer
// provider, a schedule or runner class that does not resolve, for one pass or many). Its warm
// instances are left exactly as they are: a bad write, or a launch template version EC2 did not
// answer for, must not end a fleet, and the pool is converged again as soon as its configuration
// reads. They are not kept past their own deadlines either: refresh ends each at its threshold (a
// warming one at its warm-up timeout, a hot one at its idle time, a stopped one at MaxStoppedAge),
// as it would any record, so a pool broken for good costs nothing after the longest of those.
// Its pool jobs do not depend on the configuration and are looked after as any pool's: a
// registered one is promoted (with the class's max runtime when the spec still carries it, else
// warmpool.DefaultMaxRuntime), a failed one ended and its job re-queued, and its records go to the
// backstop, so a job whose completion was lost ends before its max runtime.
func (c *Converger) hold(ctx context.Context, spec warmpool.PoolSpec, now time.Time, pr *PoolReport, errs *[]error) {
	pr.Skipped = spec.Err.Error()
	recs, err := c.st.ByPoolBrief(ctx, spec.Name, false)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("listing instances: %w", err))
		return
	}
	var cat categories
	for _, in := range recs {
		switch in.State {
		case store.StateWarming:
			pr.Warming++
		case store.StateReady:
			pr.Ready++
		case store.StateStopped:
			pr.Stopped++
		}
		if in.State != store.StateWarming {
			c.sortRecord(&cat, spec, in, now)
		}
	}
	pr.Detached = cat.detached
	pr.tended = countTended(recs)
	if c.opts.Backstop != nil {
		pr.records = recs
	}
	// Nothing but the failed pool jobs is ended: endDoomed is handed no other category.
	c.endDoomed(ctx, spec, categories{jobs: cat.jobs}, now, pr, errs)
}

func countTended(recs []store.Instance) int {
	n := 0
	for _, in := range recs {
		if tended(in) {
			n++
		}
	}
	return n
}

// endDoomed is steps 2-4 with the pool jobs: what registered for a job is promoted, a job's
// instance that failed is recovered; errored, dangling and outdated instances and the failed
// jobs' are terminated, in that order, in shared batches.
func (c *Converger) endDoomed(ctx context.Context, spec warmpool.PoolSpec, cat categories, now time.Time, pr *PoolReport, errs *[]error) {
	// Pool jobs are not part of the pool's capacity.
	failedJobs := c.jobs(ctx, spec, cat.jobs, now, pr, errs)
	doomed := slices.Concat(cat.errored, cat.dangling, cat.outdated, failedJobs)
	gone, calls, err := c.term.Terminate(ctx, doomed)
	pr.TerminateCalls += calls
	if err != nil {
		*errs = append(*errs, err)
	}
	isGone := setOf(gone)
	pr.Errored = goneOf(cat.errored, isGone)
	pr.Dangling = goneOf(cat.dangling, isGone)
	pr.Outdated = goneOf(cat.outdated, isGone)
	for _, v := range failedJobs {
		if isGone[v.Rec.ID] {
			pr.Detached--
		}
	}
}

// useWarmed is step 5: warmed-up instances become hot while the pool lacks hot ones, then
// stopped; it returns the rest (excess) and those that could not be stopped, both for step 7.
func (c *Converger) useWarmed(ctx context.Context, spec warmpool.PoolSpec, cat *categories, now time.Time, pr *PoolReport, errs *[]error) (excess []store.Instance, failedStops []warmpool.Victim) {
	var toReady, toStop []store.Instance
	for _, in := range cat.warmed {
		switch {
		case len(cat.ready)+len(toReady) < spec.Hot:
			toReady = append(toReady, in)
		case len(cat.stopped)+len(toStop) < spec.Stopped:
			toStop = append(toStop, in)
		default:
			excess = append(excess, in)
		}
	}
	readied, err := c.ready(ctx, spec, toReady, now)
	if err != nil {
		*errs = append(*errs, err)
	}
	pr.Readied = warmpool.IDs(readied)
	cat.ready = append(cat.ready, readied...)
	stopped, stopCalls, failedStops, err := c.stop(ctx, toStop, now)
	pr.StopCalls += stopCalls
	if err != nil {
		*errs = append(*errs, err)
	}
	pr.StoppedNow = warmpool.IDs(stopped)
	cat.stopped = append(cat.stopped, stopped...)
	return excess, failedStops
}

// kept is how many instances of each kind the pool keeps.
type kept struct{ ready, stopped, warming int }

// fill is step 6: create what is missing. Warming instances count: they become hot or stopped
// when ready.
func (c *Converger) fill(ctx context.Context, spec warmpool.PoolSpec, removed bool, cat *categories, now time.Time, pr *PoolReport, errs *[]error) kept {
	k := kept{ready: min(len(cat.ready), spec.Hot), stopped: min(len(cat.stopped), spec.Stopped)}
	slots := spec.Hot + spec.Stopped - k.ready - k.stopped
	k.warming = min(len(cat.warming), slots)
	if missing := slots - k.warming; missing > 0 && !removed {
		created, ccalls, err := c.create(ctx, spec, missing, now, c.log.With("pool", spec.Name), pr)
		pr.CreateCalls += ccalls
		if err != nil {
			*errs = append(*errs, err)
		}
		pr.Created = warmpool.IDs(created)
		cat.warming = append(cat.warming, created...)
		k.warming += len(created)
	}
	return k
}

func warmedVictims(ins []store.Instance) []warmpool.Victim {
	out := make([]warmpool.Victim, len(ins))
	for i, in := range ins {
		out[i] = warmpool.Victim{Rec: in, Reason: "warmed-up instance beyond the pool's target"}
	}
	return out
}

// endExcess is step 7: terminate the excess: hot beyond the target (those closest to dangling
// first), stopped beyond it (the oldest first), warming instances beyond the remaining slots (the
// youngest first: least invested), and more (warmed-up ones nobody needs, instances that could
// not be stopped).
func (c *Converger) endExcess(ctx context.Context, cat *categories, k kept, more []warmpool.Victim, pr *PoolReport, errs *[]error) {
	var excess []warmpool.Victim
	byThreshold := func(a, b store.Instance) int {
		return cmp.Or(a.Threshold.Compare(b.Threshold), strings.Compare(a.ID, b.ID))
	}
	slices.SortFunc(cat.ready, byThreshold)
	slices.SortFunc(cat.stopped, byThreshold)
	slices.SortFunc(cat.warming, func(a, b store.Instance) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	for _, in := range cat.ready[:len(cat.ready)-k.ready] {
		excess = append(excess, warmpool.Victim{Rec: in, Reason: "hot instance beyond the pool's target"})
	}
	for _, in := range cat.stopped[:len(cat.stopped)-k.stopped] {
		excess = append(excess, warmpool.Victim{Rec: in, Reason: "stopped instance beyond the pool's target"})
	}
	for _, in := range cat.warming[:len(cat.warming)-k.warming] {
		excess = append(excess, warmpool.Victim{Rec: in, Reason: "warming instance beyond the pool's target"})
	}
	excess = append(excess, more...)
	gone, calls, err := c.term.Terminate(ctx, excess)
	pr.TerminateCalls += calls
	if err != nil {
		*errs = append(*errs, err)
	}
	pr.Excess = goneOf(excess, setOf(gone))
	pr.Ready, pr.Stopped, pr.Warming = k.ready, k.stopped, k.warming
}

// categorize sorts the records of a pool. Warming records are judged by their last signal.
func (c *Converger) categorize(ctx context.Context, spec warmpool.PoolSpec, recs []store.Instance, now time.Time) (categories, error) {
	var cat categories
	var warming []store.Instance
	for _, in := range recs {
		if c.sortRecord(&cat, spec, in, now) {
			warming = append(warming, in)
		}
	}
	return cat, c.judgeWarming(ctx, &cat, warming, now)
}

// sortRecord puts one record in its category by its state alone; it reports a current warming
// record, which judgeWarming sorts by its last signal.
func (c *Converger) sortRecord(cat *categories, spec warmpool.PoolSpec, in store.Instance, now time.Time) (warming bool) {
	// A removed pool has no spec hash: its instances are excess, not outdated.
	outdated := spec.SpecHash != "" && in.SpecHash != spec.SpecHash
	outdatedVictim := func() warmpool.Victim {
		return warmpool.Victim{Rec: in, Reason: "outdated: spec hash " + in.SpecHash + ", pool is at " + spec.SpecHash}
	}
	switch in.State {
	case store.StateWarming:
		if outdated {
			cat.outdated = append(cat.outdated, outdatedVictim())
			return false
		}
		return true
	case store.StateReady:
		switch {
		case in.RunID != "":
			cat.detached++ // not reachable through the state machine; never touched
		case in.Expired(now):
			cat.dangling = append(cat.dangling, warmpool.Victim{Rec: in, Reason: "dangling: hot and not picked for a job before " + in.Threshold.Format(time.RFC3339)})
		case outdated:
			cat.outdated = append(cat.outdated, outdatedVictim())
		default:
			cat.ready = append(cat.ready, in)
		}
	case store.StateStopped:
		switch {
		case in.RunID != "":
			cat.detached++
		case in.Expired(now):
			cat.dangling = append(cat.dangling, warmpool.Victim{Rec: in, Reason: "stale: stopped since before " + in.Threshold.Add(-c.opts.MaxStoppedAge).Format(time.RFC3339)})
		case outdated:
			cat.outdated = append(cat.outdated, outdatedVictim())
		default:
			cat.stopped = append(cat.stopped, in)
		}
	case store.StateClaimed, store.StateCreated:
		if pendingJob(in) {
			cat.jobs = append(cat.jobs, in)
		}
		cat.detached++
	case store.StateTerminating:
	default:
		// running (job started), idle (returned to the resource pool by a run).
		cat.detached++
	}
	return false
}

// judgeWarming sorts current warming records by their last signal (read in parallel): errored
// (pre-runner failed, or not warmed up in time), warmed (UD_OK signed by the agent's key, which is
// pinned now), or still warming. A record whose signal or key cannot be read holds its slot as
// warming, and the error is returned.
func (c *Converger) judgeWarming(ctx context.Context, cat *categories, warming []store.Instance, now time.Time) error {
	sigs := make([]store.SignalRecord, len(warming))
	errs := make([]error, len(warming))
	warmpool.Each(len(warming), func(i int) {
		sigs[i], errs[i] = c.st.LastSignal(ctx, warming[i].ID)
	})
	var readErrs []error
	for i, in := range warming {
		sig, err := sigs[i], errs[i]
		switch {
		case err == nil && sig.Signal == store.SignalPreRunnerFailed:
			cat.errored = append(cat.errored, warmpool.Victim{Rec: in, Reason: "error: pre-runner script failed: " + sig.Detail})
		case in.Expired(now):
			cat.errored = append(cat.errored, warmpool.Victim{Rec: in, Reason: "error: not warmed up before " + in.Threshold.Format(time.RFC3339)})
		case err == nil && sig.Signal == store.SignalPreRunnerOK:
			// The warm-up is the instance's first sight, before any job ran on it: pin the key its
			// agent signs with, so that its later reports are believed only when signed by it
			// (store/attribution.go). An instance is pooled only with its key pinned: its agent
			// starts a runner only then (agent/pin.go), and a claim hands it a job at once.
			pinned, believed, perr := c.st.Attribute(ctx, in, sig)
			switch {
			case perr != nil:
				cat.warming = append(cat.warming, in)
				readErrs = append(readErrs, fmt.Errorf("pinning the agent key of %s: %w", in.ID, perr))
			case believed && pinned.AgentKey != "":
				cat.warmed = append(cat.warmed, pinned)
			default:
				cat.errored = append(cat.errored, warmpool.Victim{Rec: in, Reason: "error: its warm-up report is not signed by its agent's key"})
			}
		case err == nil || errors.Is(err, store.ErrNotFound):
			cat.warming = append(cat.warming, in)
		default:
			// Unknown: count it as warming (it holds its slot) and look again next pass.
			cat.warming = append(cat.warming, in)
			readErrs = append(readErrs, fmt.Errorf("reading the signal of %s: %w", in.ID, err))
		}
	}
	return errors.Join(readErrs...)
}

// jobs promotes the pool-job instances whose agent registered (claimed or created -> running, with
// the job's runtime deadline) and returns those that failed (registration failed, the pre-runner
// script failed, or their deadline passed first), to terminate; their jobs go back to the queue.
func (c *Converger) jobs(ctx context.Context, spec warmpool.PoolSpec, recs []store.Instance, now time.Time, pr *PoolReport, errs *[]error) []warmpool.Victim {
	maxRuntime := cmp.Or(spec.Class.MaxRuntime.Std(), warmpool.DefaultMaxRuntime)
	var mu sync.Mutex
	var failed []warmpool.Victim
	warmpool.Each(len(recs), func(i int) {
		in := recs[i]
		sig, err := c.st.LastSignal(ctx, in.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			mu.Lock()
			*errs = append(*errs, fmt.Errorf("reading the signal of %s: %w", in.ID, err))
			mu.Unlock()
			return
		}
		// A cold-started job instance's first self-signed report pins its agent's key, as a
		// warm-up's does (store/attribution.go). Only a registration signed by the pinned key
		// promotes: nothing unsigned does, pinned key or not (the agent signs every report).
		believed := false
		if err == nil {
			var aerr error
			if in, believed, aerr = c.st.Attribute(ctx, in, sig); aerr != nil {
				mu.Lock()
				*errs = append(*errs, fmt.Errorf("attributing the signal of %s: %w", in.ID, aerr))
				mu.Unlock()
				return
			}
		}
		reason := ""
		switch {
		case err == nil && sig.Signal == store.SignalRegistered && sig.RunID == in.RunID && believed && in.AgentKey != "":
			_, terr := c.st.Transition(ctx, in.ID, store.Change{
				From: []store.State{in.State}, To: store.StateRunning, RunID: in.RunID,
				Threshold: now.Add(maxRuntime), Reason: "registered for " + in.RunID,
			})
			if terr == nil && spec.Autoscale != nil && c.opts.Autoscale.Store != nil {
				c.measureStart(ctx, spec.Name, in, sig, now)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case terr == nil:
				pr.Promoted = append(pr.Promoted, in.ID)
			case !errors.Is(terr, store.ErrConflict):
				*errs = append(*errs, fmt.Errorf("promoting %s: %w", in.ID, terr))
			}
			return
		case err == nil && sig.Signal == store.SignalRegistrationFailed && sig.RunID == in.RunID:
			reason = "registration for " + in.RunID + " failed: " + sig.Detail
		case err == nil && sig.Signal == store.SignalPreRunnerFailed:
			reason = "pre-runner script failed: " + sig.Detail
		case in.Expired(now):
			reason = "not registered for " + in.RunID + " before " + in.Threshold.Format(time.RFC3339)
		default:
			return // still booting or registering
		}
		mu.Lock()
		failed = append(failed, warmpool.Victim{Rec: in, Reason: reason})
		mu.Unlock()
	})
	if c.opts.Jobs != nil {
		for _, v := range failed {
			jobID, ok := strings.CutPrefix(v.Rec.RunID, warmpool.JobRunPrefix)
			if !ok {
				continue
			}
			requeued, err := c.opts.Jobs.Requeue(ctx, jobID, v.Rec.ID, v.Reason)
			switch {
			case err != nil:
				*errs = append(*errs, fmt.Errorf("re-queueing job %s: %w", jobID, err))
			case requeued:
				pr.Requeued = append(pr.Requeued, jobID)
			}
		}
	}
	return failed
}

// ready makes warmed-up instances hot: warming -> ready with the dangling deadline, then announced
// in the runner class's pool queue.
func (c *Converger) ready(ctx context.Context, spec warmpool.PoolSpec, recs []store.Instance, now time.Time) ([]store.Instance, error) {
	threshold := now.Add(cmp.Or(spec.DanglingAfter(), c.opts.DanglingAfter))
	out := make([]store.Instance, len(recs))
	errs := make([]error, len(recs))
	warmpool.Each(len(recs), func(i int) {
		in, err := c.st.Transition(ctx, recs[i].ID, store.Change{
			From: []store.State{store.StateWarming}, To: store.StateReady, RequireNoRun: true,
			Threshold: threshold, Reason: "warmed up: hot", MarkPooled: spec.Class.Queue != nil,
		})
		if err != nil {
			if !errors.Is(err, store.ErrConflict) {
				errs[i] = fmt.Errorf("making %s hot: %w", recs[i].ID, err)
			}
			return
		}
		out[i] = in
		if spec.Class.Queue == nil {
			return
		}
		// Without the message only pool jobs can pick it; the step-driven path misses it until it
		// is replaced. Worth a log line, not a failure.
		if err := spec.Class.Queue.Put(ctx, claim.MessageOf(in), 0); err != nil {
			c.log.Warn("hot instance not announced in its pool queue", "pool", spec.Name, "instance", in.ID, "err", err)
		}
	})
	return slices.DeleteFunc(out, func(in store.Instance) bool { return in.ID == "" }), errors.Join(errs...)
}

// stop makes warmed-up instances stopped: warming -> stopped first (so an instance is never
// stopped behind a record that still offers it as warming), then StopInstances in batches. An
// instance EC2 will not stop is returned as a victim: its record says stopped while it runs.
func (c *Converger) stop(ctx context.Context, recs []store.Instance, now time.Time) (stopped []store.Instance, calls int, failed []warmpool.Victim, _ error) {
	threshold := now.Add(c.opts.MaxStoppedAge)
	marked := make([]store.Instance, len(recs))
	errs := make([]error, len(recs))
	warmpool.Each(len(recs), func(i int) {
		in, err := c.st.Transition(ctx, recs[i].ID, store.Change{
			From: []store.State{store.StateWarming}, To: store.StateStopped, RequireNoRun: true,
			Threshold: threshold, Reason: "warmed up: stopped",
		})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			errs[i] = fmt.Errorf("marking %s stopped: %w", recs[i].ID, err)
		}
		marked[i] = in
	})
	marked = slices.DeleteFunc(marked, func(in store.Instance) bool { return in.ID == "" })
	slices.SortFunc(marked, func(a, b store.Instance) int { return strings.Compare(a.ID, b.ID) })
	dctx, cancel := warmpool.Detached(ctx)
	defer cancel()
	for chunk := range slices.Chunk(marked, warmpool.MaxBatch) {
		calls++
		_, err := c.api.StopInstances(dctx, &ec2.StopInstancesInput{InstanceIds: warmpool.IDs(chunk)})
		if err == nil {
			stopped = append(stopped, chunk...)
			continue
		}
		// One instance EC2 refuses (a spot instance, one already terminating) fails the call.
		for _, in := range chunk {
			if len(chunk) > 1 {
				calls++
				if _, err = c.api.StopInstances(dctx, &ec2.StopInstancesInput{InstanceIds: []string{in.ID}}); err == nil {
					stopped = append(stopped, in)
					continue
				}
			}
			failed = append(failed, warmpool.Victim{Rec: in, Reason: "could not be stopped: " + err.Error()})
		}
	}
	return stopped, calls, failed, errors.Join(errs...)
}

// create launches missing instances in batches (one CreateFleet each, package launch) and writes
// their warming records at once. An instance whose record cannot be written is terminated right
// away. Where a cap leaves less room than the pool lacks, what fits is created and the pool's
// report says how many the cap held back.
func (c *Converger) create(ctx context.Context, spec warmpool.PoolSpec, missing int, now time.Time, log *slog.Logger, pr *PoolReport) (created []store.Instance, calls int, _ error) {
	shape := spec.Shape(c.opts.DeploymentID)
	threshold := now.Add(c.opts.WarmupTimeout + max(spec.Class.BootExtra, 0))
	var errs []error
	for missing > 0 && ctx.Err() == nil {
		n := min(missing, c.opts.CreateBatch)
		out, err := c.launch.Launch(ctx, launch.Order{
			Count: n, Shape: shape, RunnerClass: spec.RunnerClass(), Reservation: warmpool.ReservationID("pool/" + spec.Name), Fewer: true,
			Record: func(_ int, l fleet.Launched) store.Instance {
				return store.Instance{
					ID: l.ID, State: store.StateWarming, Threshold: threshold, UsageClass: l.UsageClass,
					InstanceType: l.InstanceType, CPU: spec.Class.CPU, MemoryMiB: spec.Class.MemoryMiB, ResourceClass: spec.ResourceClass,
					RunnerClass: spec.RunnerClass(), Pool: spec.Name, Scope: spec.Scope, Zone: l.Zone, SpecHash: spec.SpecHash, RunnerVersion: spec.Class.RunnerVersion,
					JobAccess: spec.Class.JobAccess, Reason: "warming up for pool " + spec.Name,
				}
			},
		})
		if out.Refused != nil {
			c.capped(pr, missing-out.Reserved, out.Refused.Kind)
		}
		created = append(created, out.Recorded...)
		missing -= out.Reserved
		if out.Reserved > 0 {
			calls++
		}
		switch {
		case errors.Is(err, launch.ErrNotRecorded):
			errs = append(errs, err) // those instances are terminated; the pass goes on
		case err != nil && out.Reserved == 0:
			errs = append(errs, err) // the reservation failed
			return created, calls, errors.Join(errs...)
		case err != nil:
			// Capacity or a refused request: nothing else of this fleet runs. Try again next pass.
			errs = append(errs, fmt.Errorf("creating %d instances: %w", out.Reserved, err))
			return created, calls, errors.Join(errs...)
		}
		if out.Reserved == 0 || out.Refused != nil {
			break
		}
	}
	return created, calls, errors.Join(errs...)
}

func setOf(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func goneOf(vs []warmpool.Victim, gone map[string]bool) []string {
	var out []string
	for _, v := range vs {
		if gone[v.Rec.ID] {
			out = append(out, v.Rec.ID)
		}
	}
	return out
}

// capped notes in the pool's report that a cap held back n instances (quota.LimitDeployment or
// quota.LimitRunnerClass): convergence created what fits.
func (c *Converger) capped(pr *PoolReport, n int, limit string) {
	if pr.CappedBy == "" && c.opts.OnCapped != nil {
		c.opts.OnCapped(limit)
	}
	pr.Capped, pr.CappedBy = n, limit
}
