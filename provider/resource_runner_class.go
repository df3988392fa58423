// runnerpool_runner_class: a runner class (what an instance is: image, size, types, volume,
// network, labels, thresholds) written as a configuration item of the state table, where the
// reconciler reads it on its next cycle.
package provider

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
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
	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
)

var (
	_ resource.ResourceWithConfigure      = &RunnerClassResource{}
	_ resource.ResourceWithImportState    = &RunnerClassResource{}
	_ resource.ResourceWithValidateConfig = &RunnerClassResource{}
)

// NewRunnerClassResource returns the runnerpool_runner_class resource.
func NewRunnerClassResource() resource.Resource {
	return &RunnerClassResource{configItemResource[runnerClassModel, declared.RunnerClass, *runnerClassModel]{kind: itemKind[declared.RunnerClass]{
		what: "runner class", get: (*declared.Repository).GetRunnerClass, put: (*declared.Repository).PutRunnerClass, del: (*declared.Repository).DeleteRunnerClass,
	}}}
}

// RunnerClassResource manages a runner class.
type RunnerClassResource struct {
	configItemResource[runnerClassModel, declared.RunnerClass, *runnerClassModel]
}

type runnerClassModel struct {
	ID               types.String `tfsdk:"id"`
	Table            types.String `tfsdk:"table"`
	Name             types.String `tfsdk:"name"`
	Image            types.String `tfsdk:"image"`
	CPU              types.Int64  `tfsdk:"cpu"`
	MemoryMiB        types.Int64  `tfsdk:"memory_mib"`
	InstanceTypes    types.List   `tfsdk:"instance_types"`
	VolumeType       types.String `tfsdk:"volume_type"`
	VolumeSizeGiB    types.Int64  `tfsdk:"volume_size_gib"`
	VolumeIOPS       types.Int64  `tfsdk:"volume_iops"`
	VolumeThroughput types.Int64  `tfsdk:"volume_throughput_mibps"`
	UsageClass       types.String `tfsdk:"usage_class"`
	Subnets          types.List   `tfsdk:"subnets"`
	SecurityGroups   types.List   `tfsdk:"security_groups"`
	InstanceProfile  types.String `tfsdk:"instance_profile"`
	PreRunnerScript  types.String `tfsdk:"pre_runner_script"`
	Labels           types.List   `tfsdk:"labels"`
	JobAccess        types.String `tfsdk:"job_access"`
	Reuse            types.String `tfsdk:"reuse"`
	MaxRuntime       types.String `tfsdk:"max_runtime"`
	IdleTime         types.String `tfsdk:"idle_time"`
	RegistrationWait types.String `tfsdk:"registration_wait"`
	LaunchTemplateID types.String `tfsdk:"launch_template_id"`
	QueueURL         types.String `tfsdk:"queue_url"`
	Tags             types.Map    `tfsdk:"tags"`
	MaxInstances     types.Int64  `tfsdk:"max_instances"`
	Cache            *cacheModel  `tfsdk:"cache"`
	Version          types.Int64  `tfsdk:"version"`
}

func (r *RunnerClassResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_runner_class"
}

func check(what, desc string, fn func(string) error) stringCheck {
	return stringCheck{what: what, desc: desc, fn: fn}
}

// tableAttribute is the table attribute of the configuration resources and data sources.
func tableAttribute(forResource bool) schema.StringAttribute {
	a := schema.StringAttribute{
		MarkdownDescription: "Name of the state table the item lives in (`runnerpool_state_table.<name>.name`).",
		Required:            true,
		Validators:          []validator.String{tableNameValidator()},
	}
	if forResource {
		// An item belongs to one table; moving it is a delete in one and a create in the other.
		a.PlanModifiers = []planmodifier.String{stringplanmodifier.RequiresReplace()}
	}
	return a
}

func idAttribute() schema.StringAttribute {
	return schema.StringAttribute{
		MarkdownDescription: "`<table>/<name>`, the import id.",
		Computed:            true,
		// Derived from table and name, which both force a replacement when they change.
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
	}
}

