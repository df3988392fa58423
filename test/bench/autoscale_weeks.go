// The autoscale phase's every-week table: the committed week and the held-out weeks of
// jobtrace.HeldOut (docs/autoscale.md, "Held-out weeks"), each class replayed on its own label, with
// the week before as the autoscaler's history and with the week as its own.
package bench

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/simulate"
)

// WeekRow is one week (and class) of the autoscale table.
type WeekRow struct {
	Week, Class string
	Jobs        int
	// FixedIdle is the hindsight schedule's idle instance-hours; History and Self the autoscaler
	// with the week before as history and with the week itself.
	FixedIdle     float64
	History, Self WeekPolicy
}

// WeekPolicy is how the autoscaler did on a week.
type WeekPolicy struct {
	P95     time.Duration
	SlowPct float64
	Ratio   float64
}

func weekRow(week, class string, jobs int, hist, self *simulate.Comparison) WeekRow {
	return WeekRow{Week: week, Class: class, Jobs: jobs, FixedIdle: hist.Fixed.IdleInstanceHours,
		History: WeekPolicy{P95: hist.Autoscaler.P95, SlowPct: slowPct(hist.Autoscaler), Ratio: hist.IdleRatio()},
		Self:    WeekPolicy{P95: self.Autoscaler.P95, SlowPct: slowPct(self.Autoscaler), Ratio: self.IdleRatio()}}
}

// heldOutWeeks replays every held-out week's classes (seed 1, the week before seed 2, as
// `tracegen -heldout NAME` writes internal/jobtrace/testdata/week-NAME*.csv.gz) and adds their rows.
func (h *harness) heldOutWeeks(res *Result) error {
	weeks := jobtrace.HeldOut()
	for _, name := range slices.Sorted(maps.Keys(weeks)) {
		classes := weeks[name]
		week := jobtrace.GenerateClasses(classes, 1)
		before := slices.Clone(classes)
		for i := range before {
			before[i].Start = before[i].Start.AddDate(0, 0, -7)
		}
		history := jobtrace.GenerateClasses(before, 2)
		for _, c := range classes {
			label := c.Labels[len(c.Labels)-1]
			jobs, hist := jobtrace.WithLabel(week, label), jobtrace.WithLabel(history, label)
			o := simulate.Options{Jobs: jobs, History: hist, Model: autoscaleModel, Goal: autoscaleGoal, Percentile: 0.95, Loc: time.UTC}
			withHistory, err := simulate.Compare(o)
			if err != nil {
				return fmt.Errorf("autoscale: week %s, %s: %w", name, label, err)
			}
			o.History = nil
			self, err := simulate.Compare(o)
			if err != nil {
				return fmt.Errorf("autoscale: week %s, %s as its own history: %w", name, label, err)
			}
			res.Weeks = append(res.Weeks, weekRow(name, label, len(jobs), withHistory, self))
		}
	}
	return nil
}

// weeksTable renders the every-week table.
func (r *Result) weeksTable(p func(format string, args ...any)) {
	if len(r.Weeks) == 0 {
		return
	}
	p("## Autoscale: every week")
	p("")
	p("The autoscale phase's replays (simulated time, the model of the autoscale figures above): the committed week and")
	p("the held-out weeks of `jobtrace.HeldOut` (docs/autoscale.md, \"Held-out weeks\"), each runner class on its own label.")
	p("Goal: p95 queue time at most 5 s (at most 5 %% of the jobs slower) and idle instance-hours at most the hindsight")
	p("schedule's (ratio at most 1.0). The hindsight schedule is searched on the judged week itself; docs/autoscale.md,")
	p("\"What a policy that knows only the past can reach\", measures what any policy that knows only the past reaches.")
	p("")
	p("| week | class | jobs | hindsight schedule, idle inst-h | the week before as history: p95, slow, ratio | the week as its own history: p95, slow, ratio |")
	p("|---|---|---:|---:|---|---|")
	for _, w := range r.Weeks {
		p("| %s | `%s` | %d | %s | %s, %.2f %%, %.2f | %s, %.2f %%, %.2f |", w.Week, w.Class, w.Jobs, formatValue(round1(w.FixedIdle)),
			w.History.P95, w.History.SlowPct, w.History.Ratio, w.Self.P95, w.Self.SlowPct, w.Self.Ratio)
	}
	p("")
}
