// Compare: the three policies on one history, as `runnerpool simulate` and the bench print them.
package simulate

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// Options of a comparison.
type Options struct {
	Jobs []jobtrace.Job
	// History is the demand the autoscaler learned beforehand (its profile); nil: Jobs itself, as
	// if the week replayed were a repeat of the one recorded.
	History    []jobtrace.Job
	Model      Model
	Goal       time.Duration // queue time at Percentile
	Percentile float64       // 0.95
	Loc        *time.Location
	// GoalP99, when set, is a tail goal (99 % of jobs within it): the autoscaler then keeps
	// stopped instances as the tail's buffer where their start meets it.
	GoalP99 time.Duration
	// Slack, when set, is the share of jobs the week plan may leave without a hot instance (the
	// plan of PlanWeek at that slack, as before the plan was chosen by replay).
	Slack float64
	// Margin is, with a History other than Jobs, the share of 1 - Percentile the plan aims to
	// leave slow on the history (default DefaultMargin): another week's bursts come elsewhere.
	Margin   float64
	Cooldown time.Duration // default 2 min
	Budget   float64       // USD per hour of idle capacity; 0: none
}

// DefaultMargin is Options.Margin's default (autoscale.DefaultMargin, which the reconciler plans
// with too).
const DefaultMargin = autoscale.DefaultMargin

// Comparison is the outcome of the three policies.
type Comparison struct {
	ColdOnly, Fixed, Autoscaler *Result
	// RunsIgnored, when the history's jobs carry their runs, is the autoscaler without them: what
	// the pre-warm of fan-outs buys.
	RunsIgnored *Result
	Fanouts     autoscale.Fanouts
	// PriorFixed, with a separate history, is the cheapest fixed schedule of the history replayed
	// on the jobs: what a team that sized its schedule on last week gets this week.
	PriorFixed *Result
	Schedule   *Fixed
	Plan       *autoscale.WeekPlan
	// Choice is how the autoscaler's plan was chosen (nil with Options.Slack).
	Choice    *PlanChoice
	Conflicts int // decisions whose goal and budget or bounds conflicted
}

