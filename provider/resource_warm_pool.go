// runnerpool_warm_pool: a warm pool (hot and stopped instances of a runner class, by schedule)
// written as a configuration item of the state table, where the reconciler reads it on its next
// cycle. Destroying it deletes the item; the reconciler then scales the pool's instances to zero.
package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
)

var (
	_ resource.ResourceWithConfigure      = &WarmPoolResource{}
	_ resource.ResourceWithImportState    = &WarmPoolResource{}
	_ resource.ResourceWithValidateConfig = &WarmPoolResource{}
)

// NewWarmPoolResource returns the runnerpool_warm_pool resource.
func NewWarmPoolResource() resource.Resource {
	return &WarmPoolResource{configItemResource[warmPoolModel, declared.WarmPool, *warmPoolModel]{kind: itemKind[declared.WarmPool]{
		what: "warm pool", get: (*declared.Repository).GetWarmPool, put: (*declared.Repository).PutWarmPool, del: (*declared.Repository).DeleteWarmPool,
	}}}
}

// WarmPoolResource manages a warm pool.
type WarmPoolResource struct {
	configItemResource[warmPoolModel, declared.WarmPool, *warmPoolModel]
}

type warmPoolModel struct {
	ID          types.String    `tfsdk:"id"`
	Table       types.String    `tfsdk:"table"`
	Name        types.String    `tfsdk:"name"`
	RunnerClass types.String    `tfsdk:"runner_class"`
	Environment types.String    `tfsdk:"environment"`
	Timezone    types.String    `tfsdk:"timezone"`
	Schedules   []scheduleModel `tfsdk:"schedule"`
	Autoscale   *autoscaleModel `tfsdk:"autoscale"`
	Version     types.Int64     `tfsdk:"version"`
}

type scheduleModel struct {
	Name       types.String     `tfsdk:"name"`
	Days       types.List       `tfsdk:"days"`
	TimeRanges []timeRangeModel `tfsdk:"time_range"`
	Hot        types.Int64      `tfsdk:"hot"`
	Stopped    types.Int64      `tfsdk:"stopped"`
}

type timeRangeModel struct {
	Start types.String `tfsdk:"start"`
	End   types.String `tfsdk:"end"`
}

// Validators shared by the resource and the schedule data source.
var (
	timezoneValidator = check("timezone", `an IANA timezone name such as "Europe/Paris" or "UTC"`, func(s string) error {
		_, err := schedule.LoadLocation(s)
		return err
	})
	scheduleNameValidator = check("schedule name", "1-63 letters, digits, '-' or '_'", schedule.ValidateName)
	dayValidator          = check("day", "a lower-case English day name (monday ... sunday)", func(s string) error {
		_, err := schedule.ParseDay(s)
		return err
	})
	startValidator = check("schedule time", "a 24-hour HH:MM time from 00:00 to 23:59", func(s string) error {
		_, err := schedule.ParseClock(s, false)
		return err
	})
	endValidator = check("schedule time", "a 24-hour HH:MM time from 00:01 to 24:00", func(s string) error {
		_, err := schedule.ParseClock(s, true)
		return err
	})
	countValidator = func(what string) validator.Int64 {
		return int64Between{what: what, min: 0, max: schedule.MaxCount}
	}
)

func (r *WarmPoolResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_warm_pool"
}

