// runnerpool_user_data: the instance bootstrap (internal/userdata) rendered for a launch template,
// so the launch template Terraform creates and the instances the reconciler launches agree on table,
// region, agent binaries and claim notice.
package provider

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
)

var (
	_ datasource.DataSourceWithConfigure      = &UserDataDataSource{}
	_ datasource.DataSourceWithValidateConfig = &UserDataDataSource{}
)

// NewUserDataDataSource returns the runnerpool_user_data data source.
func NewUserDataDataSource() datasource.DataSource { return &UserDataDataSource{} }

// UserDataDataSource renders user data.
type UserDataDataSource struct{ c *clients }

type artifactModel struct {
	URL    types.String `tfsdk:"url"`
	SHA256 types.String `tfsdk:"sha256"`
}

type userDataModel struct {
	Table           types.String   `tfsdk:"table"`
	Region          types.String   `tfsdk:"region"`
	Notice          types.String   `tfsdk:"notice"`
	InstanceKeys    types.String   `tfsdk:"instance_keys"`
	Arch            types.String   `tfsdk:"arch"`
	AgentX64        *artifactModel `tfsdk:"agent_x64"`
	AgentARM64      *artifactModel `tfsdk:"agent_arm64"`
	PreRunnerScript types.String   `tfsdk:"pre_runner_script"`
	RunnerBaseURL   types.String   `tfsdk:"runner_base_url"`
	AllowJobMeta    types.Bool     `tfsdk:"allow_job_metadata_access"`
	LogGroup        types.String   `tfsdk:"log_group"`
	CacheURL        types.String   `tfsdk:"cache_url"`
	Rendered        types.String   `tfsdk:"rendered"`
	RenderedBase64  types.String   `tfsdk:"rendered_base64"`
	RunnerVersion   types.String   `tfsdk:"runner_version"`
	RunnerSHA256X64 types.String   `tfsdk:"runner_sha256_x64"`
	RunnerSHA256ARM types.String   `tfsdk:"runner_sha256_arm64"`
}

var sha256RE = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

func httpsURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want an https:// URL", s)
	}
	if u.User != nil {
		return fmt.Errorf("%q: credentials in URLs end up in logs; use a pre-signed or public URL", s)
	}
	return nil
}

func (d *UserDataDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_user_data"
}