func versionAttribute() schema.Int64Attribute {
	return schema.Int64Attribute{
		MarkdownDescription: "Version of the item in the table, incremented by every write. An update is refused when the item " +
			"was changed since Terraform last read it (optimistic concurrency); refresh and apply again.",
		Computed: true,
		// No UseStateForUnknown: every update writes a new version.
	}
}

func (r *RunnerClassResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	ids := func(what, example string, fn func(string) error) validator.List {
		return listEach{check: check(what, "a "+what+" id such as "+example, fn), unique: true}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "A runner class: what a runnerpool instance is (image, size, allowed instance types, root volume, network, " +
			"labels and time limits). Stored as a configuration item of the state table, read by the reconciler on its next cycle; warm " +
			"pools and provisions name it.",
		Attributes: map[string]schema.Attribute{
			"id":    idAttribute(),
			"table": tableAttribute(true),
			"name": schema.StringAttribute{
				MarkdownDescription: "Runner class name: 1-63 lower-case letters, digits, `-` or `_`. It appears in queue names, EC2 tags and GitHub labels.",
				Required:            true,
				// The name is the item's key.
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{nameValidator("runner class name")},
			},
			"image": schema.StringAttribute{
				MarkdownDescription: "AMI id the instances boot from. Changing it rolls warm pools over to new instances.",
				Required:            true,
				Validators:          []validator.String{check("image", "an AMI id such as ami-0123456789abcdef0", declared.ValidateImage)},
			},
			"cpu": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("vCPUs an instance needs at least (1-%d).", declared.MaxCPU),
				Required:            true,
				Validators:          []validator.Int64{int64Between{what: "cpu", min: 1, max: declared.MaxCPU}},
			},
			"memory_mib": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Memory an instance needs at least, in MiB (%d-%d).", declared.MinMemoryMiB, declared.MaxMemoryMiB),
				Required:            true,
				Validators:          []validator.Int64{int64Between{what: "memory", min: declared.MinMemoryMiB, max: declared.MaxMemoryMiB}},
			},
			"instance_types": schema.ListAttribute{
				MarkdownDescription: "Allowed instance types, as EC2 attribute-based selection patterns: `*` matches any run of characters " +
					"(`c7i.*`, `m6a.large`, `*.xlarge`; a family such as t3 is `t3.*`). Unset allows every type with the cpu and memory.",
				ElementType: types.StringType,
				Optional:    true,
				Validators: []validator.List{
					listSize{what: "instance type patterns", min: 1, max: 40},
					listEach{check: check("instance type pattern", "an instance type pattern such as c7i.* or m6a.large", instancetype.ValidatePattern), unique: true},
				},
			},
			"volume_type": schema.StringAttribute{
				MarkdownDescription: "Root volume type. Only `gp3` (default): its baseline IOPS and throughput are free, which is what a stopped warm instance should cost.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(declared.VolumeGP3),
				Validators:          []validator.String{oneOf("volume type", declared.VolumeGP3)},
			},
			"volume_size_gib": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Root volume size in GiB (%d-%d). Defaults to 30.", declared.MinVolumeGiB, declared.MaxVolumeGiB),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(30),
				Validators:          []validator.Int64{int64Between{what: "volume size", min: declared.MinVolumeGiB, max: declared.MaxVolumeGiB}},
			},
			"volume_iops": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Root volume IOPS (%d-%d, at most 500 per GiB above the baseline). Defaults to 3000, the free baseline.", declared.MinIOPS, declared.MaxIOPS),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(declared.MinIOPS),
				Validators:          []validator.Int64{int64Between{what: "volume IOPS", min: declared.MinIOPS, max: declared.MaxIOPS}},
			},
			"volume_throughput_mibps": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Root volume throughput in MiB/s (%d-%d, at most 0.25 per IOPS). Defaults to 125, the free baseline.", declared.MinThroughput, declared.MaxThroughput),
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(declared.MinThroughput),
				Validators:          []validator.Int64{int64Between{what: "volume throughput", min: declared.MinThroughput, max: declared.MaxThroughput}},
			},
			"usage_class": schema.StringAttribute{
				MarkdownDescription: "`on-demand` (default) or `spot`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(declared.UsageOnDemand),
				Validators:          []validator.String{oneOf("usage class", declared.UsageOnDemand, declared.UsageSpot)},
			},
			"subnets": schema.ListAttribute{
				MarkdownDescription: "Subnet ids instances may launch in (one or more; several zones give CreateFleet more capacity to choose from).",
				ElementType:         types.StringType,
				Required:            true,
				Validators: []validator.List{
					listSize{what: "subnets", min: 1, max: 32},
					ids("subnet", "subnet-0123456789abcdef0", declared.ValidateSubnet),
				},
			},
			"security_groups": schema.ListAttribute{
				MarkdownDescription: "Security group ids of the instances. Unset uses the launch template's or the VPC default.",
				ElementType:         types.StringType,
				Optional:            true,
				Validators: []validator.List{
					listSize{what: "security groups", min: 1, max: 5},
					ids("security group", "sg-0123456789abcdef0", declared.ValidateSecurityGroup),
				},
			},
			"instance_profile": schema.StringAttribute{
				MarkdownDescription: "IAM instance profile name or ARN of the instances (the agent's role: its own items only, terminate only itself).",
				Optional:            true,
				Validators:          []validator.String{check("instance profile", "an instance profile name or ARN", declared.ValidateInstanceProfile)},
			},
			"pre_runner_script": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Script run on the instance before its first registration (and before a warm instance is "+
					"stopped or declared ready): install tools, warm caches. The reconciler puts it into the launch template's user data, "+
					"which must be `runnerpool_user_data`'s; a failing script keeps the instance out of the pool. At most %d bytes once gzip-compressed and base64-encoded, as the user data carries it (6 to 7 KiB of a typical script).", declared.PreRunnerScriptBudget),
				Optional:   true,
				Validators: []validator.String{check("pre-runner script", fmt.Sprintf("at most %d bytes compressed, without NUL bytes", declared.PreRunnerScriptBudget), declared.ValidatePreRunnerScript)},
			},
			"labels": schema.ListAttribute{
				MarkdownDescription: "Extra GitHub runner labels of the instances.",
				ElementType:         types.StringType,
				Optional:            true,
				Validators: []validator.List{
					listSize{what: "labels", min: 1, max: declared.MaxLabels},
					listEach{check: check("label", "a label without spaces, commas or quotes", declared.ValidateLabel), unique: true},
				},
			},
			"tags": schema.MapAttribute{
				MarkdownDescription: fmt.Sprintf("Extra EC2 tags of the instances (at most %d). Runner instances have instance metadata tags "+
					"enabled: the agent notices a claim by reading its wake-up tag from the instance metadata service, which "+
					"is fast and costs no DynamoDB reads. With metadata tags on, EC2 refuses tag keys it cannot serve there, "+
					"so keys may use only letters, digits and `+ - = . , _ : @` (no spaces, no `/`, not `.`, `..` or `_info`); "+
					"`aws:` and `runnerpool:` keys are reserved. Values up to %d characters.", declared.MaxTags, declared.MaxTagValueLen),
				ElementType: types.StringType,
				Optional:    true,
				Validators:  []validator.Map{instanceTagsCheck{}},
			},
			"job_access": schema.StringAttribute{
				MarkdownDescription: "What a job may do on the instance, granted by the agent at first boot (the class's launch template " +
					"version passes it on): `user` (the unprivileged runner user: no root, no Docker daemon), `docker` (the same user with " +
					"a rootless Docker daemon of its own, as `DOCKER_HOST`: `container:` jobs and `services:` work, container root is the " +
					"runner user on the host and the metadata address stays blocked; the AMI needs Docker, rootlesskit, slirp4netns and " +
					"newuidmap, which the user data installs) or `root` (passwordless sudo and the docker group, as GitHub's hosted runners: " +
					"the job owns the machine, so `reuse` must be `same-repository` or `never`). Defaults to `user`. Changing it makes " +
					"new launch template versions and rolls warm pools. See the security documentation.",
				Optional:   true,
				Computed:   true,
				Default:    stringdefault.StaticString(declared.JobAccessUser),
				Validators: []validator.String{check("job access", "user, docker or root", declared.ValidateJobAccess)},
			},
			"reuse": schema.StringAttribute{
				MarkdownDescription: "Which runs an instance may serve after a run, enforced by the reconciler's release from its own " +
					"configuration (never from what the instance reports): `any-repository`, `same-repository` (pooled under the run's " +
					"repository alone) or `never` (the runner is deregistered and the instance terminated after every run). Unset is " +
					"`any-repository`, which `job_access = \"root\"` refuses at plan: a root job can forge what the agent reports, so its " +
					"instance is never handed to another repository.",
				Optional:   true,
				Validators: []validator.String{check("reuse", "any-repository, same-repository or never", declared.ValidateReuse)},
			},
			"max_runtime": schema.StringAttribute{
				PlanModifiers:       []planmodifier.String{durationByValue{}},
				MarkdownDescription: "Longest a run may hold an instance, as a Go duration (1m-120h). Past it the instance is terminated by the reconciler and by itself. Defaults to `6h`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString("6h"),
				Validators:          []validator.String{durationBetween("max runtime", declared.MinMaxRuntime, declared.MaxMaxRuntime)},
			},
			"idle_time": schema.StringAttribute{
				PlanModifiers:       []planmodifier.String{durationByValue{}},
				MarkdownDescription: "How long a hot or idle instance waits for a claim before it is recycled, as a Go duration (1m-24h). Defaults to `10m`.",
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString("10m"),
				Validators:          []validator.String{durationBetween("idle time", declared.MinIdleTime, declared.MaxIdleTime)},
			},
			"registration_wait": schema.StringAttribute{
				PlanModifiers: []planmodifier.String{durationByValue{}},
				MarkdownDescription: "How long a new instance of the class has to boot and register, as a Go duration (" +
					declared.FormatDuration(declared.MinRegistrationWait) + "-" + declared.FormatDuration(declared.MaxRegistrationWait) + "). " +
					"Unset, the reconciler reads it from the image: an image prepared for the class (its `" + declared.ImageTagJobAccess +
					"` and `" + declared.ImageTagRunnerVersion + "` tags, as [images/packer](https://github.com/runnerpool/terraform-provider-runnerpool/blob/main/images/packer/runnerpool.pkr.hcl) sets them, " +
					"fit the class) installs nothing at boot and gets the reconciler's `--registration-wait`; any other image installs packages " +
					"and waits for apt's locks, and gets " + declared.FormatDuration(declared.AptLockWait+declared.InstallAllowance) + " more. " +
					"The created instance's deadline and the provision's time limit grow with it ([Runner images](../guides/images.md)).",
				Optional:   true,
				Validators: []validator.String{durationBetween("registration wait", declared.MinRegistrationWait, declared.MaxRegistrationWait)},
			},
			"launch_template_id": schema.StringAttribute{
				MarkdownDescription: "Launch template the instances are created from (user data from `runnerpool_user_data`, IMDSv2 and " +
					"instance metadata tags). The reconciler launches the class from its own version of it: the template's default version " +
					"with the class's image, root volume, security groups, instance profile and pre-runner script on top (it needs " +
					"`ec2:CreateLaunchTemplateVersion` and `ec2:DeleteLaunchTemplateVersions` on the template).",
				Optional:   true,
				Validators: []validator.String{check("launch template", "a launch template id such as lt-0123456789abcdef0", declared.ValidateLaunchTemplate)},
			},
			"queue_url": schema.StringAttribute{
				MarkdownDescription: "URL of the class's pool queue (`runnerpool_pool_queue.<name>.url`).",
				Required:            true,
				Validators:          []validator.String{check("queue URL", "an SQS queue URL", declared.ValidateQueueURL)},
			},
			"max_instances": maxInstancesAttribute(),
			"version":       versionAttribute(),
		},
		Blocks: map[string]schema.Block{
			"cache": cacheBlock(),
		},
	}
	markReplacement(&resp.Schema)
}