func (r *WarmPoolResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A warm pool: instances of a runner class kept ready for jobs that ask for the pool (`runs-on: ...pool=<name>`), " +
			"either **hot** (running, picked up in seconds) or **stopped** (warmed up, then stopped; started on demand), as many of each " +
			"as the schedule in force says. Stored as a configuration item of the state table, read by the reconciler on its next cycle.",
		Attributes: map[string]schema.Attribute{
			"id":    idAttribute(),
			"table": tableAttribute(true),
			"name": schema.StringAttribute{
				MarkdownDescription: "Pool name, the `pool=` label jobs use: 1-63 lower-case letters, digits, `-` or `_`. A pool named `dependabot` serves Dependabot's jobs.",
				Required:            true,
				// The name is the item's key and the identity of the pool's instances.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{nameValidator("pool name")},
			},
			"runner_class": schema.StringAttribute{
				MarkdownDescription: "Runner class of the pool's instances (`runnerpool_runner_class.<name>.name`). A new class means new " +
					"instances anyway; replacing the pool also plans its destruction before a renamed class's, which the table refuses to " +
					"delete while a pool still names it.",
				Required: true,
				// Replace, not update: a renamed class is destroyed before its successor is created, and
				// the table refuses to delete a class a pool still names. Replacing the pool orders
				// its destruction first.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{nameValidator("runner class name")},
			},
			"environment": schema.StringAttribute{
				MarkdownDescription: "Environment (deployment stack) the pool belongs to when several share a GitHub organization.",
				Optional:            true,
				Validators:          []validator.String{nameValidator("environment")},
			},
			"timezone": schema.StringAttribute{
				MarkdownDescription: "IANA timezone the schedules' days and times are in, such as `Europe/Paris`. Defaults to `UTC`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString("UTC"),
				Validators:          []validator.String{timezoneValidator},
			},
			"version": versionAttribute(),
		},
		Blocks: map[string]schema.Block{
			"autoscale": autoscaleBlock(),
			"schedule": schema.ListNestedBlock{
				MarkdownDescription: "A target number of hot and stopped instances, and when it applies. See **Schedules** above.",
				Validators:          []validator.List{listSize{what: "schedules", min: 0, max: schedule.MaxSchedules}},
				NestedObject: schema.NestedBlockObject{
					Attributes: map[string]schema.Attribute{
						"name": schema.StringAttribute{
							MarkdownDescription: "Schedule name, unique in the pool: 1-63 letters, digits, `-` or `_`.",
							Required:            true,
							Validators:          []validator.String{scheduleNameValidator},
						},
						"days": schema.ListAttribute{
							MarkdownDescription: "Days the schedule applies on: `monday` ... `sunday`. Unset means every day.",
							ElementType:         types.StringType,
							Optional:            true,
							Validators:          []validator.List{listSize{what: "days", min: 1, max: 7}, listEach{check: dayValidator, unique: true}},
						},
						"hot": schema.Int64Attribute{
							MarkdownDescription: fmt.Sprintf("Running instances to keep ready (0-%d).", schedule.MaxCount),
							Required:            true,
							Validators:          []validator.Int64{countValidator("hot count")},
						},
						"stopped": schema.Int64Attribute{
							MarkdownDescription: fmt.Sprintf("Warmed-up, stopped instances to keep ready (0-%d).", schedule.MaxCount),
							Required:            true,
							Validators:          []validator.Int64{countValidator("stopped count")},
						},
					},
					Blocks: map[string]schema.Block{
						"time_range": schema.ListNestedBlock{
							MarkdownDescription: "A wall-clock range in the pool's timezone. Unset means all day.",
							Validators:          []validator.List{listSize{what: "time ranges", min: 0, max: schedule.MaxRanges}},
							NestedObject: schema.NestedBlockObject{
								Attributes: map[string]schema.Attribute{
									"start": schema.StringAttribute{
										MarkdownDescription: "Start, `HH:MM` (00:00-23:59), inclusive.",
										Required:            true,
										Validators:          []validator.String{startValidator},
									},
									"end": schema.StringAttribute{
										MarkdownDescription: "End, `HH:MM` (00:00-24:00), exclusive. Before `start`: the range crosses midnight.",
										Required:            true,
										Validators:          []validator.String{endValidator},
									},
								},
							},
						},
					},
				},
			},
		},
	}
	markReplacement(&resp.Schema)
}

// ValidateConfig checks what single attributes cannot: unique schedule names, one default, a
// default named "default" without a match, and non-empty time ranges. The rules are
// schedule.Spec.Validate's; problems of a single value are left to the attribute validators so
// each is reported once.
func (r *WarmPoolResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	// Dynamic schedule blocks may be unknown as a whole until apply.
	var blocks types.List
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("schedule"), &blocks)...)
	if resp.Diagnostics.HasError() || blocks.IsUnknown() {
		return
	}
	for _, b := range blocks.Elements() {
		if b.IsUnknown() {
			return
		}
		if o, ok := b.(types.Object); ok {
			if tr, ok := o.Attributes()["time_range"].(types.List); ok && tr.IsUnknown() {
				return
			}
		}
	}
	var m warmPoolModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.validateAutoscale(&resp.Diagnostics)
	spec, known, d := m.scheduleSpec(ctx)
	resp.Diagnostics.Append(d...)
	if !known || resp.Diagnostics.HasError() {
		return
	}
	reportScheduleErrors(&resp.Diagnostics, spec, path.Root("schedule"))
}

