// runnerpool_pool_queue: the SQS queue of a runner class's resource pool. A released runner is
// announced on it (internal/pool.Message) once the agent confirmed deregistration and cleanup; the
// claim workers take idle runners from it.
package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
)

var (
	_ resource.ResourceWithConfigure        = &PoolQueueResource{}
	_ resource.ResourceWithImportState      = &PoolQueueResource{}
	_ resource.ResourceWithModifyPlan       = &PoolQueueResource{}
	_ resource.ResourceWithConfigValidators = &PoolQueueResource{}
)

// NewPoolQueueResource returns the runnerpool_pool_queue resource.
func NewPoolQueueResource() resource.Resource { return &PoolQueueResource{} }

// PoolQueueResource manages a pool queue.
type PoolQueueResource struct{ c *clients }

type poolQueueModel struct {
	ID                types.String `tfsdk:"id"`
	RunnerClass       types.String `tfsdk:"runner_class"`
	Name              types.String `tfsdk:"name"`
	URL               types.String `tfsdk:"url"`
	ARN               types.String `tfsdk:"arn"`
	VisibilityTimeout types.Int64  `tfsdk:"visibility_timeout_seconds"`
	MessageRetention  types.Int64  `tfsdk:"message_retention_seconds"`
	Encryption        types.String `tfsdk:"encryption"`
	KMSMasterKeyID    types.String `tfsdk:"kms_master_key_id"`
	Tags              types.Map    `tfsdk:"tags"`
}

const (
	encryptionSQS  = "sse-sqs"
	encryptionKMS  = "sse-kms"
	encryptionNone = "none"
	// queueRecreateWait covers SQS's rule that a deleted queue's name cannot be reused for 60 s.
	queueRecreateWait = 70 * time.Second
)

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

func (r *PoolQueueResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pool_queue"
}

func (r *PoolQueueResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The SQS queue of a runner class's resource pool: a released runner is announced on it once its agent " +
			"confirmed deregistration and cleanup, and the next workflow's claim takes it from there. Tagged `" + tags.RunnerClass +
			"` (and `" + tags.Deployment + "` with a provider `deployment_id`).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "The queue URL.",
				Computed:            true,
				// The URL is fixed for the life of the queue.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"runner_class": schema.StringAttribute{
				MarkdownDescription: "The runner class whose idle runners the queue holds.",
				Required:            true,
				// The runner class is part of the queue's identity (its tag and default name); a queue
				// holding messages of one class must not start serving another.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{nameValidator("runner class name")},
			},
			"name": schema.StringAttribute{
				MarkdownDescription: "Queue name (1-80 letters, digits, `-` or `_`). Defaults to `<deployment_id>-pool-<runner_class>`, or " +
					"`runnerpool-pool-<runner_class>` without a deployment id.",
				Optional: true,
				Computed: true,
				// SQS cannot rename a queue.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{matches("queue name", "1-80 letters, digits, '-' or '_'", queueNameRE)},
			},
			"url": schema.StringAttribute{
				MarkdownDescription: "The queue URL.",
				Computed:            true,
				// Fixed for the life of the queue.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"arn": schema.StringAttribute{
				MarkdownDescription: "The queue ARN (for IAM policies).",
				Computed:            true,
				// Fixed for the life of the queue.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"visibility_timeout_seconds": schema.Int64Attribute{
				MarkdownDescription: "How long a received message stays invisible to other claim workers while one verifies and claims " +
					"the runner (0-43200). Defaults to 30.",
				Optional:   true,
				Computed:   true,
				Default:    int64default.StaticInt64(30),
				Validators: []validator.Int64{int64Between{what: "visibility timeout", min: 0, max: 43200}},
			},
			"message_retention_seconds": schema.Int64Attribute{
				MarkdownDescription: "How long an idle runner's message is kept (60-1209600). An idle runner past its idle time is " +
					"terminated anyway and its message then dropped on receipt. Defaults to 345600 (4 days).",
				Optional:   true,
				Computed:   true,
				Default:    int64default.StaticInt64(345600),
				Validators: []validator.Int64{int64Between{what: "message retention", min: 60, max: 1209600}},
			},
			"encryption": schema.StringAttribute{
				MarkdownDescription: "Server-side encryption: `sse-sqs` (default, SQS-managed keys), `sse-kms` (with `kms_master_key_id`) or `none`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(encryptionSQS),
				Validators:          []validator.String{oneOf("encryption", encryptionSQS, encryptionKMS, encryptionNone)},
			},
			"kms_master_key_id": schema.StringAttribute{
				MarkdownDescription: "KMS key id, ARN or alias for `sse-kms` (for example `alias/aws/sqs`).",
				Optional:            true,
			},
			"tags": schema.MapAttribute{
				MarkdownDescription: "Tags of the queue; keys starting with `runnerpool:` are reserved for the provider's own.",
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          []validator.Map{tagsCheck{}},
			},
		},
	}
	markReplacement(&resp.Schema)
}

