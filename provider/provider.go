// Package provider is the Terraform glue of runnerpool: the provider `runnerpool` and its resources
// and data sources. Domain logic lives in internal/ (store, config, schedule, userdata); this package
// only maps Terraform to it.
package provider

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is the registry address the provider is served as.
const Address = "registry.terraform.io/runnerpool/runnerpool"

var _ provider.Provider = &RunnerpoolProvider{}

// RunnerpoolProvider is the provider implementation.
type RunnerpoolProvider struct {
	version string
	now     func() time.Time
}

// Model is the provider configuration.
type Model struct {
	Region       types.String     `tfsdk:"region"`
	Profile      types.String     `tfsdk:"profile"`
	DeploymentID types.String     `tfsdk:"deployment_id"`
	AssumeRole   *assumeRoleModel `tfsdk:"assume_role"`
	Endpoints    *endpointsModel  `tfsdk:"endpoints"`
}

type assumeRoleModel struct {
	RoleARN     types.String `tfsdk:"role_arn"`
	SessionName types.String `tfsdk:"session_name"`
	ExternalID  types.String `tfsdk:"external_id"`
	Duration    types.String `tfsdk:"duration"`
}

type endpointsModel struct {
	DynamoDB types.String `tfsdk:"dynamodb"`
	SQS      types.String `tfsdk:"sqs"`
	STS      types.String `tfsdk:"sts"`
}

// New returns a constructor for the provider, as providerserver.Serve expects.
func New(version string) func() provider.Provider {
	return newWithClock(version, time.Now)
}

// newWithClock lets tests control the clock the data sources read ("now").
func newWithClock(version string, now func() time.Time) func() provider.Provider {
	return func() provider.Provider { return &RunnerpoolProvider{version: version, now: now} }
}

// Metadata names the provider.
func (p *RunnerpoolProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "runnerpool"
	resp.Version = p.version
}

var (
	deploymentIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
	roleARNRE      = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}$`)
	endpointRE     = regexp.MustCompile(`^https?://[^\s/$.?#][^\s]*$`)
)