// ValidateConfig checks what single attributes cannot: the gp3 ratios between size, IOPS and
// throughput.
func (r *RunnerClassResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m runnerClassModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !m.JobAccess.IsUnknown() && !m.Reuse.IsUnknown() && declared.ValidateJobAccess(m.JobAccess.ValueString()) == nil {
		if err := declared.CheckPosture(m.JobAccess.ValueString(), m.Reuse.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("reuse"), "Contradictory job access and reuse", err.Error())
		}
	}
	v := declared.Volume{Type: declared.VolumeGP3, SizeGiB: 30, IOPS: declared.MinIOPS, ThroughputMiBps: declared.MinThroughput}
	for _, f := range []struct {
		val types.Int64
		dst *int
	}{{m.VolumeSizeGiB, &v.SizeGiB}, {m.VolumeIOPS, &v.IOPS}, {m.VolumeThroughput, &v.ThroughputMiBps}} {
		if f.val.IsUnknown() {
			return
		}
		if !f.val.IsNull() {
			*f.dst = int(f.val.ValueInt64())
		}
	}
	// Values outside their own range are reported by the attribute validators; only when all three
	// are in range are the remaining problems the ratios between them.
	if v.SizeGiB < declared.MinVolumeGiB || v.SizeGiB > declared.MaxVolumeGiB || v.IOPS < declared.MinIOPS || v.IOPS > declared.MaxIOPS ||
		v.ThroughputMiBps < declared.MinThroughput || v.ThroughputMiBps > declared.MaxThroughput {
		return
	}
	for _, p := range v.Problems() {
		at := map[string]string{"iops": "volume_iops", "throughput_mibps": "volume_throughput_mibps"}[p.Field]
		resp.Diagnostics.AddAttributeError(path.Root(at), "Invalid volume performance", p.Err.Error())
	}
}

