// The choice of the week plan, against the goal's own percentile: the one planning function of
// `runnerpool simulate` and the reconciler. Both choose among the same plans (PlanWeek at the
// largest slack whose judged slow share is within the target, and any plan offered beside it) at
// the same target; they differ only in the judge, which is the knowledge each has: the simulator
// replays the history's jobs (internal/simulate), the reconciler keeps the recorded demand only and
// judges a plan by it (ModelJudge).
package autoscale

import (
	"fmt"
	"math"
)

// DefaultMargin is the share of the goal's slack a plan may spend on a history other than the
// week it is judged on: measured on the committed week (docs/autoscale.md, "The margin"), a plan
// leaves about twice as many jobs slow on the next week as on the week it was planned on.
const DefaultMargin = 0.5

// Target is the share of the history's jobs a plan may leave slower than the goal: the goal's
// own share (1 - percentile) when the history is the week judged (ownWeek), less the margin
// otherwise. The reconciler's history is always the weeks before.
func Target(percentile, margin float64, ownWeek bool) float64 {
	if margin <= 0 || margin > 1 {
		margin = DefaultMargin
	}
	if ownWeek {
		return 1 - percentile
	}
	return (1 - percentile) * margin
}

// Candidate is one plan the policy could follow, as its judge found it on the history.
type Candidate struct {
	Name string
	Plan *WeekPlan
	// SlowShare and IdleInstanceHours are the judge's: the share of the history's jobs slower
	// than the goal following the plan, and the idle instance-hours.
	SlowShare         float64
	IdleInstanceHours float64
}

// PlanChoice is the plan chosen and the candidates it was chosen from.
type PlanChoice struct {
	Target     float64
	Chosen     Candidate
	Candidates []Candidate
}

// Judge judges a plan on the history: the candidate with its slow share and idle hours.
type Judge func(name string, plan *WeekPlan) (Candidate, error)

// NamedPlan is a plan offered beside the week plans (for example the hindsight schedule when the
// history is the week itself).
type NamedPlan struct {
	Name string
	Plan *WeekPlan
}

// bisections of the slack between 0 and the goal's share.
const bisections = 10

// ChoosePlan is the cheapest plan whose judged slow share is within target, among: PlanWeek at
// the largest slack in [0, share] that is (bisection), and the plans offered. With none within
// target, the week plan at slack 0.
func ChoosePlan(p *Profile, share, target float64, judge Judge, offered ...NamedPlan) (PlanChoice, error) {
	ch := PlanChoice{Target: target}
	best, err := judge("week plan, slack 0", PlanWeek(p, 0))
	if err != nil {
		return ch, err
	}
	lo, hi := 0.0, share
	for range bisections {
		mid := (lo + hi) / 2
		c, err := judge(fmt.Sprintf("week plan, slack %.2f %%", 100*mid), PlanWeek(p, mid))
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
	for _, o := range offered {
		c, err := judge(o.Name, o.Plan)
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

// ModelJudge judges a plan by the recorded demand itself, as PlanWeek models it: a slot's minute
// with n arrivals above the plan's level leaves n - level jobs without a hot instance; the idle
// hours are the levels held. It is what the reconciler has: no jobs to replay.
func ModelJudge(p *Profile) Judge {
	pooled := Pooled(p)
	return func(name string, plan *WeekPlan) (Candidate, error) {
		c := Candidate{Name: name, Plan: plan}
		total, slow := 0.0, 0.0
		for i, s := range pooled.Slots {
			c.IdleInstanceHours += float64(plan.Level[i]) * SlotLength.Hours()
			m, j := s.totals()
			if m == 0 {
				continue
			}
			weeks := max(1, m/SlotLength.Minutes())
			total += j / weeks
			slow += s.slowJobs(plan.Level[i], weeks)
		}
		if total > 0 {
			c.SlowShare = slow / total
		}
		if math.IsNaN(c.SlowShare) {
			return c, fmt.Errorf("judging %s: no demand recorded", name)
		}
		return c, nil
	}
}
