// Conversions between Terraform values and Go values, keeping the difference between an unset
// attribute (null) and an empty one, so reading back what was written never shows a spurious diff.
package provider

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// stringMap converts a map attribute; null is an empty map.
func stringMap(ctx context.Context, m types.Map) (map[string]string, diag.Diagnostics) {
	out := map[string]string{}
	if m.IsNull() || m.IsUnknown() {
		return out, nil
	}
	d := m.ElementsAs(ctx, &out, false)
	return out, d
}

// userTagsValue is the tags attribute for the tags found, without the provider's own
// ("runnerpool:") tags. No user tags keep a null attribute null.
func userTagsValue(found map[string]string, prior types.Map) types.Map {
	user := maps.Clone(found)
	maps.DeleteFunc(user, func(k, _ string) bool { return strings.HasPrefix(k, managedTagPrefix) })
	if len(user) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.MapNull(types.StringType)
	}
	return mapValue(user)
}

func mapValue(m map[string]string) types.Map {
	vals := make(map[string]attr.Value, len(m))
	for k, v := range m {
		vals[k] = types.StringValue(v)
	}
	return types.MapValueMust(types.StringType, vals)
}

// stringList converts a list attribute; null is nil.
func stringList(ctx context.Context, l types.List) ([]string, diag.Diagnostics) {
	if l.IsNull() || l.IsUnknown() {
		return nil, nil
	}
	var out []string
	d := l.ElementsAs(ctx, &out, false)
	return out, d
}

// listValue is the list attribute for values read back: empty stays null when the prior value
// was null (unset in the configuration).
func listValue(values []string, prior types.List) types.List {
	if len(values) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.ListNull(types.StringType)
	}
	elems := make([]attr.Value, len(values))
	for i, v := range values {
		elems[i] = types.StringValue(v)
	}
	return types.ListValueMust(types.StringType, elems)
}

// optionalString is the attribute for a string read back: "" stays null when the prior value was
// null.
func optionalString(v string, prior types.String) types.String {
	if v == "" && (prior.IsNull() || prior.IsUnknown()) {
		return types.StringNull()
	}
	return types.StringValue(v)
}

// durationValue is the attribute for a duration read back: the prior spelling ("6h") is kept when
// it means the same as the stored one ("6h0m0s").
func durationValue(d time.Duration, prior types.String) types.String {
	if p, err := time.ParseDuration(prior.ValueString()); err == nil && !prior.IsNull() && !prior.IsUnknown() && p == d {
		return prior
	}
	return types.StringValue(declared.FormatDuration(d))
}