// ConfigValidators ties kms_master_key_id to sse-kms.
func (r *PoolQueueResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{kmsValidator{}}
}

type kmsValidator struct{}

func (kmsValidator) Description(context.Context) string {
	return "kms_master_key_id is required with sse-kms and not allowed otherwise"
}
func (v kmsValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (kmsValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m poolQueueModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Encryption.IsUnknown() || m.KMSMasterKeyID.IsUnknown() {
		return
	}
	kms := m.Encryption.ValueString() == encryptionKMS
	switch {
	case kms && m.KMSMasterKeyID.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("kms_master_key_id"), "Missing KMS key", `encryption = "sse-kms" needs kms_master_key_id.`)
	case !kms && !m.KMSMasterKeyID.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("kms_master_key_id"), "KMS key without sse-kms",
			`kms_master_key_id applies only with encryption = "sse-kms".`)
	}
}

// ModifyPlan fills in the default queue name, which depends on the runner class and the provider's
// deployment id and so cannot be a static default.
func (r *PoolQueueResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.c == nil {
		return // destroy, or not configured yet
	}
	var plan poolQueueModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !plan.Name.IsUnknown() || plan.RunnerClass.IsUnknown() {
		return
	}
	var cfgName types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("name"), &cfgName)...)
	if !cfgName.IsNull() {
		return
	}
	if !req.State.Raw.IsNull() {
		var state poolQueueModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if state.RunnerClass.Equal(plan.RunnerClass) {
			// Unchanged identity: keep the name the queue has (an imported queue keeps its own name).
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("name"), state.Name)...)
			return
		}
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("name"), r.defaultName(plan.RunnerClass.ValueString()))...)
}

func (r *PoolQueueResource) defaultName(runnerClass string) string {
	prefix := "runnerpool"
	if r.c.deploymentID != "" {
		prefix = r.c.deploymentID
	}
	n := prefix + "-pool-" + runnerClass
	if len(n) > 80 {
		n = n[:80]
	}
	return n
}

func (r *PoolQueueResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.c = providerData(req.ProviderData, &resp.Diagnostics)
}

// attributes are the SQS attributes the plan asks for. With create, encryption is always stated;
// on update only changed attributes are sent.
func (m poolQueueModel) attributes(prior *poolQueueModel) map[string]string {
	a := map[string]string{}
	if prior == nil || !m.VisibilityTimeout.Equal(prior.VisibilityTimeout) {
		a[string(sqstypes.QueueAttributeNameVisibilityTimeout)] = strconv.FormatInt(m.VisibilityTimeout.ValueInt64(), 10)
	}
	if prior == nil || !m.MessageRetention.Equal(prior.MessageRetention) {
		a[string(sqstypes.QueueAttributeNameMessageRetentionPeriod)] = strconv.FormatInt(m.MessageRetention.ValueInt64(), 10)
	}
	if prior == nil || !m.Encryption.Equal(prior.Encryption) || !m.KMSMasterKeyID.Equal(prior.KMSMasterKeyID) {
		switch m.Encryption.ValueString() {
		case encryptionKMS:
			a[string(sqstypes.QueueAttributeNameKmsMasterKeyId)] = m.KMSMasterKeyID.ValueString()
		case encryptionSQS:
			a[string(sqstypes.QueueAttributeNameSqsManagedSseEnabled)] = "true"
			if prior != nil && prior.Encryption.ValueString() == encryptionKMS {
				a[string(sqstypes.QueueAttributeNameKmsMasterKeyId)] = ""
			}
		case encryptionNone:
			a[string(sqstypes.QueueAttributeNameSqsManagedSseEnabled)] = "false"
			if prior != nil && prior.Encryption.ValueString() == encryptionKMS {
				a[string(sqstypes.QueueAttributeNameKmsMasterKeyId)] = ""
			}
		}
	}
	return a
}

func (r *PoolQueueResource) allTags(user map[string]string, runnerClass string) map[string]string {
	all := maps.Clone(user)
	if all == nil {
		all = map[string]string{}
	}
	all[tags.RunnerClass] = runnerClass
	if r.c.deploymentID != "" {
		all[tags.Deployment] = r.c.deploymentID
	}
	return all
}