// reportScheduleErrors adds the cross-value problems of spec on the attribute at fault, under the
// schedule block list at blocks.
func reportScheduleErrors(diags *diag.Diagnostics, spec schedule.Spec, blocks path.Path) {
	var errs schedule.Errors
	if !errors.As(spec.Validate(), &errs) {
		return
	}
	for _, e := range errs {
		if e.Schedule < 0 {
			continue // the timezone and the number of schedules have their attribute validators
		}
		sc := spec.Schedules[e.Schedule]
		at := blocks.AtListIndex(e.Schedule)
		switch e.Field {
		case "":
			diags.AddAttributeError(at, "Conflicting default schedules", e.Err.Error())
		case "name":
			if schedule.ValidateName(sc.Name) == nil {
				diags.AddAttributeError(at.AtName("name"), "Invalid schedule", e.Err.Error())
			}
		case "times":
			if e.Item < 0 {
				continue // the number of time ranges: the block's listSize validator reports it
			}
			tr := sc.Match.Times[e.Item]
			_, se := schedule.ParseClock(tr.Start, false)
			_, ee := schedule.ParseClock(tr.End, true)
			if se == nil && ee == nil {
				diags.AddAttributeError(at.AtName("time_range").AtListIndex(e.Item).AtName(e.Part), "Invalid time range", e.Err.Error())
			}
		}
		// days, hot and stopped problems are single values (duplicates included): attribute validators.
	}
}

// scheduleSpec converts the configured schedules; known is false while any value is unknown.
func (m warmPoolModel) scheduleSpec(ctx context.Context) (spec schedule.Spec, known bool, diags diag.Diagnostics) {
	if m.Timezone.IsUnknown() {
		return spec, false, nil
	}
	spec.Timezone = m.Timezone.ValueString()
	if m.Timezone.IsNull() {
		spec.Timezone = "UTC"
	}
	for _, s := range m.Schedules {
		if s.Name.IsUnknown() || s.Days.IsUnknown() || s.Hot.IsUnknown() || s.Stopped.IsUnknown() {
			return spec, false, nil
		}
		sc := schedule.Schedule{Name: s.Name.ValueString(), Hot: int(s.Hot.ValueInt64()), Stopped: int(s.Stopped.ValueInt64())}
		days, d := stringList(ctx, s.Days)
		diags.Append(d...)
		for _, el := range s.Days.Elements() {
			if el.IsUnknown() {
				return spec, false, diags
			}
		}
		var ranges []schedule.TimeRange
		for _, tr := range s.TimeRanges {
			if tr.Start.IsUnknown() || tr.End.IsUnknown() {
				return spec, false, diags
			}
			ranges = append(ranges, schedule.TimeRange{Start: tr.Start.ValueString(), End: tr.End.ValueString()})
		}
		if len(days) > 0 || len(ranges) > 0 {
			sc.Match = &schedule.Match{Days: days, Times: ranges}
		}
		spec.Schedules = append(spec.Schedules, sc)
	}
	return spec, true, diags
}

func (m *warmPoolModel) key() (string, string)      { return keyOf(m.Table, m.Name) }
func (m *warmPoolModel) storedVersion() types.Int64 { return m.Version }

func (m warmPoolModel) toConfig(ctx context.Context) (declared.WarmPool, diag.Diagnostics) {
	spec, _, diags := m.scheduleSpec(ctx)
	return declared.WarmPool{
		Name: m.Name.ValueString(), RunnerClass: m.RunnerClass.ValueString(), Environment: m.Environment.ValueString(),
		Timezone: spec.Timezone, Schedules: spec.Schedules, Autoscale: m.Autoscale.toConfig(),
	}, diags
}

// fromConfig sets m from a stored pool, keeping null for unset optional values.
func (m *warmPoolModel) fromConfig(table string, p declared.WarmPool, version int64) {
	m.ID = types.StringValue(table + "/" + p.Name)
	m.Table = types.StringValue(table)
	m.Name = types.StringValue(p.Name)
	m.RunnerClass = types.StringValue(p.RunnerClass)
	m.Environment = optionalString(p.Environment, m.Environment)
	tz := p.Timezone
	if tz == "" {
		tz = "UTC"
	}
	m.Timezone = types.StringValue(tz)
	prior := m.Schedules
	m.Schedules = nil
	for i, s := range p.Schedules {
		var was scheduleModel
		if i < len(prior) {
			was = prior[i]
		} else {
			was.Days = types.ListNull(types.StringType)
		}
		sm := scheduleModel{Name: types.StringValue(s.Name), Hot: types.Int64Value(int64(s.Hot)), Stopped: types.Int64Value(int64(s.Stopped))}
		var days []string
		if s.Match != nil {
			days = s.Match.Days
			for _, tr := range s.Match.Times {
				sm.TimeRanges = append(sm.TimeRanges, timeRangeModel{Start: types.StringValue(tr.Start), End: types.StringValue(tr.End)})
			}
		}
		sm.Days = listValue(days, was.Days)
		m.Schedules = append(m.Schedules, sm)
	}
	m.Autoscale = autoscaleValue(p.Autoscale, m.Autoscale)
	m.Version = types.Int64Value(version)
}