func (d *UserDataDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	artifact := func(arch string) schema.SingleNestedAttribute {
		return schema.SingleNestedAttribute{
			MarkdownDescription: fmt.Sprintf("The runnerpool binary for %s (linux), downloaded at boot and checked against its SHA-256. "+
				"Required unless `arch` excludes %s.", arch, arch),
			Optional: true,
			Attributes: map[string]schema.Attribute{
				"url": schema.StringAttribute{
					MarkdownDescription: "https URL of the binary (a release asset, an S3 object behind a VPC endpoint).",
					Required:            true,
					Validators:          []validator.String{check("agent URL", "an https:// URL", httpsURL)},
				},
				"sha256": schema.StringAttribute{
					MarkdownDescription: "SHA-256 of the binary, 64 hexadecimal digits (the release's SHA256SUMS).",
					Required:            true,
					Validators:          []validator.String{matches("SHA-256", "64 hexadecimal digits", sha256RE)},
				},
			},
		}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Renders the user data of runnerpool instances: a bash script, run once by cloud-init, that installs the " +
			"runnerpool agent and the pinned GitHub Actions runner (both checked against a SHA-256; the runner root-owned, with a sha256 " +
			"manifest the agent verifies it against before every registration and release), creates the unprivileged runner user, blocks " +
			"jobs from the instance metadata service (see `allow_job_metadata_access`) and starts the agent as a systemd service. Use `rendered_base64` as a launch template's `user_data`, with " +
			"`metadata_options { http_tokens = \"required\", instance_metadata_tags = \"enabled\" }` (IMDSv2 only; the agent reads its " +
			"claim notice from instance tags). No secret is rendered: instances get per-claim credentials through their own items.",
		Attributes: map[string]schema.Attribute{
			"table": schema.StringAttribute{
				MarkdownDescription: "State table the agent uses.",
				Required:            true,
				Validators:          []validator.String{tableNameValidator()},
			},
			"region": schema.StringAttribute{
				MarkdownDescription: "AWS region of the table. Defaults to the provider's region.",
				Optional:            true,
				Validators: []validator.String{matches("region", "an AWS region name such as eu-west-1",
					regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$`))},
			},
			"notice": schema.StringAttribute{
				MarkdownDescription: "How an idle agent notices its claim: `imds-tags` (default; instance metadata tags, free and fast) or `poll` (DynamoDB reads).",
				Optional:            true,
				Validators:          []validator.String{oneOf("notice", "imds-tags", "poll")},
			},
			"instance_keys": schema.StringAttribute{
				MarkdownDescription: "How the state table keys the instance's items; must match the reconciler's `RUNNERPOOL_INSTANCE_KEYS`. " +
					"An instance's items sit in two partitions: `INSTANCE#<key>` (what the control plane decides from, written by the reconciler only) " +
					"and `AGENT#<key>` (what the agent reports: heartbeat, signals, acknowledgements). " +
					"`arn` (default): the key is the instance ARN, which the agent builds from its instance identity document, so the instance role " +
					"can confine every instance to its own items (`dynamodb:LeadingKeys` = `INSTANCE#${ec2:SourceInstanceARN}` to read, " +
					"`AGENT#${ec2:SourceInstanceARN}` to read and write). `id`: the key is the instance id (`INSTANCE#<instance id>`, `AGENT#<instance id>`).",
				Optional:   true,
				Validators: []validator.String{oneOf("instance keys", userdata.KeysARN, userdata.KeysID)},
			},
			"arch": schema.StringAttribute{
				MarkdownDescription: "`x64` or `arm64` to render for one architecture; unset renders a script that picks at boot.",
				Optional:            true,
				Validators:          []validator.String{oneOf("architecture", string(userdata.ArchX64), string(userdata.ArchARM64))},
			},
			"agent_x64":   artifact("x64"),
			"agent_arm64": artifact("arm64"),
			"pre_runner_script": schema.StringAttribute{
				MarkdownDescription: "Pre-runner script to install on the instance (usually the runner class's `pre_runner_script`).",
				Optional:            true,
				Validators:          []validator.String{check("pre-runner script", fmt.Sprintf("at most %d bytes compressed, without NUL bytes", declared.PreRunnerScriptBudget), declared.ValidatePreRunnerScript)},
			},
			"runner_base_url": schema.StringAttribute{
				MarkdownDescription: "Mirror of the GitHub Actions runner releases (same file names). Defaults to " + userdata.DefaultRunnerBaseURL + ".",
				Optional:            true,
				Validators:          []validator.String{check("runner base URL", "an https:// URL", httpsURL)},
			},
			"allow_job_metadata_access": schema.BoolAttribute{
				MarkdownDescription: "Leave the instance metadata service (`169.254.169.254`, `fd00:ec2::254`) reachable by jobs. By default (`false`) " +
					"the script blocks the runner user (an iptables owner match) and containers (Docker's `DOCKER-USER` chain) from it, at every " +
					"boot before docker and the agent start, because whatever reaches it gets the instance role's credentials, and a job is " +
					"untrusted code on an instance the next workflow reuses. The agent, which runs as root, reaches it either way. Set `true` only " +
					"for jobs that cannot do without it; jobs that need AWS credentials should assume a role with GitHub's OIDC token instead.",
				Optional: true,
			},
			"log_group": schema.StringAttribute{
				MarkdownDescription: "CloudWatch Logs group the instances ship their bootstrap log and journal to (the journal's entries of root and of the " +
					"kernel only, never what a job writes), in streams `<instance-id>/bootstrap` and `<instance-id>/journal`, by a systemd unit " +
					"running `runnerpool logs`. The instance role needs `logs:CreateLogStream` and `logs:PutLogEvents` on the group; create the " +
					"group (with its retention) in Terraform. None when unset.",
				Optional:   true,
				Validators: []validator.String{check("log group", "a CloudWatch Logs group name", userdata.ValidateLogGroup)},
			},
			"cache_url": schema.StringAttribute{
				MarkdownDescription: "The reconciler's URL as the instances reach it (the API's, such as `https://runnerpool.example.com`), " +
					"where the agent of a runner class whose `cache` block is enabled asks for its run's presigned cache URLs (docs/cache.md). " +
					"Instances of other classes never use it. Without it, no class's instances serve the cache.",
				Optional:   true,
				Validators: []validator.String{check("cache URL", "an https URL such as https://runnerpool.example.com", validateCacheURL)},
			},
			"rendered": schema.StringAttribute{
				MarkdownDescription: "The script.",
				Computed:            true,
			},
			"rendered_base64": schema.StringAttribute{
				MarkdownDescription: "The script, base64-encoded, as launch templates take it.",
				Computed:            true,
			},
			"runner_version": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("The GitHub Actions runner version the script installs. Unset, it is the release this "+
					"provider was built with (%s); the reconciler renders the current release it reads from GitHub into each class's "+
					"launch template version anyway. Set, it pins a version (give `runner_sha256_x64` and/or `runner_sha256_arm64`, "+
					"as the architectures need, from the release notes). GitHub refuses to configure or register a runner below %s, "+
					"so an older version is refused at plan time.", userdata.RunnerVersion, runnerversion.Floor),
				Optional:   true,
				Computed:   true,
				Validators: []validator.String{check("runner version", "a runner version of "+runnerversion.Floor+" or later", checkRunnerVersion)},
			},
			"runner_sha256_x64":   runnerChecksum("x64"),
			"runner_sha256_arm64": runnerChecksum("arm64"),
		},
	}
}

// checkRunnerVersion refuses a runner version GitHub would not register.
func checkRunnerVersion(s string) error {
	_, err := runnerversion.CheckFloor(s)
	return err
}

// runnerChecksum is the attribute of a pinned runner's checksum for arch.
func runnerChecksum(arch string) schema.StringAttribute {
	return schema.StringAttribute{
		MarkdownDescription: fmt.Sprintf("SHA-256 of `actions-runner-linux-%s-<runner_version>.tar.gz`, from the release notes. "+
			"Required with `runner_version` unless `arch` excludes %s.", arch, arch),
		Optional:   true,
		Validators: []validator.String{check("runner checksum", "64 hexadecimal digits", sha256Hex)},
	}
}

func sha256Hex(s string) error {
	if !sha256RE.MatchString(s) {
		return fmt.Errorf("%q: want 64 hexadecimal digits", s)
	}
	return nil
}

// validateRunnerPin requires the checksums a pinned runner version needs for the chosen architecture.
func validateRunnerPin(m userDataModel, diags *diag.Diagnostics) {
	if m.RunnerVersion.IsUnknown() {
		return
	}
	if m.RunnerVersion.IsNull() {
		if !m.RunnerSHA256X64.IsNull() || !m.RunnerSHA256ARM.IsNull() {
			diags.AddAttributeError(path.Root("runner_version"), "Runner checksum without a version",
				"runner_sha256_x64 and runner_sha256_arm64 are the checksums of a pinned runner_version: set it, or remove them.")
		}
		return
	}
	arch := m.Arch.ValueString()
	if arch != string(userdata.ArchARM64) && m.RunnerSHA256X64.IsNull() {
		diags.AddAttributeError(path.Root("runner_sha256_x64"), "Missing runner checksum",
			"runner_sha256_x64 is required with runner_version unless arch = \"arm64\".")
	}
	if arch != string(userdata.ArchX64) && m.RunnerSHA256ARM.IsNull() {
		diags.AddAttributeError(path.Root("runner_sha256_arm64"), "Missing runner checksum",
			"runner_sha256_arm64 is required with runner_version unless arch = \"x64\".")
	}
}

// ValidateConfig requires the agent binaries the chosen architecture needs.
func (d *UserDataDataSource) ValidateConfig(ctx context.Context, req datasource.ValidateConfigRequest, resp *datasource.ValidateConfigResponse) {
	var m userDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Arch.IsUnknown() {
		return
	}
	arch := m.Arch.ValueString()
	if arch != string(userdata.ArchARM64) && m.AgentX64 == nil {
		resp.Diagnostics.AddAttributeError(path.Root("agent_x64"), "Missing agent binary",
			"agent_x64 is required unless arch = \"arm64\".")
	}
	if arch != string(userdata.ArchX64) && m.AgentARM64 == nil {
		resp.Diagnostics.AddAttributeError(path.Root("agent_arm64"), "Missing agent binary",
			"agent_arm64 is required unless arch = \"x64\".")
	}
	validateRunnerPin(m, &resp.Diagnostics)
}

func (d *UserDataDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.c = providerData(req.ProviderData, &resp.Diagnostics)
}

func (d *UserDataDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m userDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p := userdata.Params{
		Table: m.Table.ValueString(), Region: m.Region.ValueString(), Notice: m.Notice.ValueString(), InstanceKeys: m.InstanceKeys.ValueString(),
		Arch: userdata.Arch(m.Arch.ValueString()), PreRunnerScript: m.PreRunnerScript.ValueString(),
		RunnerBaseURL: m.RunnerBaseURL.ValueString(), AllowJobMetadata: m.AllowJobMeta.ValueBool(), LogGroup: m.LogGroup.ValueString(),
		CacheURL: m.CacheURL.ValueString(),
	}
	if p.Region == "" && d.c != nil {
		p.Region = d.c.region
	}
	if a := m.AgentX64; a != nil {
		p.AgentX64 = userdata.Artifact{URL: a.URL.ValueString(), SHA256: a.SHA256.ValueString()}
	}
	if a := m.AgentARM64; a != nil {
		p.AgentARM64 = userdata.Artifact{URL: a.URL.ValueString(), SHA256: a.SHA256.ValueString()}
	}
	if !m.RunnerVersion.IsNull() {
		p.Runner = &userdata.RunnerPin{Version: m.RunnerVersion.ValueString(),
			SHA256X64: strings.ToLower(m.RunnerSHA256X64.ValueString()), SHA256ARM64: strings.ToLower(m.RunnerSHA256ARM.ValueString())}
	}
	script, err := userdata.Render(p)
	if err != nil {
		addError(&resp.Diagnostics, "Cannot render the user data", "The parameters were refused by the renderer.", err)
		return
	}
	m.Rendered = types.StringValue(script)
	m.RenderedBase64 = types.StringValue(base64.StdEncoding.EncodeToString([]byte(script)))
	pin, _ := userdata.RunnerOf(script)
	m.RunnerVersion = types.StringValue(pin.Version)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// validateCacheURL accepts an absolute http(s) URL with a host (the user data checks it again).
func validateCacheURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.ContainsAny(s, " '\"") {
		return fmt.Errorf("cache URL %q: want an absolute https URL such as https://runnerpool.example.com", s)
	}
	return nil
}
