// Instance caps at plan: a runner class's max_instances must be positive and hold the warm pools of
// the class, and a warm pool's schedules must fit its class's max_instances. The pools and classes
// are read from the state table when it exists already; a first apply that creates the table is
// checked by the reconciler at start-up and by convergence (which never creates past a cap).
package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

var (
	_ resource.ResourceWithModifyPlan = &RunnerClassResource{}
	_ resource.ResourceWithModifyPlan = &WarmPoolResource{}
)

// maxCapInstances bounds max_instances to catch typos.
const maxCapInstances = 100000

func maxInstancesAttribute() schema.Int64Attribute {
	return schema.Int64Attribute{
		MarkdownDescription: "Cap on the class's own instances (warm, idle, running and being created), within the " +
			"reconciler's deployment-wide `--max-instances`. A provision that would create past it is refused " +
			"(HTTP 429 `quota_exceeded`) and warm-pool convergence creates no further. Must be at least the sum of the " +
			"largest targets of the class's warm pools (checked at plan against the pools in the table). Absent: no cap of its own.",
		Optional:   true,
		Validators: []validator.Int64{int64Between{what: "max instances", min: 1, max: maxCapInstances}},
	}
}

// ModifyPlan refuses a max_instances below what the class's warm pools in the table keep.
func (r *RunnerClassResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	r.keepStoredVersion(ctx, req, resp)
	if req.Plan.Raw.IsNull() || r.c == nil {
		return
	}
	var m runnerClassModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.MaxInstances.IsNull() || m.MaxInstances.IsUnknown() || m.Table.IsUnknown() || m.Name.IsUnknown() {
		return
	}
	snap, err := r.c.repo(m.Table.ValueString()).Load(ctx)
	if err != nil {
		return // no table yet, or not readable: the reconciler checks at start-up
	}
	name := m.Name.ValueString()
	classes := map[string]declared.RunnerClass{name: {Name: name, MaxInstances: int(m.MaxInstances.ValueInt64())}}
	if errs := declared.CheckCaps(0, classes, snap.Pools()); len(errs) > 0 {
		resp.Diagnostics.AddAttributeError(path.Root("max_instances"), "Instance cap below the warm pools' targets", errors.Join(errs...).Error()+
			"\n\nRaise max_instances, or lower the targets of the class's warm pools first.")
	}
}

// ModifyPlan refuses schedules that would keep more instances than the pool's runner class caps,
// with the class's other warm pools in the table.
func (r *WarmPoolResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	r.keepStoredVersion(ctx, req, resp)
	if req.Plan.Raw.IsNull() || r.c == nil {
		return
	}
	var m warmPoolModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Table.IsUnknown() || m.Name.IsUnknown() || m.RunnerClass.IsUnknown() {
		return
	}
	planned, d := m.toConfig(ctx)
	if d.HasError() {
		return // the schedules are not all known yet
	}
	snap, err := r.c.repo(m.Table.ValueString()).Load(ctx)
	if err != nil {
		return
	}
	pools := []declared.WarmPool{planned}
	for _, p := range snap.Pools() {
		if p.Name != planned.Name {
			pools = append(pools, p)
		}
	}
	if errs := declared.CheckCaps(0, snap.RunnerClasses, pools); len(errs) > 0 {
		resp.Diagnostics.AddAttributeError(path.Root("schedule"), "Warm pool above its runner class's instance cap", errors.Join(errs...).Error()+
			"\n\nLower the pool's targets, or raise the runner class's max_instances first.")
	}
}
