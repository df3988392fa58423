package simulate

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// paced is the goal-budget controller tried for docs/autoscale.md ("Tried: pacing the goal's
// budget"): the goal lets 5 % of the week's jobs be slow; each pass it counts the slow jobs so far
// this week and the jobs expected in the rest of it (the history's), and follows the loosest week
// plan of a ladder whose slow share on the history, times c, is within the share the remaining
// budget allows for the rest of the week.
type paced struct {
	a      *Autoscaler
	ladder []autoscale.Candidate // strictest first
	c      float64
	// loosest, when > 0, is (d): the controller never follows a plan looser than this slow share
	// on the history (the plan the policy chooses): it only tightens when behind the budget.
	loosest float64
	perSlot [autoscale.SlotsPerWeek]float64 // the history's jobs per slot
	start   time.Time
	seen    int
	slow    int
	// ewma, when > 0, is (b): the hot level also follows the live arrival rate (jobs per pass,
	// smoothed with this weight) times ewmaK.
	ewma, ewmaK, rate float64
}

func (p *paced) Name() string { return "paced" }
func (p *paced) Reuse() bool  { return true }
func (p *paced) Targets(o Observation) (int, int) {
	if p.start.IsZero() || o.Now.Sub(p.start) >= 7*24*time.Hour {
		p.start, p.seen, p.slow = o.Now.Truncate(24*time.Hour), 0, 0
		for o.Now.Sub(p.start) >= 7*24*time.Hour {
			p.start = p.start.Add(7 * 24 * time.Hour)
		}
	}
	p.seen += o.Arrived
	p.slow += o.Slow
	slot := autoscale.SlotOf(o.Now, time.UTC)
	rest := 0.0
	for s := slot; s < autoscale.SlotsPerWeek; s++ {
		rest += p.perSlot[s]
	}
	budget := 0.05*(float64(p.seen)+rest) - float64(p.slow)
	allowed := 0.0
	if rest > 0 {
		allowed = budget / rest
	}
	k := 0
	for i, c := range p.ladder {
		if p.c*c.SlowShare <= allowed && (p.loosest == 0 || c.SlowShare <= p.loosest) {
			k = i
		}
	}
	p.a.Plan = p.ladder[k].Plan
	hot, stopped := p.a.Targets(o)
	if p.ewma > 0 {
		p.rate = p.ewma*float64(o.Arrived) + (1-p.ewma)*p.rate
		hot = max(hot, int(math.Ceil(p.ewmaK*p.rate)))
	}
	return hot, stopped
}

func newPaced(t *testing.T, before []jobtrace.Job, c float64) *paced {
	o := Options{Model: measureModel, Goal: 5 * time.Second, Percentile: 0.95, Loc: time.UTC, Cooldown: 2 * time.Minute}
	prof := Record(before, time.UTC)
	pl := &planner{o: o, hist: before, prof: prof}
	p := &paced{a: pl.autoscaler(nil, nil), c: c}
	for _, s := range []float64{0, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.08, 0.1} {
		cand, err := pl.try("", autoscale.PlanWeek(prof, s))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(p.ladder); n == 0 || cand.SlowShare > p.ladder[n-1].SlowShare {
			p.ladder = append(p.ladder, cand)
		}
	}
	for _, j := range before {
		p.perSlot[autoscale.SlotOf(j.Created, time.UTC)]++
	}
	return p
}

func TestMeasurePaced(t *testing.T) {
	goal := 5 * time.Second
	for _, pr := range measurePairs(t, envInt("RUNNERPOOL_MEASURE_M", 2)) {
		seed, week, before, fr := pr.seed, pr.week, pr.before, pr.fixed
		for _, v := range []struct {
			c, ewma, k, loosest float64
		}{{1, 0, 0, 0}, {1.5, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0}, {2, 0.2, 1, 0}, {2, 0.2, 2, 0}, {1, 0, 0, 0.025}, {2, 0, 0, 0.025}} {
			p := newPaced(t, before, v.c)
			p.ewma, p.ewmaK, p.loosest = v.ewma, v.k, v.loosest
			r, err := Run(week, measureModel, p, goal)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("seed %d: paced c %.1f ewma %.1f×%.0f loosest %.1f %% | ratio %.2f, slow %.2f %%, p95 %s (hindsight %.0f)\n", seed, v.c, v.ewma, v.k, 100*v.loosest,
				r.IdleInstanceHours/fr.IdleInstanceHours, 100*slowShareOf(r, goal), r.P95, fr.IdleInstanceHours)
		}
	}
}
