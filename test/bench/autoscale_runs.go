// The autoscale phase on the committed week whose jobs carry their runs (jobtrace.RunsParams: half
// the matrix workflows, by assumption, run a setup job their matrix needs): what warming a run's
// matrix when its first job is queued buys, beside the same autoscaler ignoring runs.
package bench

import (
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/simulate"
)

// autoscaleRunsFigures are the figures of autoscaleSimulatedRuns.
var autoscaleRunsFigures = []string{"autoscale_runs_queue_p95_s", "autoscale_runs_idle_instance_hours", "autoscale_runs_ignored_queue_p95_s",
	"fixed_schedule_runs_idle_instance_hours", "autoscale_runs_idle_ratio_vs_fixed", "autoscale_runs_ignored_idle_ratio_vs_fixed"}

func (h *harness) autoscaleSimulatedRuns(res *Result) error {
	week, before := committedWeeksOf(jobtrace.RunsParams())
	t := time.Now()
	c, err := simulate.Compare(simulate.Options{Jobs: week, History: before, Model: autoscaleModel, Goal: autoscaleGoal, Percentile: 0.95, Loc: time.UTC})
	if err == nil && c.RunsIgnored == nil {
		err = fmt.Errorf("the week before has no fan-out to learn")
	}
	if err != nil {
		for _, n := range autoscaleRunsFigures {
			res.add(Figure{Name: n, Missing: err.Error()})
		}
		return err
	}
	h.say("  the week with runs: three policies over %d jobs simulated in %s", len(week), time.Since(t).Round(time.Millisecond))
	how := fmt.Sprintf("simulated time: the committed week with runs (%d jobs, internal/jobtrace RunsParams seed 1: half the matrix workflows, by assumption, run a setup job their matrix needs), the model of autoscale_queue_p95_s, goal p95 <= 5 s", len(week))
	res.add(Figure{Name: "autoscale_runs_queue_p95_s", Value: c.Autoscaler.P95.Seconds(), Unit: "s", How: how + "; the autoscaler warms a learned workflow's fan-out when its run's first job is queued"})
	res.add(Figure{Name: "autoscale_runs_idle_instance_hours", Value: round1(c.Autoscaler.IdleInstanceHours), Unit: "instance-h", How: how})
	res.add(Figure{Name: "autoscale_runs_ignored_queue_p95_s", Value: c.RunsIgnored.P95.Seconds(), Unit: "s", How: how + "; the same autoscaler ignoring runs"})
	res.add(Figure{Name: "fixed_schedule_runs_idle_instance_hours", Value: round1(c.Fixed.IdleInstanceHours), Unit: "instance-h", How: how + "; the cheapest fixed schedule meeting the goal, searched on the week itself (hindsight)"})
	res.add(Figure{Name: "autoscale_runs_idle_ratio_vs_fixed", Value: round2(c.IdleRatio()), Unit: "ratio",
		How: "autoscale_runs_idle_instance_hours / fixed_schedule_runs_idle_instance_hours; the issue's goal (<= 0.5 with p95 <= 5 s) applied to this week"})
	res.add(Figure{Name: "autoscale_runs_ignored_idle_ratio_vs_fixed", Value: round2(c.RunsIgnored.IdleInstanceHours / c.Fixed.IdleInstanceHours), Unit: "ratio", How: "the same, the autoscaler ignoring runs"})
	if c.IdleRatio() > 0.5 || c.Autoscaler.P95 > autoscaleGoal {
		res.note("autoscale, the week with runs: the goal is missed (p95 %s, idle ratio %.2f). The matrix workflows without a setup job still fan out with no warning; docs/autoscale.md shows the figure by the share of matrix workflows that build first.",
			c.Autoscaler.P95, c.IdleRatio())
	}
	return nil
}
