// runnerpool_pool_status: live instance counts by state, from the state table's state index (the
// table is the source of truth for instances; no EC2 call).
package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

var _ datasource.DataSourceWithConfigure = &PoolStatusDataSource{}

// NewPoolStatusDataSource returns the runnerpool_pool_status data source.
func NewPoolStatusDataSource() datasource.DataSource { return &PoolStatusDataSource{} }

// PoolStatusDataSource counts live instances.
type PoolStatusDataSource struct{ c *clients }

type poolStatusModel struct {
	Table  types.String `tfsdk:"table"`
	Pool   types.String `tfsdk:"pool"`
	Counts types.Map    `tfsdk:"counts"`
	Total  types.Int64  `tfsdk:"total"`
	Pools  types.Map    `tfsdk:"pools"`
}

func (d *PoolStatusDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pool_status"
}

func (d *PoolStatusDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Live instance counts by state (`created`, `warming`, `ready`, `stopped`, `idle`, `claimed`, `running`, " +
			"`terminating`), read from the state table's state index. Index reads are eventually consistent: counts may lag a " +
			"transition by a moment.",
		Attributes: map[string]schema.Attribute{
			"table": schema.StringAttribute{
				MarkdownDescription: "State table.",
				Required:            true,
				Validators:          []validator.String{tableNameValidator()},
			},
			"pool": schema.StringAttribute{
				MarkdownDescription: "Warm pool to count; unset counts every live instance (warm pools and provisions).",
				Optional:            true,
				Validators:          []validator.String{nameValidator("pool name")},
			},
			"counts": schema.MapAttribute{
				MarkdownDescription: "Instances by state (every live state, zero included).",
				ElementType:         types.Int64Type,
				Computed:            true,
			},
			"total": schema.Int64Attribute{
				MarkdownDescription: "Live instances counted.",
				Computed:            true,
			},
			"pools": schema.MapAttribute{
				MarkdownDescription: "Instances by state for each warm pool with live instances (keyed by pool name; instances " +
					"created by provisions outside pools are under `\"\"`). With `pool` set, only that pool.",
				ElementType: types.MapType{ElemType: types.Int64Type},
				Computed:    true,
			},
		},
	}
}

func (d *PoolStatusDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.c = providerData(req.ProviderData, &resp.Diagnostics)
}

func zeroCounts() map[string]int64 {
	m := make(map[string]int64, len(store.LiveStates))
	for _, s := range store.LiveStates {
		m[string(s)] = 0
	}
	return m
}

func countsValue(m map[string]int64) types.Map {
	vals := make(map[string]attr.Value, len(m))
	for k, v := range m {
		vals[k] = types.Int64Value(v)
	}
	return types.MapValueMust(types.Int64Type, vals)
}

func (d *PoolStatusDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m poolStatusModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(d.c, &resp.Diagnostics) {
		return
	}
	table, pool := m.Table.ValueString(), m.Pool.ValueString()
	live, err := d.c.store(table).Live(ctx)
	if err != nil {
		addError(&resp.Diagnostics, "Cannot list live instances", fmt.Sprintf("Reading the live instances of table %s failed.", table), err)
		return
	}
	counts := zeroCounts()
	byPool := map[string]map[string]int64{}
	var total int64
	for _, in := range live {
		if !m.Pool.IsNull() && in.Pool != pool {
			continue
		}
		counts[string(in.State)]++
		total++
		if byPool[in.Pool] == nil {
			byPool[in.Pool] = zeroCounts()
		}
		byPool[in.Pool][string(in.State)]++
	}
	pools := make(map[string]attr.Value, len(byPool))
	for p, c := range byPool {
		pools[p] = countsValue(c)
	}
	m.Counts = countsValue(counts)
	m.Total = types.Int64Value(total)
	m.Pools = types.MapValueMust(types.MapType{ElemType: types.Int64Type}, pools)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}
