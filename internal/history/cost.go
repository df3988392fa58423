// Cost: instance-seconds times price, per run, repository, runner class and warm pool, and what
// reuse saved. One function (Compute) builds it for the dashboard, `runnerpool status --cost` and
// the cost metrics, so the three never disagree.
package history

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// Pricer returns the hourly USD price of an instance type in a usage class (and zone), and where
// the price came from ("unknown" with 0 when nobody knows it).
type Pricer func(ctx context.Context, instanceType, usageClass, zone string) (perHour float64, source string)

// PriceUnknown is the source of a price nobody knows.
const PriceUnknown = "unknown"

// RunnerCost is what one runner cost its run.
type RunnerCost struct {
	InstanceID, InstanceType, UsageClass, Source string
	Seconds                                      float64
	PerHour                                      float64
	Cost                                         float64
	PriceSource                                  string
}

// RunCost is what one run cost.
type RunCost struct {
	RunKey, Repository, RunnerClass string
	StartedAt                       time.Time
	Open                            bool // not released yet: counted until the report's end
	Runners                         []RunnerCost
	Line
}

// Line is a total: instance-seconds, money, and the sources of the prices it used.
type Line struct {
	Name            string
	Runs            int
	InstanceSeconds float64
	Cost            float64
	// UnpricedSeconds are instance-seconds whose price is unknown (not in Cost).
	UnpricedSeconds float64
	Sources         []string
}

func (l *Line) add(seconds, perHour float64, source string) {
	l.InstanceSeconds += seconds
	if source == PriceUnknown || source == "" {
		l.UnpricedSeconds += seconds
		source = PriceUnknown
	} else {
		l.Cost += seconds / 3600 * perHour
	}
	if !slices.Contains(l.Sources, source) {
		l.Sources = append(l.Sources, source)
		slices.Sort(l.Sources)
	}
}

func (l *Line) merge(o Line) {
	l.InstanceSeconds += o.InstanceSeconds
	l.Cost += o.Cost
	l.UnpricedSeconds += o.UnpricedSeconds
	for _, s := range o.Sources {
		if !slices.Contains(l.Sources, s) {
			l.Sources = append(l.Sources, s)
		}
	}
	slices.Sort(l.Sources)
}

// SourceNote renders a line's price sources for a reader: "price-file", "aws-spot-history +
// price-file", or "unknown".
func (l Line) SourceNote() string {
	if len(l.Sources) == 0 {
		return "no instance-seconds"
	}
	return strings.Join(l.Sources, " + ")
}

// PoolLineName names a pool count's standing-cost line: the warm pool, or "CLASS (idle runners)"
// for a runner class's released runners outside warm pools.
func PoolLineName(p PoolCount) string {
	if p.Pool != "" {
		return p.Pool
	}
	return p.RunnerClass + " (idle runners)"
}

// Savings is what reuse saved in the window.
type Savings struct {
	// Baseline is the median duration of the window's provisions that created a runner (they
	// waited for a cold start); BaselineRuns how many there were. Without any, nothing is claimed
	// as saved.
	Baseline     time.Duration
	BaselineRuns int
	// ReusedRunners and StartedRunners count runners that came from the pool and from stopped
	// warm instances.
	ReusedRunners, StartedRunners int
	// TimeSaved is the wait workflows did not have: for every provision served without creating,
	// the baseline minus its own duration.
	TimeSaved time.Duration
	// BootSeconds are the instance-seconds of booting that reused runners did not bill (the
	// baseline per reused runner); MoneySaved is their price.
	BootSeconds float64
	MoneySaved  float64
	Sources     []string
}

// Report is the cost of a window.
type Report struct {
	From, To      time.Time
	Runs          []RunCost // newest first
	Repositories  []Line    // by cost, highest first
	RunnerClasses []Line
	// Pools is the standing cost of warm pools (instances waiting: warming, hot, idle; or serving
	// pool jobs) and of every runner class's released runners waiting in its pool (PoolLineName),
	// from the pool samples. Stopped instances bill only their volumes, not counted.
	Pools   []Line
	Total   Line
	Savings Savings
	// Cache is the runner cache's storage and requests (cache.go), apart from the instance cost
	// above; nil when the reader keeps no cache usage or the window had none.
	Cache *CacheCost
}

