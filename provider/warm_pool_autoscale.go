// The autoscale block of runnerpool_warm_pool: a queue-time goal, a pool-wide minimum and an
// optional budget, stored with the pool (the schedules' counts become each window's maxima). The
// reconciler's convergence loop sizes the pool by the policy within them.
package provider

import (
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
)

type autoscaleModel struct {
	QueueTimeP95  types.String  `tfsdk:"queue_time_p95"`
	QueueTimeP99  types.String  `tfsdk:"queue_time_p99"`
	MinHot        types.Int64   `tfsdk:"min_hot"`
	MinStopped    types.Int64   `tfsdk:"min_stopped"`
	BudgetPerHour types.Float64 `tfsdk:"budget_per_hour"`
}

var queueGoalValidator = check("queue_time_p95", fmt.Sprintf("a Go duration from %s to %s, such as \"5s\"", declared.MinQueueGoal, declared.MaxQueueGoal), func(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	return declared.ValidateDuration("queue_time_p95", d, declared.MinQueueGoal, declared.MaxQueueGoal)
})

var tailGoalValidator = check("queue_time_p99", fmt.Sprintf("a Go duration from %s to %s, such as \"30s\"", declared.MinQueueGoal, declared.MaxQueueGoal), func(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	return declared.ValidateDuration("queue_time_p99", d, declared.MinQueueGoal, declared.MaxQueueGoal)
})

func autoscaleBlock() schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "A queue-time goal for the pool (95 % of its jobs start within `queue_time_p95`), a minimum and an optional " +
			"hourly budget. With the block the reconciler sizes the pool itself: each convergence pass it records the jobs that arrived " +
			"for the pool (per quarter-hour of the week, in the state table) and keeps the hot and stopped counts the autoscaler " +
			"decides from that demand and the live signals, between the minimum and each `schedule` window's `hot` and `stopped` " +
			"(with this block, the window's **maxima**). A new pool has no demand recorded yet, so it starts at its minimum. " +
			"`runnerpool status` and the metrics show each decision and its reasons; `runnerpool simulate` shows what the policy " +
			"would do with a job history; see " +
			"[docs/autoscale.md](https://github.com/runnerpool/terraform-provider-runnerpool/blob/main/docs/autoscale.md).",
		Attributes: map[string]schema.Attribute{
			"queue_time_p95": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("The goal: 95 %% of the pool's jobs start within this duration (%s to %s), such as `5s`.", declared.MinQueueGoal, declared.MaxQueueGoal),
				// Required inside the block; the block itself is optional.
				Optional:      true,
				Validators:    []validator.String{queueGoalValidator},
				PlanModifiers: []planmodifier.String{durationByValue{}},
			},
			"queue_time_p99": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("An optional tail goal: 99 %% of the pool's jobs start within this duration (%s to %s, at least `queue_time_p95`), such as `30s`. "+
					"Only with it does the policy keep stopped instances for the jobs beyond the p95 goal's share (where a stopped start meets it); "+
					"without it the jobs the p95 goal lets be slow are left to cold starts. Absent: none. "+updatedInPlace, declared.MinQueueGoal, declared.MaxQueueGoal),
				Optional:      true,
				Validators:    []validator.String{tailGoalValidator},
				PlanModifiers: []planmodifier.String{durationByValue{}},
			},
			"min_hot": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Hot instances kept whatever the demand (0-%d, default 0); at most every window's `hot`.", schedule.MaxCount),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(0),
				Validators:          []validator.Int64{countValidator("min_hot")},
			},
			"min_stopped": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Stopped instances kept whatever the demand (0-%d, default 0); at most every window's `stopped`.", schedule.MaxCount),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(0),
				Validators:          []validator.Int64{countValidator("min_stopped")},
			},
			"budget_per_hour": schema.Float64Attribute{
				MarkdownDescription: "Most USD per hour the pool's idle capacity may cost (hot instances at their price, stopped ones at their volume's). " +
					"When the goal needs more, the policy keeps to the budget and reports the conflict (`runnerpool simulate` counts them). Absent: no budget. " + updatedInPlace,
				Optional: true,
			},
		},
	}
}

