// The autoscaler's week plan, planned against the goal's own percentile: the plan is chosen by
// replaying the history it learned from (the knowledge the policy has: the recorded demand, and
// the runs it will see live), not by a fixed safety factor on the slack.
package simulate

import (
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// Candidate is one plan the autoscaler could follow, as it replays on the history.
type Candidate struct {
	Name string
	Plan *autoscale.WeekPlan
	// SlowShare and IdleInstanceHours are the autoscaler's, following the plan, on the history.
	SlowShare         float64
	IdleInstanceHours float64
}

// PlanChoice is the plan the autoscaler follows and the candidates it was chosen from.
type PlanChoice struct {
	// Target is the share of the history's jobs the plan may leave slower than the goal: 1 - the
	// percentile on the week itself, less the margin on another week.
	Target     float64
	Chosen     Candidate
	Candidates []Candidate
}

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

// choose finds the cheapest plan whose replay on the history leaves at most target of its jobs
// slower than the goal, among: the week plan (PlanWeek) at the largest slack that does, found by
// bisection, and the history's own cheapest fixed schedule (sched, searched at 1 - target) as a
// plan. A fixed schedule is one of the plans Decide can follow (an hourly level with the same
// lead), so on the week itself the choice costs no more than the hindsight schedule.
func (pl *planner) choose(target float64, sched *Fixed) (PlanChoice, error) {
	ch := PlanChoice{Target: target}
	lo, hi := 0.0, 1-pl.o.Percentile
	best, err := pl.try("week plan, slack 0", autoscale.PlanWeek(pl.prof, 0))
	if err != nil {
		return ch, err
	}
	for range 10 {
		mid := (lo + hi) / 2
		c, err := pl.try(fmt.Sprintf("week plan, slack %.2f %%", 100*mid), autoscale.PlanWeek(pl.prof, mid))
		if err != nil {
			return ch, err
		}
		if c.SlowShare <= target {
			lo, best = mid, c
		} else {
			hi = mid
		}
	}
	ch.Candidates = append(ch.Candidates, best)
	if sched != nil {
		c, err := pl.try("the history's hourly schedule", FixedPlan(sched))
		if err != nil {
			return ch, err
		}
		ch.Candidates = append(ch.Candidates, c)
	}
	ch.Chosen = ch.Candidates[0]
	for _, c := range ch.Candidates[1:] {
		if c.SlowShare <= target && (ch.Chosen.SlowShare > target || c.IdleInstanceHours < ch.Chosen.IdleInstanceHours) {
			ch.Chosen = c
		}
	}
	return ch, nil
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