// Schema describes the provider configuration.
func (p *RunnerpoolProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	endpoint := func(service, env string) schema.StringAttribute {
		return schema.StringAttribute{
			MarkdownDescription: fmt.Sprintf("URL of the %s endpoint, for VPC endpoints, other partitions or a local emulator. "+
				"Without it the SDK's resolution applies (`%s`, `AWS_ENDPOINT_URL`, the shared config file, then the region's public endpoint).", service, env),
			Optional:   true,
			Validators: []validator.String{matches("endpoint URL", "an http(s) URL such as https://dynamodb.eu-west-1.amazonaws.com", endpointRE)},
		}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "Declares runnerpool's state table, pool queues, runner classes and warm pools.",
		Attributes: map[string]schema.Attribute{
			"region": schema.StringAttribute{
				MarkdownDescription: "AWS region. Defaults to the SDK's default chain (`AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's region).",
				Optional:            true,
				Validators: []validator.String{matches("region", "an AWS region name such as eu-west-1",
					regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$`))},
			},
			"profile": schema.StringAttribute{
				MarkdownDescription: "Named profile of the shared AWS config and credentials files. Defaults to `AWS_PROFILE`, then `default`. " +
					"Credentials otherwise come from the SDK's default chain: environment, SSO, web identity, container and instance roles.",
				Optional: true,
			},
			"deployment_id": schema.StringAttribute{
				MarkdownDescription: "Identifies this runnerpool deployment (1-32 lower-case letters, digits and `-`). It prefixes default queue names " +
					"and is written to the `runnerpool:deployment` tag of every table and queue the provider creates.",
				Optional:   true,
				Validators: []validator.String{matches("deployment id", "1-32 lower-case letters, digits or '-', starting with a letter or digit", deploymentIDRE)},
			},
		},
		Blocks: map[string]schema.Block{
			"assume_role": schema.SingleNestedBlock{
				MarkdownDescription: "Assume an IAM role with STS, using the credentials of the default chain (or `profile`) as the source.",
				Attributes: map[string]schema.Attribute{
					"role_arn": schema.StringAttribute{
						MarkdownDescription: "ARN of the role to assume. Required in the block.",
						Optional:            true, // required when the block is present; checked in Configure
						Validators:          []validator.String{matches("role ARN", "an IAM role ARN such as arn:aws:iam::123456789012:role/runnerpool", roleARNRE)},
					},
					"session_name": schema.StringAttribute{
						MarkdownDescription: "Session name recorded in CloudTrail. Defaults to `terraform-provider-runnerpool`.",
						Optional:            true,
						Validators: []validator.String{matches("session name", "2-64 characters of letters, digits and =,.@-",
							regexp.MustCompile(`^[\w+=,.@-]{2,64}$`))},
					},
					"external_id": schema.StringAttribute{
						MarkdownDescription: "External id the role's trust policy requires, if any.",
						Optional:            true,
					},
					"duration": schema.StringAttribute{
						MarkdownDescription: "Session duration as a Go duration (`1h`, `90m`): 15 minutes to 12 hours. Defaults to 1 hour.",
						Optional:            true,
						Validators:          []validator.String{durationBetween("session duration", 15*time.Minute, 12*time.Hour)},
					},
				},
			},
			"endpoints": schema.SingleNestedBlock{
				MarkdownDescription: "Endpoint overrides per service. With a DynamoDB override the provider does not validate response checksums " +
					"(DynamoDB Local does not always send matching ones).",
				Attributes: map[string]schema.Attribute{
					"dynamodb": endpoint("DynamoDB", "AWS_ENDPOINT_URL_DYNAMODB"),
					"sqs":      endpoint("SQS", "AWS_ENDPOINT_URL_SQS"),
					"sts":      endpoint("STS", "AWS_ENDPOINT_URL_STS"),
				},
			},
		},
	}
}

// Configure builds the AWS clients every resource and data source shares.
func (p *RunnerpoolProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m Model
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if unknown := m.unknownPaths(); len(unknown) > 0 {
		for _, at := range unknown {
			resp.Diagnostics.AddAttributeError(at, "Unknown provider configuration",
				"This value is not known until apply, but the provider needs it to reach AWS. Set it from a variable or a value known at plan time.")
		}
		return
	}
	if m.AssumeRole != nil && m.AssumeRole.RoleARN.ValueString() == "" {
		resp.Diagnostics.AddAttributeError(path.Root("assume_role").AtName("role_arn"), "Missing role ARN",
			"The assume_role block needs role_arn.")
		return
	}
	c, err := newClients(ctx, m, p.version, p.now)
	if err != nil {
		addError(&resp.Diagnostics, "Cannot configure AWS access",
			"The provider could not load an AWS configuration from its arguments and the SDK's default chain.", err)
		return
	}
	resp.DataSourceData = c
	resp.ResourceData = c
}

func (m Model) unknownPaths() []path.Path {
	var out []path.Path
	check := func(v types.String, p path.Path) {
		if v.IsUnknown() {
			out = append(out, p)
		}
	}
	check(m.Region, path.Root("region"))
	check(m.Profile, path.Root("profile"))
	check(m.DeploymentID, path.Root("deployment_id"))
	if a := m.AssumeRole; a != nil {
		ar := path.Root("assume_role")
		check(a.RoleARN, ar.AtName("role_arn"))
		check(a.SessionName, ar.AtName("session_name"))
		check(a.ExternalID, ar.AtName("external_id"))
		check(a.Duration, ar.AtName("duration"))
	}
	if e := m.Endpoints; e != nil {
		ep := path.Root("endpoints")
		check(e.DynamoDB, ep.AtName("dynamodb"))
		check(e.SQS, ep.AtName("sqs"))
		check(e.STS, ep.AtName("sts"))
	}
	return out
}

// Resources lists the provider's resources.
func (p *RunnerpoolProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		NewStateTableResource,
		NewPoolQueueResource,
		NewRunnerClassResource,
		NewWarmPoolResource,
		NewScaleSetResource,
	}
}

// DataSources lists the provider's data sources.
func (p *RunnerpoolProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		NewUserDataDataSource,
		NewScheduleDataSource,
		NewPoolStatusDataSource,
	}
}
