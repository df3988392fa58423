package simulate

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// smallWeek is a day of four repositories' jobs (the generator's shape, small enough to search).
func smallWeek(seed uint64) []jobtrace.Job {
	p := jobtrace.DefaultParams()
	p.Days, p.Zones = 1, p.Zones[:1]
	p.Zones[0].Repos = 4
	return jobtrace.Generate(p, seed)
}

// TestFixedPlanIsTheSchedule: the autoscaler following a fixed schedule as its week plan (the
// plan's own steps down taken at once, the same lead, no stopped buffer under a p95 goal) replays
// exactly as the schedule: the hindsight schedule is one of the plans it can choose.
func TestFixedPlanIsTheSchedule(t *testing.T) {
	t.Parallel()
	jobs := smallWeek(3)
	f, fixed, err := SearchFixed(jobs, model, 5*time.Second, 0.95, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	a := &Autoscaler{Plan: FixedPlan(f), Loc: time.UTC, Base: autoscale.Input{
		Starts: model.Starts, Prices: model.Prices, Goal: 5 * time.Second, Interval: model.Interval, Cooldown: 2 * time.Minute,
	}}
	r, err := Run(jobs, model, a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.IdleInstanceHours != fixed.IdleInstanceHours || r.StoppedInstanceHours != 0 || r.P95 != fixed.P95 {
		t.Errorf("the autoscaler on the schedule's plan: idle %.2f h, stopped %.2f h, p95 %s; the schedule: idle %.2f h, p95 %s",
			r.IdleInstanceHours, r.StoppedInstanceHours, r.P95, fixed.IdleInstanceHours, fixed.P95)
	}
}

// TestPlanNeverCostsMoreThanHindsight: with the week as its own history the hindsight schedule is
// feasible, so the chosen plan meets the goal at no more idle hours than the schedule.
func TestPlanNeverCostsMoreThanHindsight(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		seed uint64
		goal time.Duration
	}{{"seed 3, goal 5 s", 3, 5 * time.Second}, {"seed 4, goal 5 s", 4, 5 * time.Second}, {"seed 5, goal 20 s", 5, 20 * time.Second}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Compare(Options{Jobs: smallWeek(tt.seed), Model: model, Goal: tt.goal, Percentile: 0.95, Loc: time.UTC})
			if err != nil {
				t.Fatal(err)
			}
			if !Meets(c.Autoscaler.QueueTimes(), tt.goal, 0.95) {
				t.Errorf("the autoscaler misses the goal: p95 %s", c.Autoscaler.P95)
			}
			if c.Autoscaler.IdleInstanceHours > c.Fixed.IdleInstanceHours {
				t.Errorf("the autoscaler idles %.1f instance-hours, the hindsight schedule %.1f (plan: %s)",
					c.Autoscaler.IdleInstanceHours, c.Fixed.IdleInstanceHours, c.Choice.Chosen.Name)
			}
			if len(c.Choice.Candidates) != 2 {
				t.Errorf("candidates %d, want the week plan and the hindsight schedule", len(c.Choice.Candidates))
			}
		})
	}
}