// Reader is what Compute reads; *Store satisfies it.
type Reader interface {
	RecentRuns(ctx context.Context, from, to time.Time, limit int) ([]Run, error)
	Samples(ctx context.Context, from, to time.Time) ([]Sample, error)
	SampleInterval() time.Duration
}

// CacheReader is what Compute reads the cache's use from, when its Reader has it; *Store does.
type CacheReader interface {
	CacheUsage(ctx context.Context, from, to time.Time) ([]CacheUsage, error)
}

// Compute reads the runs started and the pool samples taken in [from, to) and prices them, and the
// cache's use in the window when r is a CacheReader (at DefaultCachePrices).
func Compute(ctx context.Context, r Reader, price Pricer, from, to time.Time) (Report, error) {
	if !from.Before(to) {
		return Report{}, fmt.Errorf("cost window %s to %s: empty", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	// The runs and the samples are independent reads: at once.
	var runs []Run
	var samples []Sample
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { runs, err = r.RecentRuns(gctx, from, to, 0); return err })
	g.Go(func() (err error) { samples, err = r.Samples(gctx, from, to); return err })
	var cache *CacheCost
	if cr, ok := r.(CacheReader); ok {
		g.Go(func() error {
			usage, err := cr.CacheUsage(gctx, from, to)
			if err != nil || len(usage) == 0 {
				return err // no use of the cache in the window: no cache line
			}
			c := PriceCache(usage, to.Sub(from), DefaultCachePrices)
			cache = &c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Report{}, err
	}
	rep := Build(ctx, runs, samples, r.SampleInterval(), price, from, to)
	rep.Cache = cache
	return rep, nil
}

// Build prices runs and samples (Compute without the reads; the benchmark and tests call it).
func Build(ctx context.Context, runs []Run, samples []Sample, interval time.Duration, price Pricer, from, to time.Time) Report {
	b := &costBuilder{
		ctx: ctx, price: price, prices: map[priceKey]cachedPrice{},
		repos: map[string]*Line{}, classes: map[string]*Line{}, pools: map[string]*Line{},
		rep: Report{From: from.UTC(), To: to.UTC(), Total: Line{Name: "total"}},
	}
	b.savingsBaseline(runs)
	for _, r := range runs {
		b.addRun(r, to)
	}
	slices.Sort(b.rep.Savings.Sources)
	b.addSamples(samples, interval, to)
	for _, l := range b.pools {
		b.rep.Total.merge(*l)
	}
	b.rep.Repositories, b.rep.RunnerClasses, b.rep.Pools = flatLines(b.repos), flatLines(b.classes), flatLines(b.pools)
	return b.rep
}

// costBuilder is one Build: the report it fills, its lines by repository, runner class and pool,
// and the prices it asked for so far.
type costBuilder struct {
	ctx                   context.Context
	price                 Pricer
	prices                map[priceKey]cachedPrice
	repos, classes, pools map[string]*Line
	rep                   Report
}

type priceKey struct{ t, u, z string }

type cachedPrice struct {
	v float64
	s string
}

// priceOf asks the Pricer once per instance type, usage class and zone.
func (b *costBuilder) priceOf(t, u, z string) (float64, string) {
	k := priceKey{t, u, z}
	if p, ok := b.prices[k]; ok {
		return p.v, p.s
	}
	v, s := b.price(b.ctx, t, u, z)
	if s == "" {
		s = PriceUnknown
	}
	b.prices[k] = cachedPrice{v, s}
	return v, s
}

// line is m's line for name, made on first use.
func line(m map[string]*Line, name string) *Line {
	if m[name] == nil {
		m[name] = &Line{Name: name}
	}
	return m[name]
}

// savingsBaseline sets the savings baseline: the median duration of provisions that waited for a
// created runner.
func (b *costBuilder) savingsBaseline(runs []Run) {
	var cold []time.Duration
	for _, r := range runs {
		if r.Status == "succeeded" && slices.ContainsFunc(r.Runners, func(x Runner) bool { return x.Source == SourceCreated }) {
			cold = append(cold, r.Steps.Total)
		}
	}
	slices.Sort(cold)
	sv := &b.rep.Savings
	if sv.BaselineRuns = len(cold); len(cold) > 0 {
		sv.Baseline = cold[len(cold)/2]
	}
}

// addRun prices one run's runners (until its release, or to for a run still open), counts what
// reuse saved it, and adds it to its repository's and runner class's lines and the total.
func (b *costBuilder) addRun(r Run, to time.Time) {
	sv := &b.rep.Savings
	rc := RunCost{RunKey: r.RunKey, Repository: r.Repository, RunnerClass: r.RunnerClass, StartedAt: r.StartedAt, Line: Line{Name: r.RunKey, Runs: 1}}
	end := r.ReleasedAt
	if end.IsZero() {
		rc.Open, end = true, to
	}
	anyCreated := false
	for _, x := range r.Runners {
		secs := max(end.Sub(r.StartedAt).Seconds(), 0)
		v, src := b.priceOf(x.InstanceType, x.UsageClass, x.Zone)
		c := RunnerCost{InstanceID: x.InstanceID, InstanceType: x.InstanceType, UsageClass: x.UsageClass, Source: x.Source, Seconds: secs, PerHour: v, PriceSource: src}
		if src != PriceUnknown {
			c.Cost = secs / 3600 * v
		}
		rc.Runners = append(rc.Runners, c)
		rc.add(secs, v, src)
		if x.Source == SourceCreated {
			anyCreated = true
		}
		b.countSource(x.Source, v, src)
	}
	if !anyCreated && len(r.Runners) > 0 && sv.BaselineRuns > 0 && r.Status == "succeeded" && r.Steps.Total < sv.Baseline {
		sv.TimeSaved += sv.Baseline - r.Steps.Total
	}
	b.rep.Runs = append(b.rep.Runs, rc)
	for _, l := range []*Line{line(b.repos, cmp.Or(r.Repository, "(unknown)")), line(b.classes, cmp.Or(r.RunnerClass, "(default)"))} {
		l.Runs++
		l.merge(rc.Line)
	}
	b.rep.Total.Runs++
	b.rep.Total.merge(rc.Line)
}

// countSource counts a runner by where it came from: a reused one saved a created runner's boot
// (the baseline) at its price v from src, a started one is counted.
func (b *costBuilder) countSource(source string, v float64, src string) {
	sv := &b.rep.Savings
	switch source {
	case SourceReused:
		sv.ReusedRunners++
		if sv.BaselineRuns > 0 {
			sv.BootSeconds += sv.Baseline.Seconds()
			sv.MoneySaved += sv.Baseline.Seconds() / 3600 * v
			if !slices.Contains(sv.Sources, src) {
				sv.Sources = append(sv.Sources, src)
			}
		}
	case SourceStarted:
		sv.StartedRunners++
	}
}

// addSamples prices warm pools' standing cost: each sample's billed instances for the time until
// the next sample (at most two intervals: a gap in sampling is not billed on a guess).
func (b *costBuilder) addSamples(samples []Sample, interval time.Duration, to time.Time) {
	sort.SliceStable(samples, func(i, j int) bool { return samples[i].At.Before(samples[j].At) })
	for i, s := range samples {
		next := to
		if i+1 < len(samples) {
			next = samples[i+1].At
		}
		gap := min(next.Sub(s.At), 2*interval)
		if gap <= 0 {
			continue
		}
		for _, p := range s.Pools {
			if len(p.Billed) == 0 {
				continue
			}
			l := line(b.pools, PoolLineName(p))
			for k, n := range p.Billed {
				typ, usage, _ := strings.Cut(k, "/")
				v, src := b.priceOf(typ, usage, "")
				l.add(float64(n)*gap.Seconds(), v, src)
			}
		}
	}
}

// flatLines lists m's lines, the costliest first.
func flatLines(m map[string]*Line) []Line {
	out := make([]Line, 0, len(m))
	for _, l := range m {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b Line) int {
		return cmp.Or(cmp.Compare(b.Cost, a.Cost), cmp.Compare(b.InstanceSeconds, a.InstanceSeconds), strings.Compare(a.Name, b.Name))
	})
	return out
}