func (r *PoolQueueResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan poolQueueModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if plan.Name.IsUnknown() {
		// The runner class was unknown at plan time, so ModifyPlan could not name the queue.
		plan.Name = types.StringValue(r.defaultName(plan.RunnerClass.ValueString()))
	}
	name := plan.Name.ValueString()
	// CreateQueue returns the existing queue when one of that name has the same attributes: check
	// first, so an apply never silently adopts a queue it does not manage.
	if out, err := r.c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)}); err == nil {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Queue already exists",
			fmt.Sprintf("A queue named %q exists already (%s). Import it (terraform import <address> %s) or choose another name.",
				name, aws.ToString(out.QueueUrl), aws.ToString(out.QueueUrl)))
		return
	} else if !queueMissing(err) {
		addError(&resp.Diagnostics, "Cannot check for an existing queue", fmt.Sprintf("GetQueueUrl %s failed.", name), err)
		return
	}
	user, d := stringMap(ctx, plan.Tags)
	resp.Diagnostics.Append(d...)
	in := &sqs.CreateQueueInput{
		QueueName: aws.String(name), Attributes: plan.attributes(nil), Tags: r.allTags(user, plan.RunnerClass.ValueString()),
	}
	var out *sqs.CreateQueueOutput
	var err error
	deadline := time.Now().Add(queueRecreateWait)
	for {
		out, err = r.c.sqs.CreateQueue(ctx, in)
		// A queue deleted less than 60 s ago (a replacement, or a re-create after drift) blocks its
		// name for a while.
		if !deletedRecently(err) || time.Now().After(deadline) || sleep(ctx, 5*time.Second) != nil {
			break
		}
	}
	if err != nil {
		addError(&resp.Diagnostics, "Cannot create the pool queue", fmt.Sprintf("CreateQueue %s failed.", name), err)
		return
	}
	plan.ID = types.StringValue(aws.ToString(out.QueueUrl))
	plan.URL = plan.ID
	found, d := r.read(ctx, &plan)
	resp.Diagnostics.Append(d...)
	if !found {
		resp.Diagnostics.AddError("Pool queue vanished", fmt.Sprintf("Queue %s was created and then not found.", name))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func deletedRecently(err error) bool {
	var dr *sqstypes.QueueDeletedRecently
	return errors.As(err, &dr) || strings.HasSuffix(apiErrorCode(err), "QueueDeletedRecently")
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func queueMissing(err error) bool {
	var ne *sqstypes.QueueDoesNotExist
	if errors.As(err, &ne) {
		return true
	}
	switch apiErrorCode(err) {
	case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue":
		return true
	}
	return false
}

func (r *PoolQueueResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state poolQueueModel
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

// read refreshes m from SQS; found is false when the queue does not exist.
func (r *PoolQueueResource) read(ctx context.Context, m *poolQueueModel) (found bool, diags diag.Diagnostics) {
	u := m.ID.ValueString()
	out, err := r.c.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(u), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if queueMissing(err) {
		return false, nil
	}
	if err != nil {
		addError(&diags, "Cannot read the pool queue", fmt.Sprintf("GetQueueAttributes %s failed.", u), err)
		return false, diags
	}
	a := out.Attributes
	m.URL = types.StringValue(u)
	m.ARN = types.StringValue(a[string(sqstypes.QueueAttributeNameQueueArn)])
	if arn := a[string(sqstypes.QueueAttributeNameQueueArn)]; arn != "" {
		m.Name = types.StringValue(arn[strings.LastIndex(arn, ":")+1:])
	} else if pu, err := url.Parse(u); err == nil {
		m.Name = types.StringValue(pu.Path[strings.LastIndex(pu.Path, "/")+1:])
	}
	for attr, dst := range map[sqstypes.QueueAttributeName]*types.Int64{
		sqstypes.QueueAttributeNameVisibilityTimeout:      &m.VisibilityTimeout,
		sqstypes.QueueAttributeNameMessageRetentionPeriod: &m.MessageRetention,
	} {
		n, err := strconv.ParseInt(a[string(attr)], 10, 64)
		if err != nil {
			addError(&diags, "Unexpected queue attribute", fmt.Sprintf("Queue %s reports %s = %q.", u, attr, a[string(attr)]), err)
			return true, diags
		}
		*dst = types.Int64Value(n)
	}
	kms := a[string(sqstypes.QueueAttributeNameKmsMasterKeyId)]
	sse, reported := a[string(sqstypes.QueueAttributeNameSqsManagedSseEnabled)]
	switch {
	case kms != "":
		m.Encryption, m.KMSMasterKeyID = types.StringValue(encryptionKMS), types.StringValue(kms)
	case reported && sse == "true":
		m.Encryption, m.KMSMasterKeyID = types.StringValue(encryptionSQS), types.StringNull()
	case reported:
		m.Encryption, m.KMSMasterKeyID = types.StringValue(encryptionNone), types.StringNull()
	default:
		// The endpoint does not report SSE-SQS (emulators): keep the state's value, but never a
		// KMS setting that is not there.
		if m.Encryption.IsNull() || m.Encryption.IsUnknown() || m.Encryption.ValueString() == encryptionKMS {
			m.Encryption = types.StringValue(encryptionSQS)
		}
		m.KMSMasterKeyID = types.StringNull()
	}

	tagsOut, err := r.c.sqs.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: aws.String(u)})
	if err != nil {
		addError(&diags, "Cannot read the queue's tags", fmt.Sprintf("ListQueueTags %s failed.", u), err)
		return true, diags
	}
	if rc := tagsOut.Tags[tags.RunnerClass]; rc != "" {
		m.RunnerClass = types.StringValue(rc)
	} else if m.RunnerClass.IsNull() || m.RunnerClass.IsUnknown() {
		diags.AddError("Queue is not a runnerpool pool queue",
			fmt.Sprintf("Queue %s has no %s tag, so its runner class is unknown. Tag it (%s=<runner class>) before importing it.", u, tags.RunnerClass, tags.RunnerClass))
		return true, diags
	}
	m.Tags = userTagsValue(tagsOut.Tags, m.Tags)
	return true, diags
}

func (r *PoolQueueResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state poolQueueModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	u := state.ID.ValueString()
	if a := plan.attributes(&state); len(a) > 0 {
		if _, err := r.c.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(u), Attributes: a}); err != nil {
			addError(&resp.Diagnostics, "Cannot update the pool queue", fmt.Sprintf("SetQueueAttributes %s failed.", u), err)
			return
		}
	}
	if !plan.Tags.Equal(state.Tags) {
		want, d := stringMap(ctx, plan.Tags)
		resp.Diagnostics.Append(d...)
		have, d := stringMap(ctx, state.Tags)
		resp.Diagnostics.Append(d...)
		if err := r.retag(ctx, u, r.allTags(have, state.RunnerClass.ValueString()), r.allTags(want, plan.RunnerClass.ValueString())); err != nil {
			addError(&resp.Diagnostics, "Cannot update the queue's tags", fmt.Sprintf("Tagging %s failed.", u), err)
			return
		}
	}
	plan.ID, plan.URL, plan.ARN = state.ID, state.URL, state.ARN
	found, d := r.read(ctx, &plan)
	resp.Diagnostics.Append(d...)
	if !found {
		resp.Diagnostics.AddError("Pool queue vanished", fmt.Sprintf("Queue %s was not found after the update.", u))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *PoolQueueResource) retag(ctx context.Context, u string, have, want map[string]string) error {
	var remove []string
	for k := range have {
		if _, ok := want[k]; !ok {
			remove = append(remove, k)
		}
	}
	if len(remove) > 0 {
		slices.Sort(remove)
		if _, err := r.c.sqs.UntagQueue(ctx, &sqs.UntagQueueInput{QueueUrl: aws.String(u), TagKeys: remove}); err != nil {
			return err
		}
	}
	add := map[string]string{}
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			add[k] = v
		}
	}
	if len(add) > 0 {
		if _, err := r.c.sqs.TagQueue(ctx, &sqs.TagQueueInput{QueueUrl: aws.String(u), Tags: add}); err != nil {
			return err
		}
	}
	return nil
}

