// runnerpool_scale_set: a GitHub runner scale set that feeds a warm pool with jobs through the
// Actions service's message queue (no webhook), written as a configuration item of the state table.
// The reconciler creates and updates the scale set at GitHub and holds its message session.
package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

var (
	_ resource.ResourceWithConfigure   = &ScaleSetResource{}
	_ resource.ResourceWithImportState = &ScaleSetResource{}
)

// NewScaleSetResource returns the runnerpool_scale_set resource.
func NewScaleSetResource() resource.Resource {
	return &ScaleSetResource{configItemResource[scaleSetModel, declared.ScaleSet, *scaleSetModel]{kind: itemKind[declared.ScaleSet]{
		what: "scale set", get: (*declared.Repository).GetScaleSet, put: (*declared.Repository).PutScaleSet, del: (*declared.Repository).DeleteScaleSet,
	}}}
}

// ScaleSetResource manages a scale set item. Deleting it removes the item: the listener lets go of
// the session on its next resync, and the reconciler deletes the scale set at GitHub once no
// instance of the deployment still runs one of its jobs (reconciler/scalesets' registry), whichever
// replica notices first.
type ScaleSetResource struct {
	configItemResource[scaleSetModel, declared.ScaleSet, *scaleSetModel]
}

type scaleSetModel struct {
	ID          types.String `tfsdk:"id"`
	Table       types.String `tfsdk:"table"`
	Name        types.String `tfsdk:"name"`
	WarmPool    types.String `tfsdk:"warm_pool"`
	Scope       types.String `tfsdk:"scope"`
	RunnerGroup types.String `tfsdk:"runner_group"`
	Labels      types.List   `tfsdk:"labels"`
	MaxRunners  types.Int64  `tfsdk:"max_runners"`
	Version     types.Int64  `tfsdk:"version"`
}

func (r *ScaleSetResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_scale_set"
}

func (r *ScaleSetResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A GitHub Actions **runner scale set** whose jobs a warm pool serves: workflows use `runs-on: <name>`, and the " +
			"reconciler learns of their jobs by long-polling the Actions service (the protocol of ARC's scale sets) instead of receiving " +
			"`workflow_job` webhooks, so it needs no public endpoint and waits for no webhook. The reconciler creates and updates the " +
			"scale set at GitHub (name, runner group, labels) with its own GitHub App or token, holds its message session (one replica " +
			"at a time, under a lease in the state table), and serves each job from the warm pool: hot instances first, then stopped " +
			"ones, then cold starts, each with a just-in-time runner of the scale set. Destroying the resource deletes the scale set at GitHub once " +
			"no instance still runs one of its jobs (jobs still queued for it are then left without a runner). Needs GitHub.com or GHES 3.9 and later. " +
			"Stored as a configuration item of the state table.",
		Attributes: map[string]schema.Attribute{
			"id":    idAttribute(),
			"table": tableAttribute(true),
			"name": schema.StringAttribute{
				MarkdownDescription: "Scale set name at GitHub, and the label workflows use (`runs-on: <name>`): 1-63 lower-case letters, digits, `-` or `_`.",
				Required:            true,
				// The name is the item's key, the scale set's identity at GitHub and its lease.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{nameValidator("scale set name")},
			},
			"warm_pool": schema.StringAttribute{
				MarkdownDescription: "Warm pool whose instances serve the scale set's jobs (`runnerpool_warm_pool.<name>.name`).",
				Required:            true,
				Validators:          []validator.String{nameValidator("warm pool name")},
			},
			"scope": schema.StringAttribute{
				MarkdownDescription: "Where the scale set lives: an organization (`acme`) or a repository (`acme/app`). It must be on the reconciler's allow-list; an organization also needs organization runners allowed.",
				Required:            true,
				// A scale set cannot move between organizations or repositories.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{check("scope", "OWNER or OWNER/REPO", declared.ValidateScope)},
			},
			"runner_group": schema.StringAttribute{
				MarkdownDescription: "Runner group of an organization scale set. Unset: the default group. Changing it moves the scale set to the new group at GitHub (same scale set, same queued jobs); it does not force replacement.",
				Optional:            true,
			},
			"labels": schema.ListAttribute{
				MarkdownDescription: "More labels of the scale set; its name is always its first label. github.com matches a scale set by any of its labels; GHES does from 3.18 with the `DistributedTask.AllowRunnerScaleSetCustomLabels` feature flag (on by default from 3.21) and silently drops the extra labels without it.",
				ElementType:         types.StringType,
				Optional:            true,
				Validators: []validator.List{
					listSize{what: "labels", min: 1, max: declared.MaxLabels},
					listEach{check: check("label", "a label without spaces, commas or quotes", declared.ValidateLabel), unique: true},
				},
			},
			"max_runners": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Most runners the scale set asks for at once (1-%d, default 10). The reconciler tells GitHub this minus the instances already serving the scale set (`X-ScaleSetMaxCapacity`), so GitHub offers no more jobs than the pool can take. Under instance caps (the deployment's `max_instances` or the runner class's), it announces no more than the pool's idle instances plus the room the caps leave.", declared.MaxScaleSetRunners),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(10),
				Validators:          []validator.Int64{int64Between{what: "max_runners", min: 1, max: declared.MaxScaleSetRunners}},
			},
			"version": versionAttribute(),
		},
	}
}

func (m *scaleSetModel) key() (string, string)      { return keyOf(m.Table, m.Name) }
func (m *scaleSetModel) storedVersion() types.Int64 { return m.Version }

func (m scaleSetModel) toConfig(ctx context.Context) (declared.ScaleSet, diag.Diagnostics) {
	labels, diags := stringList(ctx, m.Labels)
	return declared.ScaleSet{
		Name: m.Name.ValueString(), WarmPool: m.WarmPool.ValueString(), Scope: m.Scope.ValueString(),
		RunnerGroup: m.RunnerGroup.ValueString(), Labels: labels, MaxRunners: int(m.MaxRunners.ValueInt64()),
	}, diags
}

func (m *scaleSetModel) fromConfig(table string, s declared.ScaleSet, version int64) {
	m.ID = types.StringValue(table + "/" + s.Name)
	m.Table = types.StringValue(table)
	m.Name = types.StringValue(s.Name)
	m.WarmPool = types.StringValue(s.WarmPool)
	m.Scope = types.StringValue(s.Scope)
	m.RunnerGroup = optionalString(s.RunnerGroup, m.RunnerGroup)
	m.Labels = listValue(s.Labels, m.Labels)
	m.MaxRunners = types.Int64Value(int64(s.MaxRunners))
	m.Version = types.Int64Value(version)
}
