// runnerpool_state_table: the DynamoDB table holding instance records, signals, configuration
// items and leases, created with the product's schema (store.TableDefinition) so provider and
// reconciler always agree on keys and indexes.
package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
)

var (
	_ resource.ResourceWithConfigure        = &StateTableResource{}
	_ resource.ResourceWithImportState      = &StateTableResource{}
	_ resource.ResourceWithConfigValidators = &StateTableResource{}
)

// NewStateTableResource returns the runnerpool_state_table resource.
func NewStateTableResource() resource.Resource { return &StateTableResource{} }

// StateTableResource manages a state table.
type StateTableResource struct{ c *clients }

type stateTableModel struct {
	ID                  types.String `tfsdk:"id"`
	Name                types.String `tfsdk:"name"`
	ARN                 types.String `tfsdk:"arn"`
	BillingMode         types.String `tfsdk:"billing_mode"`
	ReadCapacity        types.Int64  `tfsdk:"read_capacity"`
	WriteCapacity       types.Int64  `tfsdk:"write_capacity"`
	PointInTimeRecovery types.Bool   `tfsdk:"point_in_time_recovery"`
	DeletionProtection  types.Bool   `tfsdk:"deletion_protection"`
	TTLEnabled          types.Bool   `tfsdk:"ttl_enabled"`
	TTLAttribute        types.String `tfsdk:"ttl_attribute"`
	ForceDestroy        types.Bool   `tfsdk:"force_destroy"`
	Tags                types.Map    `tfsdk:"tags"`
}

const (
	billingPayPerRequest = string(ddbtypes.BillingModePayPerRequest)
	billingProvisioned   = string(ddbtypes.BillingModeProvisioned)
	managedTagPrefix     = "runnerpool:"
	// tableWait bounds waiting for a table to become active or disappear; real tables take seconds
	// to a few minutes (indexes), DynamoDB Local is immediate.
	tableWait = 10 * time.Minute
)

var tableNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

func tableNameValidator() validator.String {
	return matches("table name", "3-255 letters, digits, '_', '.' or '-'", tableNameRE)
}

func (r *StateTableResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_state_table"
}

func (r *StateTableResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The DynamoDB table runnerpool keeps its state in: instance records and their state machine, worker signals, " +
			"per-claim credentials, runner classes and warm pools, and leader leases. Its keys and its four indexes (`" + store.IndexByState +
			"`, `" + store.IndexByRun + "`, `" + store.IndexByPool + "`, `" + store.IndexByFit + "`: the records of one runner class and scope " +
			"in one state, so selection reads what fits a request and never the whole pool) are the product's and not configurable. " +
			"A table created before `" + store.IndexByFit + "` existed is reported at plan; until the index is added the reconciler's " +
			"selection lists by state, as it did before.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "The table name.",
				Computed:            true,
				// The id is the name, which never changes without a replacement.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				MarkdownDescription: "Table name: 3-255 letters, digits, `_`, `.` or `-`.",
				Required:            true,
				// DynamoDB cannot rename a table.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{tableNameValidator()},
			},
			"arn": schema.StringAttribute{
				MarkdownDescription: "The table ARN (for IAM policies).",
				Computed:            true,
				// The ARN is fixed for the life of the table.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"billing_mode": schema.StringAttribute{
				MarkdownDescription: "`PAY_PER_REQUEST` (default: on demand, what a bursty CI load wants) or `PROVISIONED` (then `read_capacity` and `write_capacity` apply to the table and every index).",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(billingPayPerRequest),
				Validators:          []validator.String{oneOf("billing mode", billingPayPerRequest, billingProvisioned)},
			},
			"read_capacity": schema.Int64Attribute{
				MarkdownDescription: "Read capacity units of the table and of each index. Required with `PROVISIONED`, not allowed otherwise.",
				Optional:            true,
				Validators:          []validator.Int64{int64Between{what: "read capacity", min: 1, max: 40000}},
			},
			"write_capacity": schema.Int64Attribute{
				MarkdownDescription: "Write capacity units of the table and of each index. Required with `PROVISIONED`, not allowed otherwise.",
				Optional:            true,
				Validators:          []validator.Int64{int64Between{what: "write capacity", min: 1, max: 40000}},
			},
			"point_in_time_recovery": schema.BoolAttribute{
				MarkdownDescription: "Continuous backups with point-in-time recovery. Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
			},
			"deletion_protection": schema.BoolAttribute{
				MarkdownDescription: "DynamoDB deletion protection: while on, the table cannot be deleted (not even by `terraform destroy`). Defaults to `false`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
			},
			"ttl_enabled": schema.BoolAttribute{
				MarkdownDescription: "Time to live on `ttl_attribute`, which removes terminated instance records after their audit period and spent credentials. Defaults to `true`.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(true),
			},
			"ttl_attribute": schema.StringAttribute{
				MarkdownDescription: "The attribute time to live reads (fixed by the product).",
				Computed:            true,
				Default:             stringdefault.StaticString(store.TTLAttribute),
			},
			"force_destroy": schema.BoolAttribute{
				MarkdownDescription: "Destroy the table even when it still holds live instance records. Defaults to `false`. Only read by the provider.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(false),
			},
			"tags": schema.MapAttribute{
				MarkdownDescription: "Tags of the table. The provider adds `" + tags.Deployment + "` when the provider has a `deployment_id`; keys starting with `runnerpool:` are reserved.",
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          []validator.Map{tagsCheck{}},
			},
		},
	}
	markReplacement(&resp.Schema)
}

