// runnerpool_schedule: which schedule of a warm pool, and so how many hot and stopped instances,
// are in force at a given time, evaluated with the same code the reconciler uses (internal/schedule).
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

var _ datasource.DataSourceWithConfigure = &ScheduleDataSource{}

// NewScheduleDataSource returns the runnerpool_schedule data source.
func NewScheduleDataSource() datasource.DataSource { return &ScheduleDataSource{} }

// ScheduleDataSource evaluates a warm pool's schedules.
type ScheduleDataSource struct{ c *clients }

type scheduleDataModel struct {
	Table        types.String `tfsdk:"table"`
	Pool         types.String `tfsdk:"pool"`
	Time         types.String `tfsdk:"time"`
	Schedule     types.String `tfsdk:"schedule"`
	Default      types.Bool   `tfsdk:"default"`
	Hot          types.Int64  `tfsdk:"hot"`
	Stopped      types.Int64  `tfsdk:"stopped"`
	Timezone     types.String `tfsdk:"timezone"`
	LocalTime    types.String `tfsdk:"local_time"`
	NextChange   types.String `tfsdk:"next_change"`
	NextSchedule types.String `tfsdk:"next_schedule"`
}

func rfc3339(s string) error {
	if _, err := time.Parse(time.RFC3339, s); err != nil {
		return fmt.Errorf("%q is not an RFC 3339 time such as 2025-03-30T08:00:00+02:00 or 2025-03-30T06:00:00Z", s)
	}
	return nil
}

func (d *ScheduleDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_schedule"
}

func (d *ScheduleDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Which schedule of a warm pool is in force at a given time, with its hot and stopped counts, evaluated " +
			"exactly as the reconciler does (the pool's timezone, daylight saving time, midnight-crossing ranges, first match wins, " +
			"then the default). The pool is read from the state table, so this shows what the reconciler will do, not only what " +
			"the configuration says.",
		Attributes: map[string]schema.Attribute{
			"table": schema.StringAttribute{
				MarkdownDescription: "State table of the pool.",
				Required:            true,
				Validators:          []validator.String{tableNameValidator()},
			},
			"pool": schema.StringAttribute{
				MarkdownDescription: "Warm pool name.",
				Required:            true,
				Validators:          []validator.String{nameValidator("pool name")},
			},
			"time": schema.StringAttribute{
				MarkdownDescription: "The time to evaluate, RFC 3339 (`2025-03-30T08:00:00+02:00`). Defaults to now.",
				Optional:            true,
				Validators:          []validator.String{check("time", "an RFC 3339 time", rfc3339)},
			},
			"schedule": schema.StringAttribute{
				MarkdownDescription: "Name of the schedule in force; empty when none matches and the pool has no default schedule.",
				Computed:            true,
			},
			"default": schema.BoolAttribute{
				MarkdownDescription: "Whether the default schedule (or, without one, nothing) applies.",
				Computed:            true,
			},
			"hot": schema.Int64Attribute{
				MarkdownDescription: "Hot instances the pool holds at that time.",
				Computed:            true,
			},
			"stopped": schema.Int64Attribute{
				MarkdownDescription: "Stopped instances the pool holds at that time.",
				Computed:            true,
			},
			"timezone": schema.StringAttribute{
				MarkdownDescription: "The pool's timezone.",
				Computed:            true,
			},
			"local_time": schema.StringAttribute{
				MarkdownDescription: "The time evaluated, in the pool's timezone (RFC 3339).",
				Computed:            true,
			},
			"next_change": schema.StringAttribute{
				MarkdownDescription: "When the target next changes (RFC 3339, pool timezone), within the following 8 days; null if never.",
				Computed:            true,
			},
			"next_schedule": schema.StringAttribute{
				MarkdownDescription: "The schedule in force from `next_change`; null if the target never changes.",
				Computed:            true,
			},
		},
	}
}

func (d *ScheduleDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.c = providerData(req.ProviderData, &resp.Diagnostics)
}

func (d *ScheduleDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m scheduleDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(d.c, &resp.Diagnostics) {
		return
	}
	at := d.c.now()
	if !m.Time.IsNull() {
		var err error
		if at, err = time.Parse(time.RFC3339, m.Time.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("time"), "Invalid time", err.Error())
			return
		}
	}
	table, name := m.Table.ValueString(), m.Pool.ValueString()
	p, _, err := d.c.repo(table).GetWarmPool(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		resp.Diagnostics.AddAttributeError(path.Root("pool"), "Warm pool not found",
			fmt.Sprintf("Table %s has no warm pool %q (or the table does not exist).\n\nOriginal Error: %s", table, name, err))
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, "Cannot read the warm pool", fmt.Sprintf("Reading warm pool %q from table %s failed.", name, table), err)
		return
	}
	cal, err := p.Calendar()
	if err != nil {
		addError(&resp.Diagnostics, "Invalid warm pool", fmt.Sprintf("The stored warm pool %q has invalid schedules.", name), err)
		return
	}
	target := cal.At(at)
	m.Schedule = types.StringValue(target.Schedule)
	m.Default = types.BoolValue(target.Default)
	m.Hot = types.Int64Value(int64(target.Hot))
	m.Stopped = types.Int64Value(int64(target.Stopped))
	m.Timezone = types.StringValue(cal.Location().String())
	m.LocalTime = types.StringValue(at.In(cal.Location()).Format(time.RFC3339))
	m.NextChange, m.NextSchedule = types.StringNull(), types.StringNull()
	if next, nt := cal.NextChange(at); !next.IsZero() {
		m.NextChange = types.StringValue(next.In(cal.Location()).Format(time.RFC3339))
		m.NextSchedule = types.StringValue(nt.Schedule)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}
