// The autoscaler's week plan, planned against the goal's own percentile: the plan is chosen by
// replaying the history it learned from (the knowledge the policy has: the recorded demand, and
// the runs it will see live), not by a fixed safety factor on the slack.
package simulate

import (
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// Candidate and PlanChoice are autoscale's: the simulator and the reconciler choose a plan with
// the same function (autoscale.ChoosePlan); the simulator's judge replays the history.
type (
	Candidate  = autoscale.Candidate
	PlanChoice = autoscale.PlanChoice
)

// planner replays the autoscaler on the history under candidate plans.
type planner struct {
	o       Options
	hist    []jobtrace.Job
	fanouts autoscale.Fanouts
	prof    *autoscale.Profile
}

// try replays the autoscaler following plan on the history.
func (pl *planner) try(name string, plan *autoscale.WeekPlan) (Candidate, error) {
	a := pl.autoscaler(plan, nil)
	r, err := Run(pl.hist, pl.o.Model, a, pl.o.Goal)
	if err != nil {
		return Candidate{}, err
	}
	slow := 0
	for _, q := range r.queue {
		if q > pl.o.Goal {
			slow++
		}
	}
	return Candidate{Name: name, Plan: plan, SlowShare: float64(slow) / float64(len(r.queue)), IdleInstanceHours: r.IdleInstanceHours}, nil
}

func (pl *planner) autoscaler(plan *autoscale.WeekPlan, conflicts *int) *Autoscaler {
	o := pl.o
	return &Autoscaler{Profile: pl.prof, Plan: plan, Fanouts: pl.fanouts, Loc: o.Loc, Base: autoscale.Input{
		Starts: o.Model.Starts, Prices: o.Model.Prices, Goal: o.Goal, GoalP99: o.GoalP99, Interval: o.Model.Interval,
		Cooldown: o.Cooldown, Budget: o.Budget,
	}, Decision: func(_ time.Time, d autoscale.Decision) {
		if d.Conflict != "" && conflicts != nil {
			*conflicts++
		}
	}}
}

// choose is autoscale.ChoosePlan judged by replays of the history: the week plan at the largest
// slack whose replay leaves at most target of the history's jobs slower than the goal, and the
// history's own cheapest fixed schedule (sched) as a plan. A fixed schedule is one of the plans
// Decide can follow (an hourly level with the same lead), so on the week itself the choice costs
// no more than the hindsight schedule.
func (pl *planner) choose(target float64, sched *Fixed) (PlanChoice, error) {
	var offered []autoscale.NamedPlan
	if sched != nil {
		offered = append(offered, autoscale.NamedPlan{Name: "the history's hourly schedule", Plan: FixedPlan(sched)})
	}
	return autoscale.ChoosePlan(pl.prof, 1-pl.o.Percentile, target, pl.try, offered...)
}

// FixedPlan is f as a week plan: every quarter-hour at its hour's count (weekdays, weekends).
func FixedPlan(f *Fixed) *autoscale.WeekPlan {
	plan := &autoscale.WeekPlan{}
	const perDay = autoscale.SlotsPerWeek / 7
	for i := range autoscale.SlotsPerWeek {
		d, h := 0, (i%perDay)/4
		if i/perDay >= 5 {
			d = 1
		}
		plan.Level[i], plan.Peak[i] = f.Hot[d][h], f.Hot[d][h]
	}
	return plan
}