// Compare replays the three policies.
func Compare(o Options) (*Comparison, error) {
	if o.Percentile <= 0 || o.Percentile >= 1 {
		return nil, fmt.Errorf("percentile %v: want between 0 and 1", o.Percentile)
	}
	if o.Cooldown <= 0 {
		o.Cooldown = 2 * time.Minute
	}
	hist := o.History
	if hist == nil {
		hist = o.Jobs
	}
	c := &Comparison{}
	// The target the plan aims at on its history: the goal's own share on the week itself; less
	// the margin on another week.
	target := autoscale.Target(o.Percentile, o.Margin, o.History == nil)
	// First the searches (most of the time, independent: side by side), then the autoscaler,
	// whose plan may be the history's schedule.
	var g errgroup.Group
	var histSched *Fixed
	g.Go(func() (err error) {
		c.ColdOnly, err = Run(o.Jobs, o.Model, ColdOnly{}, o.Goal)
		return err
	})
	g.Go(func() (err error) {
		if c.Schedule, c.Fixed, err = SearchFixed(o.Jobs, o.Model, o.Goal, o.Percentile, o.Loc); err != nil {
			return fmt.Errorf("searching the fixed schedule: %w", err)
		}
		return nil
	})
	if o.History != nil {
		g.Go(func() error {
			prior, _, err := SearchFixed(o.History, o.Model, o.Goal, o.Percentile, o.Loc)
			if err != nil {
				return fmt.Errorf("searching the history's fixed schedule: %w", err)
			}
			if c.PriorFixed, err = Run(o.Jobs, o.Model, prior, o.Goal); err != nil {
				return err
			}
			c.PriorFixed.Policy = "fixed schedule of the history"
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if o.History == nil {
		// On the week itself the hindsight schedule is a plan the autoscaler can follow. On
		// another week it is not offered: it is that week's bursts fitted in hindsight, the plan
		// that carries worst to a new week (docs/autoscale.md, "the margin").
		histSched = c.Schedule
	}
	lead := o.Model.Starts.Cold + o.Model.Interval
	var ignoredConflicts, conflicts int
	if c.Fanouts = autoscale.LearnFanouts(Runs(hist), lead); len(c.Fanouts) > 0 {
		g.Go(func() (err error) {
			if c.RunsIgnored, _, _, err = c.autoscale(o, hist, nil, target, histSched, &ignoredConflicts); err != nil {
				return err
			}
			c.RunsIgnored.Policy = "autoscaler, runs ignored"
			return nil
		})
	}
	g.Go(func() (err error) {
		c.Autoscaler, c.Plan, c.Choice, err = c.autoscale(o, hist, c.Fanouts, target, histSched, &conflicts)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	c.Conflicts = conflicts // the autoscaler's own are counted
	return c, nil
}

// autoscale replays the autoscaler learning from hist: the pre-warm of fanouts, and the week plan
// of the demand it leaves, chosen against target (or at Options.Slack).
func (c *Comparison) autoscale(o Options, hist []jobtrace.Job, fanouts autoscale.Fanouts, target float64, sched *Fixed, conflicts *int) (*Result, *autoscale.WeekPlan, *PlanChoice, error) {
	pl := &planner{o: o, hist: hist, fanouts: fanouts, prof: Record(Uncovered(hist, fanouts), o.Loc)}
	var plan *autoscale.WeekPlan
	var choice *PlanChoice
	if o.Slack > 0 {
		plan = autoscale.PlanWeek(pl.prof, o.Slack)
	} else {
		ch, err := pl.choose(target, sched)
		if err != nil {
			return nil, nil, nil, err
		}
		plan, choice = ch.Chosen.Plan, &ch
	}
	r, err := Run(o.Jobs, o.Model, pl.autoscaler(plan, conflicts), o.Goal)
	return r, plan, choice, err
}

// IdleRatio is the autoscaler's idle instance-hours over the fixed schedule's.
func (c *Comparison) IdleRatio() float64 { return ratio(c.Autoscaler, c.Fixed) }

// ratio is a's idle instance-hours over b's (0 when b has none).
func ratio(a, b *Result) float64 {
	if b == nil || b.IdleInstanceHours == 0 {
		return 0
	}
	return a.IdleInstanceHours / b.IdleInstanceHours
}

// IdleRatioVsPrior is the autoscaler's idle instance-hours over those of the history's fixed
// schedule replayed on the week (0 without a history).
func (c *Comparison) IdleRatioVsPrior() float64 { return ratio(c.Autoscaler, c.PriorFixed) }

// Print writes the comparison as a table.
func (c *Comparison) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tjobs\tqueue p50\tp95\tp99\tidle inst-h\tstopped inst-h\tidle cost\ttotal cost\t")
	for _, r := range []*Result{c.ColdOnly, c.Fixed, c.PriorFixed, c.RunsIgnored, c.Autoscaler} {
		if r == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.1f\t%.1f\t$%.2f\t$%.2f\t\n", r.Policy, r.Jobs, r.P50, r.P95, r.P99,
			r.IdleInstanceHours, r.StoppedInstanceHours, r.IdleCost, r.Cost)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "autoscaler idle instance-hours / fixed schedule's: %.2f\n", c.IdleRatio())
	if ch := c.Choice; ch != nil && err == nil {
		_, err = fmt.Fprintf(w, "the autoscaler's plan: %s, chosen on its history (%.2f %% of jobs slower than the goal there, target %.2f %%; %.1f idle inst-h)\n",
			ch.Chosen.Name, 100*ch.Chosen.SlowShare, 100*ch.Target, ch.Chosen.IdleInstanceHours)
		for _, cand := range ch.Candidates {
			if cand.Name != ch.Chosen.Name && err == nil {
				_, err = fmt.Fprintf(w, "  other candidate: %s (%.2f %% slow there, %.1f idle inst-h)\n", cand.Name, 100*cand.SlowShare, cand.IdleInstanceHours)
			}
		}
	}
	if c.RunsIgnored != nil && err == nil {
		_, err = fmt.Fprintf(w, "the same, runs ignored: %.2f\n", ratio(c.RunsIgnored, c.Fixed))
	}
	if c.PriorFixed != nil && err == nil {
		_, err = fmt.Fprintf(w, "autoscaler idle instance-hours / the history's fixed schedule's: %.2f (that schedule on this week: p95 %s)\n",
			ratio(c.Autoscaler, c.PriorFixed), c.PriorFixed.P95)
	}
	if c.Conflicts > 0 && err == nil {
		_, err = fmt.Fprintf(w, "the budget or the bounds held the autoscaler below the goal in %d decisions\n", c.Conflicts)
	}
	return err
}