func (r *PoolQueueResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state poolQueueModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	u := state.ID.ValueString()
	// The reconciler keeps a queue per repository or owner beside the class queue (pool/scope.go),
	// which Terraform does not know: they go with it.
	scoped, err := pool.ListScopeQueues(ctx, r.c.sqs, u)
	if err != nil {
		addError(&resp.Diagnostics, "Cannot list the pool queue's scope queues", fmt.Sprintf("ListQueues for %s failed.", u), err)
		return
	}
	for _, q := range append(scoped, u) {
		_, err := r.c.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q)})
		if err != nil && !queueMissing(err) {
			addError(&resp.Diagnostics, "Cannot delete the pool queue", fmt.Sprintf("DeleteQueue %s failed.", q), err)
		}
	}
}

// ImportState imports a queue by URL or by name.
func (r *PoolQueueResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	id := req.ID
	if !strings.HasPrefix(id, "https://") && !strings.HasPrefix(id, "http://") {
		if !queueNameRE.MatchString(id) {
			resp.Diagnostics.AddError("Invalid import id", fmt.Sprintf("Import a pool queue by its URL or name; %q is neither.", id))
			return
		}
		if r.c == nil {
			resp.Diagnostics.AddError("Provider not configured", "Importing a queue by name needs the provider's AWS access.")
			return
		}
		out, err := r.c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(id)})
		if err != nil {
			addError(&resp.Diagnostics, "Cannot find the queue", fmt.Sprintf("GetQueueUrl %s failed.", id), err)
			return
		}
		id = aws.ToString(out.QueueUrl)
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), id)...)
}

// nameValidator checks runner class, warm pool and environment names.
func nameValidator(what string) validator.String {
	return stringCheck{what: what, desc: "1-63 lower-case letters, digits, '-' or '_', starting with a letter or digit", fn: declared.ValidateName}
}
