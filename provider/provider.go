// Package provider is the Terraform glue of runnerpool: the provider `runnerpool` and its resources
// and data sources. Domain logic lives in internal/; this package only maps Terraform to it.
package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is the registry address the provider is served as.
const Address = "registry.terraform.io/runnerpool/runnerpool"

var _ provider.Provider = &RunnerpoolProvider{}

// RunnerpoolProvider is the provider implementation.
type RunnerpoolProvider struct {
	version string
}

// Model is the provider configuration.
type Model struct {
	Region       types.String `tfsdk:"region"`
	DeploymentID types.String `tfsdk:"deployment_id"`
}

// New returns a constructor for the provider, as providerserver.Serve expects.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &RunnerpoolProvider{version: version} }
}

// Metadata names the provider.
func (p *RunnerpoolProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "runnerpool"
	resp.Version = p.version
}

// Schema describes the provider configuration.
func (p *RunnerpoolProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Declares runnerpool's state table, pool queues, runner classes and warm pools.",
		Attributes: map[string]schema.Attribute{
			"region": schema.StringAttribute{
				MarkdownDescription: "AWS region. Defaults to the SDK's default chain (`AWS_REGION`, profile).",
				Optional:            true,
			},
			"deployment_id": schema.StringAttribute{
				MarkdownDescription: "Identifies this runnerpool deployment; used in names and tags.",
				Optional:            true,
			},
		},
	}
}

// Configure is completed by the provider issue; the foundation provider has nothing to configure.
func (p *RunnerpoolProvider) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {
}

// Resources lists the provider's resources.
func (p *RunnerpoolProvider) Resources(context.Context) []func() resource.Resource { return nil }

// DataSources lists the provider's data sources.
func (p *RunnerpoolProvider) DataSources(context.Context) []func() datasource.DataSource { return nil }