func (m *runnerClassModel) key() (string, string)      { return keyOf(m.Table, m.Name) }
func (m *runnerClassModel) storedVersion() types.Int64 { return m.Version }

// toConfig converts the plan into the domain model.
func (m runnerClassModel) toConfig(ctx context.Context) (declared.RunnerClass, diag.Diagnostics) {
	var diags diag.Diagnostics
	list := func(l types.List) []string {
		v, d := stringList(ctx, l)
		diags.Append(d...)
		return v
	}
	dur := func(s types.String) declared.Duration {
		d, err := time.ParseDuration(s.ValueString())
		if err != nil {
			diags.AddError("Invalid duration", err.Error())
		}
		return declared.Duration(d)
	}
	rc := declared.RunnerClass{
		Name: m.Name.ValueString(), Image: m.Image.ValueString(),
		CPU: int(m.CPU.ValueInt64()), MemoryMiB: int(m.MemoryMiB.ValueInt64()),
		InstanceTypes: list(m.InstanceTypes),
		Volume: declared.Volume{
			Type: m.VolumeType.ValueString(), SizeGiB: int(m.VolumeSizeGiB.ValueInt64()),
			IOPS: int(m.VolumeIOPS.ValueInt64()), ThroughputMiBps: int(m.VolumeThroughput.ValueInt64()),
		},
		UsageClass: m.UsageClass.ValueString(), Subnets: list(m.Subnets), SecurityGroups: list(m.SecurityGroups),
		InstanceProfile: m.InstanceProfile.ValueString(), PreRunnerScript: m.PreRunnerScript.ValueString(),
		Labels: list(m.Labels), MaxRuntime: dur(m.MaxRuntime), IdleTime: dur(m.IdleTime),
		LaunchTemplateID: m.LaunchTemplateID.ValueString(), QueueURL: m.QueueURL.ValueString(),
		MaxInstances: int(m.MaxInstances.ValueInt64()),
		JobAccess:    storedJobAccess(m.JobAccess.ValueString()), Reuse: m.Reuse.ValueString(),
		Cache: m.Cache.toConfig(),
	}
	if !m.RegistrationWait.IsNull() && !m.RegistrationWait.IsUnknown() {
		rc.RegistrationWait = dur(m.RegistrationWait)
	}
	if !m.Tags.IsNull() && !m.Tags.IsUnknown() {
		diags.Append(m.Tags.ElementsAs(ctx, &rc.Tags, false)...)
	}
	return rc, diags
}