// validateAutoscale reports what the attribute validators cannot: a missing goal, a budget out of
// range and minima above a window's maxima.
func (m warmPoolModel) validateAutoscale(diags *diag.Diagnostics) {
	a := m.Autoscale
	if a == nil {
		return
	}
	at := path.Root("autoscale")
	if a.QueueTimeP95.IsNull() {
		diags.AddAttributeError(at.AtName("queue_time_p95"), "Missing queue-time goal", "An autoscale block needs queue_time_p95, such as \"5s\".")
	}
	p95, err95 := time.ParseDuration(a.QueueTimeP95.ValueString())
	p99, err99 := time.ParseDuration(a.QueueTimeP99.ValueString())
	if !a.QueueTimeP99.IsNull() && !a.QueueTimeP99.IsUnknown() && !a.QueueTimeP95.IsUnknown() && err95 == nil && err99 == nil && p99 < p95 {
		diags.AddAttributeError(at.AtName("queue_time_p99"), "Tail goal below the queue-time goal",
			fmt.Sprintf("queue_time_p99 %s is below queue_time_p95 %s: the 99th percentile cannot be shorter than the 95th.", p99, p95))
	}
	if b := a.BudgetPerHour; !b.IsNull() && !b.IsUnknown() && (b.ValueFloat64() <= 0 || b.ValueFloat64() > declared.MaxBudgetHour) {
		diags.AddAttributeError(at.AtName("budget_per_hour"), "Invalid budget", fmt.Sprintf("budget_per_hour must be above 0 and at most %v USD; remove it for no budget.", declared.MaxBudgetHour))
	}
	for i, s := range m.Schedules {
		for _, c := range []struct {
			min, max types.Int64
			name     string
		}{{a.MinHot, s.Hot, "min_hot"}, {a.MinStopped, s.Stopped, "min_stopped"}} {
			if c.min.IsNull() || c.min.IsUnknown() || c.max.IsUnknown() || c.min.ValueInt64() <= c.max.ValueInt64() {
				continue
			}
			diags.AddAttributeError(at.AtName(c.name), "Autoscale minimum above a schedule's maximum",
				fmt.Sprintf("%s %d is above schedule %d's count %d: with autoscale, each schedule's hot and stopped are its window's maxima.", c.name, c.min.ValueInt64(), i, c.max.ValueInt64()))
		}
	}
}

func (a *autoscaleModel) toConfig() *declared.Autoscale {
	if a == nil {
		return nil
	}
	d, _ := time.ParseDuration(a.QueueTimeP95.ValueString()) // validated at plan
	var p99 time.Duration
	if !a.QueueTimeP99.IsNull() {
		p99, _ = time.ParseDuration(a.QueueTimeP99.ValueString()) // validated at plan
	}
	return &declared.Autoscale{
		QueueTimeP95: declared.Duration(d), QueueTimeP99: declared.Duration(p99), MinHot: int(a.MinHot.ValueInt64()), MinStopped: int(a.MinStopped.ValueInt64()),
		BudgetPerHour: a.BudgetPerHour.ValueFloat64(),
	}
}

// autoscaleValue is the block of a stored pool, keeping the prior spelling of an equal goal.
func autoscaleValue(a *declared.Autoscale, prior *autoscaleModel) *autoscaleModel {
	if a == nil {
		return nil
	}
	m := &autoscaleModel{MinHot: types.Int64Value(int64(a.MinHot)), MinStopped: types.Int64Value(int64(a.MinStopped)), BudgetPerHour: types.Float64Null()}
	var was types.String
	if prior != nil {
		was = prior.QueueTimeP95
	}
	m.QueueTimeP95 = durationValue(a.QueueTimeP95.Std(), was)
	m.QueueTimeP99 = types.StringNull()
	if a.QueueTimeP99 > 0 {
		var wasP99 types.String
		if prior != nil {
			wasP99 = prior.QueueTimeP99
		}
		m.QueueTimeP99 = durationValue(a.QueueTimeP99.Std(), wasP99)
	}
	if a.BudgetPerHour > 0 {
		m.BudgetPerHour = types.Float64Value(a.BudgetPerHour)
	}
	return m
}