// ConfigValidators ties the capacities to the billing mode.
func (r *StateTableResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{capacityValidator{}}
}

type capacityValidator struct{}

func (capacityValidator) Description(context.Context) string {
	return "read_capacity and write_capacity are required with PROVISIONED and not allowed with PAY_PER_REQUEST"
}
func (v capacityValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (capacityValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m stateTableModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.BillingMode.IsUnknown() {
		return
	}
	provisioned := m.BillingMode.ValueString() == billingProvisioned
	for name, v := range map[string]types.Int64{"read_capacity": m.ReadCapacity, "write_capacity": m.WriteCapacity} {
		switch {
		case provisioned && v.IsNull():
			resp.Diagnostics.AddAttributeError(path.Root(name), "Missing capacity", name+" is required when billing_mode is PROVISIONED.")
		case !provisioned && !v.IsNull():
			resp.Diagnostics.AddAttributeError(path.Root(name), "Capacity without PROVISIONED",
				name+" applies only when billing_mode is PROVISIONED; remove it or set billing_mode = \"PROVISIONED\".")
		}
	}
}

func (r *StateTableResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.c = providerData(req.ProviderData, &resp.Diagnostics)
}

func (m stateTableModel) throughput() *ddbtypes.ProvisionedThroughput {
	if m.BillingMode.ValueString() != billingProvisioned {
		return nil
	}
	return &ddbtypes.ProvisionedThroughput{
		ReadCapacityUnits: aws.Int64(m.ReadCapacity.ValueInt64()), WriteCapacityUnits: aws.Int64(m.WriteCapacity.ValueInt64()),
	}
}

func (r *StateTableResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan stateTableModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := plan.Name.ValueString()
	in := store.TableDefinition(name)
	in.BillingMode = ddbtypes.BillingMode(plan.BillingMode.ValueString())
	if tp := plan.throughput(); tp != nil {
		in.ProvisionedThroughput = tp
		for i := range in.GlobalSecondaryIndexes {
			in.GlobalSecondaryIndexes[i].ProvisionedThroughput = tp
		}
	}
	in.DeletionProtectionEnabled = aws.Bool(plan.DeletionProtection.ValueBool())
	userTags, d := stringMap(ctx, plan.Tags)
	resp.Diagnostics.Append(d...)
	for k, v := range r.allTags(userTags) {
		in.Tags = append(in.Tags, ddbtypes.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	if _, err := r.c.dynamodb.CreateTable(ctx, in); err != nil {
		var inUse *ddbtypes.ResourceInUseException
		if errors.As(err, &inUse) {
			addError(&resp.Diagnostics, "Table already exists",
				fmt.Sprintf("A table named %q exists already. Import it (terraform import <address> %s) or choose another name.", name, name), err)
			return
		}
		addError(&resp.Diagnostics, "Cannot create the state table", fmt.Sprintf("CreateTable %s failed.", name), err)
		return
	}
	// From here on the table exists: record it, so a later failure leaves a tainted resource that
	// Terraform replaces, never an untracked table.
	plan.ID = types.StringValue(name)
	plan.ARN = types.StringUnknown()
	if err := r.waitActive(ctx, name); err != nil {
		r.saveTainted(ctx, plan, resp)
		addError(&resp.Diagnostics, "State table did not become active", fmt.Sprintf("Table %s was created but is not ACTIVE.", name), err)
		return
	}
	if plan.TTLEnabled.ValueBool() {
		if err := r.setTTL(ctx, name, true); err != nil {
			r.saveTainted(ctx, plan, resp)
			addError(&resp.Diagnostics, "Cannot enable time to live", fmt.Sprintf("Table %s was created, but UpdateTimeToLive failed.", name), err)
			return
		}
	}
	if plan.PointInTimeRecovery.ValueBool() {
		if err := r.setPITR(ctx, name, true); err != nil {
			r.saveTainted(ctx, plan, resp)
			addError(&resp.Diagnostics, "Cannot enable point-in-time recovery", fmt.Sprintf("Table %s was created, but UpdateContinuousBackups failed.", name), err)
			return
		}
	}
	found, d := r.read(ctx, &plan)
	resp.Diagnostics.Append(d...)
	if !found {
		resp.Diagnostics.AddError("State table vanished", fmt.Sprintf("Table %s was created and then not found.", name))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// saveTainted records a table that exists but whose creation did not finish.
func (r *StateTableResource) saveTainted(ctx context.Context, m stateTableModel, resp *resource.CreateResponse) {
	if m.ARN.IsUnknown() {
		m.ARN = types.StringNull()
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

func (r *StateTableResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state stateTableModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	found, d := r.read(ctx, &state)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !found {
		// Deleted out of band: forget it, so the next plan re-creates it.
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// read refreshes m from AWS; found is false when the table does not exist.
func (r *StateTableResource) read(ctx context.Context, m *stateTableModel) (found bool, diags diag.Diagnostics) {
	name := m.ID.ValueString()
	if name == "" {
		name = m.Name.ValueString()
	}
	out, err := r.c.dynamodb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		var nf *ddbtypes.ResourceNotFoundException
		if errors.As(err, &nf) {
			return false, nil
		}
		addError(&diags, "Cannot read the state table", fmt.Sprintf("DescribeTable %s failed.", name), err)
		return false, diags
	}
	t := out.Table
	if t.TableStatus == ddbtypes.TableStatusDeleting {
		return false, nil
	}
	m.fromTable(name, t)
	if problem := schemaProblem(t); problem != "" {
		diags.AddAttributeWarning(path.Root("name"), "Table does not have runnerpool's schema",
			fmt.Sprintf("Table %s %s. The reconciler and the agents cannot use it; create a new table with this resource.", name, problem))
	}

	ttl, err := r.ttlEnabled(ctx, name)
	if err != nil {
		addError(&diags, "Cannot read time to live", fmt.Sprintf("DescribeTimeToLive %s failed.", name), err)
		return true, diags
	}
	m.TTLEnabled = types.BoolValue(ttl)
	pitr, err := r.pitrEnabled(ctx, name)
	if err != nil {
		addError(&diags, "Cannot read point-in-time recovery", fmt.Sprintf("DescribeContinuousBackups %s failed.", name), err)
		return true, diags
	}
	m.PointInTimeRecovery = types.BoolValue(pitr)

	got, err := r.tags(ctx, aws.ToString(t.TableArn))
	switch {
	case unsupported(err):
		// The endpoint cannot report tags (DynamoDB Local): keep what the state says.
	case err != nil:
		addError(&diags, "Cannot read the table's tags", fmt.Sprintf("ListTagsOfResource %s failed.", name), err)
	default:
		m.Tags = userTagsValue(got, m.Tags)
	}
	return true, diags
}

// fromTable sets m's attributes that DescribeTable reports of table name.
func (m *stateTableModel) fromTable(name string, t *ddbtypes.TableDescription) {
	m.ID = types.StringValue(name)
	m.Name = types.StringValue(name)
	m.ARN = types.StringValue(aws.ToString(t.TableArn))
	m.TTLAttribute = types.StringValue(store.TTLAttribute)
	// A table without a billing mode summary was created with provisioned capacity.
	mode := billingProvisioned
	if t.BillingModeSummary != nil && t.BillingModeSummary.BillingMode != "" {
		mode = string(t.BillingModeSummary.BillingMode)
	}
	m.BillingMode = types.StringValue(mode)
	m.ReadCapacity, m.WriteCapacity = types.Int64Null(), types.Int64Null()
	if mode == billingProvisioned && t.ProvisionedThroughput != nil {
		m.ReadCapacity = types.Int64Value(aws.ToInt64(t.ProvisionedThroughput.ReadCapacityUnits))
		m.WriteCapacity = types.Int64Value(aws.ToInt64(t.ProvisionedThroughput.WriteCapacityUnits))
	}
	m.DeletionProtection = types.BoolValue(aws.ToBool(t.DeletionProtectionEnabled))
	if m.ForceDestroy.IsNull() || m.ForceDestroy.IsUnknown() {
		m.ForceDestroy = types.BoolValue(false)
	}
}

// ttlEnabled says whether the table's time to live is on (or being turned on) for the store's TTL
// attribute.
func (r *StateTableResource) ttlEnabled(ctx context.Context, name string) (bool, error) {
	ttl, err := r.c.dynamodb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		return false, err
	}
	on := false
	if d := ttl.TimeToLiveDescription; d != nil && aws.ToString(d.AttributeName) == store.TTLAttribute {
		on = d.TimeToLiveStatus == ddbtypes.TimeToLiveStatusEnabled || d.TimeToLiveStatus == ddbtypes.TimeToLiveStatusEnabling
	}
	return on, nil
}

// pitrEnabled says whether the table's point-in-time recovery is on.
func (r *StateTableResource) pitrEnabled(ctx context.Context, name string) (bool, error) {
	pitr, err := r.c.dynamodb.DescribeContinuousBackups(ctx, &dynamodb.DescribeContinuousBackupsInput{TableName: aws.String(name)})
	switch {
	case unsupported(err):
		// Endpoints without backups (DynamoDB Local) have no point-in-time recovery.
		return false, nil
	case err != nil:
		return false, err
	}
	on := false
	if d := pitr.ContinuousBackupsDescription; d != nil && d.PointInTimeRecoveryDescription != nil {
		s := d.PointInTimeRecoveryDescription.PointInTimeRecoveryStatus
		on = s == ddbtypes.PointInTimeRecoveryStatusEnabled
	}
	return on, nil
}

// schemaProblem says how a table differs from store.TableDefinition, or "".
func schemaProblem(t *ddbtypes.TableDescription) string {
	want := store.TableDefinition(aws.ToString(t.TableName))
	keys := func(ks []ddbtypes.KeySchemaElement) string {
		var parts []string
		for _, k := range ks {
			parts = append(parts, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
		}
		return strings.Join(parts, ",")
	}
	if keys(t.KeySchema) != keys(want.KeySchema) {
		return fmt.Sprintf("has the key schema %s instead of %s", keys(t.KeySchema), keys(want.KeySchema))
	}
	have := map[string]string{}
	for _, g := range t.GlobalSecondaryIndexes {
		have[aws.ToString(g.IndexName)] = keys(g.KeySchema)
	}
	for _, g := range want.GlobalSecondaryIndexes {
		if have[aws.ToString(g.IndexName)] != keys(g.KeySchema) {
			return fmt.Sprintf("lacks the index %s (%s)", aws.ToString(g.IndexName), keys(g.KeySchema))
		}
	}
	return ""
}

func (r *StateTableResource) tags(ctx context.Context, arn string) (map[string]string, error) {
	out := map[string]string{}
	var next *string
	for {
		page, err := r.c.dynamodb.ListTagsOfResource(ctx, &dynamodb.ListTagsOfResourceInput{ResourceArn: aws.String(arn), NextToken: next})
		if err != nil {
			return nil, err
		}
		for _, t := range page.Tags {
			out[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
		if page.NextToken == nil {
			return out, nil
		}
		next = page.NextToken
	}
}

// allTags is the user's tags plus the provider's own.
func (r *StateTableResource) allTags(user map[string]string) map[string]string {
	all := maps.Clone(user)
	if all == nil {
		all = map[string]string{}
	}
	if r.c.deploymentID != "" {
		all[tags.Deployment] = r.c.deploymentID
	}
	return all
}

func (r *StateTableResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state stateTableModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	fail := func(summary string, err error) {
		addError(&resp.Diagnostics, summary, fmt.Sprintf("Updating table %s failed; the table keeps its other settings.", name), err)
	}

	if summary, err := r.changeSettings(ctx, name, plan, state); err != nil {
		fail(summary, err)
		return
	}
	if !plan.Tags.Equal(state.Tags) {
		want, d := stringMap(ctx, plan.Tags)
		resp.Diagnostics.Append(d...)
		have, d := stringMap(ctx, state.Tags)
		resp.Diagnostics.Append(d...)
		switch err := r.retag(ctx, state.ARN.ValueString(), r.allTags(have), r.allTags(want)); {
		case unsupported(err):
			// The endpoint has no tagging API (DynamoDB Local), as Read tolerates: the tags are
			// kept in the state only.
			resp.Diagnostics.AddWarning("Table tags not changed",
				fmt.Sprintf("The DynamoDB endpoint does not support tagging (DynamoDB Local?); the tags of %s are recorded in the Terraform state only.\n\nOriginal Error: %s", name, err))
		case err != nil:
			fail("Cannot change the table's tags", err)
			return
		}
	}
	plan.ID, plan.ARN = state.ID, state.ARN
	found, d := r.read(ctx, &plan)
	resp.Diagnostics.Append(d...)
	if !found {
		resp.Diagnostics.AddError("State table vanished", fmt.Sprintf("Table %s was not found after the update.", name))
		return
	}
	// force_destroy lives only in Terraform.
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// changeSettings changes what the plan changes of the table's billing mode and capacity, deletion
// protection, time to live and point-in-time recovery, in that order, and stops at the first
// failure, which it returns with its diagnostic's summary.
func (r *StateTableResource) changeSettings(ctx context.Context, name string, plan, state stateTableModel) (summary string, err error) {
	if !plan.BillingMode.Equal(state.BillingMode) || !plan.ReadCapacity.Equal(state.ReadCapacity) || !plan.WriteCapacity.Equal(state.WriteCapacity) {
		in := &dynamodb.UpdateTableInput{TableName: aws.String(name), BillingMode: ddbtypes.BillingMode(plan.BillingMode.ValueString())}
		if tp := plan.throughput(); tp != nil {
			in.ProvisionedThroughput = tp
			for _, g := range store.TableDefinition(name).GlobalSecondaryIndexes {
				in.GlobalSecondaryIndexUpdates = append(in.GlobalSecondaryIndexUpdates, ddbtypes.GlobalSecondaryIndexUpdate{
					Update: &ddbtypes.UpdateGlobalSecondaryIndexAction{IndexName: g.IndexName, ProvisionedThroughput: tp},
				})
			}
		}
		if _, err := r.c.dynamodb.UpdateTable(ctx, in); err != nil {
			return "Cannot change the billing mode", err
		}
		if err := r.waitActive(ctx, name); err != nil {
			return "Table did not become active after changing its billing mode", err
		}
	}
	if !plan.DeletionProtection.Equal(state.DeletionProtection) {
		_, err := r.c.dynamodb.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName: aws.String(name), DeletionProtectionEnabled: aws.Bool(plan.DeletionProtection.ValueBool()),
		})
		if err != nil {
			return "Cannot change deletion protection", err
		}
		if err := r.waitActive(ctx, name); err != nil {
			return "Table did not become active after changing deletion protection", err
		}
	}
	if !plan.TTLEnabled.Equal(state.TTLEnabled) {
		if err := r.setTTL(ctx, name, plan.TTLEnabled.ValueBool()); err != nil {
			return "Cannot change time to live", err
		}
	}
	if !plan.PointInTimeRecovery.Equal(state.PointInTimeRecovery) {
		if err := r.setPITR(ctx, name, plan.PointInTimeRecovery.ValueBool()); err != nil {
			return "Cannot change point-in-time recovery", err
		}
	}
	return "", nil
}

func (r *StateTableResource) retag(ctx context.Context, arn string, have, want map[string]string) error {
	var remove []string
	for k := range have {
		if _, ok := want[k]; !ok {
			remove = append(remove, k)
		}
	}
	if len(remove) > 0 {
		slices.Sort(remove)
		if _, err := r.c.dynamodb.UntagResource(ctx, &dynamodb.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: remove}); err != nil {
			return err
		}
	}
	var add []ddbtypes.Tag
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			add = append(add, ddbtypes.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
	}
	if len(add) > 0 {
		if _, err := r.c.dynamodb.TagResource(ctx, &dynamodb.TagResourceInput{ResourceArn: aws.String(arn), Tags: add}); err != nil {
			return err
		}
	}
	return nil
}

func (r *StateTableResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state stateTableModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.ID.ValueString()
	if state.DeletionProtection.ValueBool() {
		resp.Diagnostics.AddAttributeError(path.Root("deletion_protection"), "Table is protected against deletion",
			fmt.Sprintf("Table %s has deletion protection on. Set deletion_protection = false and apply before destroying it.", name))
		return
	}
	if !state.ForceDestroy.ValueBool() {
		live, err := r.c.store(name).Live(ctx)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return // already gone
		case err != nil:
			addError(&resp.Diagnostics, "Cannot check the table for live instances",
				fmt.Sprintf("Before deleting table %s the provider lists its live instance records; that failed.", name), err)
			return
		case len(live) > 0:
			ids := make([]string, 0, 5)
			for i := 0; i < len(live) && i < 5; i++ {
				ids = append(ids, fmt.Sprintf("%s (%s)", live[i].ID, live[i].State))
			}
			resp.Diagnostics.AddAttributeError(path.Root("force_destroy"), "Table still holds live instances",
				fmt.Sprintf("Table %s has %d live instance record(s), for example %s. Deleting it would orphan those EC2 instances. "+
					"Scale the pools to zero and let the reconciler terminate them, or set force_destroy = true and apply first.",
					name, len(live), strings.Join(ids, ", ")))
			return
		}
	}
	_, err := r.c.dynamodb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	var nf *ddbtypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return
	}
	if err != nil {
		addError(&resp.Diagnostics, "Cannot delete the state table", fmt.Sprintf("DeleteTable %s failed.", name), err)
		return
	}
	w := dynamodb.NewTableNotExistsWaiter(r.c.dynamodb, func(o *dynamodb.TableNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 200*time.Millisecond, 5*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, tableWait); err != nil {
		addError(&resp.Diagnostics, "State table is still being deleted", fmt.Sprintf("Table %s did not disappear in time.", name), err)
	}
}

// ImportState imports a table by name.
func (r *StateTableResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !tableNameRE.MatchString(req.ID) {
		resp.Diagnostics.AddError("Invalid import id", fmt.Sprintf("Import a state table by its name; %q is not a table name.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("force_destroy"), false)...)
}

func (r *StateTableResource) waitActive(ctx context.Context, name string) error {
	w := dynamodb.NewTableExistsWaiter(r.c.dynamodb, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 200*time.Millisecond, 5*time.Second
	})
	// TableExists waits for ACTIVE; UpdateTable leaves a table UPDATING for a moment, and a second
	// update during that is refused.
	return w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, tableWait)
}

func (r *StateTableResource) setTTL(ctx context.Context, name string, on bool) error {
	_, err := r.c.dynamodb.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
			AttributeName: aws.String(store.TTLAttribute), Enabled: aws.Bool(on),
		},
	})
	// DynamoDB refuses to set time to live to the state it is already in.
	if err != nil && apiErrorCode(err) == "ValidationException" && strings.Contains(err.Error(), "already") {
		return nil
	}
	return err
}

func (r *StateTableResource) setPITR(ctx context.Context, name string, on bool) error {
	_, err := r.c.dynamodb.UpdateContinuousBackups(ctx, &dynamodb.UpdateContinuousBackupsInput{
		TableName: aws.String(name),
		PointInTimeRecoverySpecification: &ddbtypes.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: aws.Bool(on),
		},
	})
	if unsupported(err) {
		return fmt.Errorf("this DynamoDB endpoint does not implement point-in-time recovery (DynamoDB Local does not): %w", err)
	}
	return err
}