// fromConfig sets m from a stored runner class, keeping null for unset optional values.
func (m *runnerClassModel) fromConfig(table string, rc declared.RunnerClass, version int64) {
	m.ID = types.StringValue(table + "/" + rc.Name)
	m.Table = types.StringValue(table)
	m.Name = types.StringValue(rc.Name)
	m.Image = types.StringValue(rc.Image)
	m.CPU = types.Int64Value(int64(rc.CPU))
	m.MemoryMiB = types.Int64Value(int64(rc.MemoryMiB))
	m.InstanceTypes = listValue(rc.InstanceTypes, m.InstanceTypes)
	m.VolumeType = types.StringValue(rc.Volume.Type)
	m.VolumeSizeGiB = types.Int64Value(int64(rc.Volume.SizeGiB))
	m.VolumeIOPS = types.Int64Value(int64(rc.Volume.IOPS))
	m.VolumeThroughput = types.Int64Value(int64(rc.Volume.ThroughputMiBps))
	m.UsageClass = types.StringValue(rc.UsageClass)
	m.Subnets = listValue(rc.Subnets, m.Subnets)
	m.SecurityGroups = listValue(rc.SecurityGroups, m.SecurityGroups)
	m.InstanceProfile = optionalString(rc.InstanceProfile, m.InstanceProfile)
	m.JobAccess = types.StringValue(cmp.Or(rc.JobAccess, declared.JobAccessUser))
	m.Reuse = optionalString(rc.Reuse, m.Reuse)
	m.PreRunnerScript = optionalString(rc.PreRunnerScript, m.PreRunnerScript)
	m.Labels = listValue(rc.Labels, m.Labels)
	m.MaxRuntime = durationValue(rc.MaxRuntime.Std(), m.MaxRuntime)
	m.IdleTime = durationValue(rc.IdleTime.Std(), m.IdleTime)
	m.RegistrationWait = types.StringNull()
	if rc.RegistrationWait > 0 {
		m.RegistrationWait = durationValue(rc.RegistrationWait.Std(), m.RegistrationWait)
	}
	m.LaunchTemplateID = optionalString(rc.LaunchTemplateID, m.LaunchTemplateID)
	m.QueueURL = types.StringValue(rc.QueueURL)
	m.MaxInstances = types.Int64Null()
	if rc.MaxInstances > 0 {
		m.MaxInstances = types.Int64Value(int64(rc.MaxInstances))
	}
	if len(rc.Tags) == 0 && (m.Tags.IsNull() || m.Tags.IsUnknown()) {
		m.Tags = types.MapNull(types.StringType)
	} else {
		m.Tags = types.MapValueMust(types.StringType, func() map[string]attr.Value {
			out := make(map[string]attr.Value, len(rc.Tags))
			for k, v := range rc.Tags {
				out[k] = types.StringValue(v)
			}
			return out
		}())
	}
	m.Cache = cacheValue(rc.Cache, m.Cache)
	m.Version = types.Int64Value(version)
}

// storedJobAccess stores "user" as the default (empty), so the spec hash of a class written before
// job_access existed does not change and its warm pools do not roll.
func storedJobAccess(s string) string {
	if s == declared.JobAccessUser {
		return ""
	}
	return s
}
