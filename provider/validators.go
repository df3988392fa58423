// Plan-time validators. Each wraps a check of the domain packages (internal/schedule,
// internal/declared, internal/instancetype) so Terraform and the reconciler apply the same rules, and
// reports on the attribute at fault (for list elements, on the element).
package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

var (
	_ validator.String = stringCheck{}
	_ validator.Int64  = int64Between{}
	_ validator.List   = listEach{}
	_ validator.List   = listSize{}
	_ validator.Map    = tagsCheck{}
	_ validator.Map    = instanceTagsCheck{}
)

// stringCheck validates a known string with a domain check.
type stringCheck struct {
	what string // "schedule time": the summary reads "Invalid schedule time"
	desc string // for documentation, e.g. "a 24-hour HH:MM time"
	fn   func(string) error
}

func (v stringCheck) Description(context.Context) string         { return "must be " + v.desc }
func (v stringCheck) MarkdownDescription(context.Context) string { return "must be " + v.desc }

func (v stringCheck) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.fn(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.what, err.Error())
	}
}

// oneOf accepts only the listed values.
func oneOf(what string, values ...string) stringCheck {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = fmt.Sprintf("%q", v)
	}
	return stringCheck{what: what, desc: "one of " + strings.Join(quoted, ", "), fn: func(s string) error {
		for _, v := range values {
			if s == v {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", s, strings.Join(quoted, ", "))
	}}
}

// matches accepts strings matching re.
func matches(what, desc string, re *regexp.Regexp) stringCheck {
	return stringCheck{what: what, desc: desc, fn: func(s string) error {
		if !re.MatchString(s) {
			return fmt.Errorf("%q: want %s", s, desc)
		}
		return nil
	}}
}

// int64Between accepts min <= n <= max.
type int64Between struct {
	what     string
	min, max int64
}

func (v int64Between) Description(context.Context) string {
	return fmt.Sprintf("must be between %d and %d", v.min, v.max)
}
func (v int64Between) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v int64Between) ValidateInt64(_ context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if n := req.ConfigValue.ValueInt64(); n < v.min || n > v.max {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.what,
			fmt.Sprintf("%s %d: must be between %d and %d", v.what, n, v.min, v.max))
	}
}

// listEach validates every known string element of a list, and optionally refuses duplicates.
type listEach struct {
	check  stringCheck
	unique bool
}

func (v listEach) Description(ctx context.Context) string {
	d := "each element " + v.check.Description(ctx)
	if v.unique {
		d += ", without duplicates"
	}
	return d
}
func (v listEach) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v listEach) ValidateList(_ context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	seen := map[string]bool{}
	for i, el := range req.ConfigValue.Elements() {
		s, ok := el.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			continue
		}
		p := req.Path.AtListIndex(i)
		if err := v.check.fn(s.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(p, "Invalid "+v.check.what, err.Error())
			continue
		}
		if v.unique && seen[s.ValueString()] {
			resp.Diagnostics.AddAttributeError(p, "Duplicate "+v.check.what, fmt.Sprintf("%q is listed twice", s.ValueString()))
		}
		seen[s.ValueString()] = true
	}
}

// listSize bounds the number of elements (or blocks) of a set list; an empty list where unset means
// "all" (instance types, days) would be ambiguous, so min is usually 1.
type listSize struct {
	what     string
	min, max int
}

func (v listSize) Description(context.Context) string {
	return fmt.Sprintf("must have between %d and %d elements", v.min, v.max)
}
func (v listSize) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v listSize) ValidateList(_ context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	// Null is unset: Required, or the attribute's meaning when unset, covers it.
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if n := len(req.ConfigValue.Elements()); n < v.min || n > v.max {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid number of "+v.what,
			fmt.Sprintf("%d %s: between %d and %d are allowed", n, v.what, v.min, v.max))
	}
}

// tagsCheck validates AWS tags: keys 1-128 characters, values up to 256, and no key in the
// provider's own "runnerpool:" namespace (those tags are managed by the provider).
type tagsCheck struct{}

func (tagsCheck) Description(context.Context) string {
	return `keys of 1-128 characters not starting with "runnerpool:" or "aws:", values of at most 256 characters`
}
func (v tagsCheck) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (tagsCheck) ValidateMap(_ context.Context, req validator.MapRequest, resp *validator.MapResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	for k, el := range req.ConfigValue.Elements() {
		p := req.Path.AtMapKey(k)
		switch {
		case k == "" || len(k) > 128:
			resp.Diagnostics.AddAttributeError(p, "Invalid tag key", fmt.Sprintf("tag key %q: 1-128 characters", k))
		case strings.HasPrefix(k, managedTagPrefix) || strings.HasPrefix(strings.ToLower(k), "aws:"):
			resp.Diagnostics.AddAttributeError(p, "Reserved tag key",
				fmt.Sprintf("tag key %q: keys starting with %q are set by the provider and \"aws:\" by AWS", k, managedTagPrefix))
		}
		if s, ok := el.(types.String); ok && !s.IsUnknown() && len(s.ValueString()) > 256 {
			resp.Diagnostics.AddAttributeError(p, "Invalid tag value", fmt.Sprintf("tag %q: values have at most 256 characters", k))
		}
	}
}

// durationBetween accepts Go duration strings ("90m", "6h") within [min, max].
func durationBetween(what string, min, max time.Duration) stringCheck {
	return stringCheck{what: what, desc: fmt.Sprintf("a Go duration such as \"90m\" or \"6h\", between %s and %s", min, max), fn: func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration: use a number and a unit, such as \"90m\" or \"6h\"", s)
		}
		return declared.ValidateDuration(what, d, min, max)
	}}
}

// instanceTagsCheck checks a runner class's tags map: the count, then each key against what EC2 allows
// with instance metadata tags on (declared.ValidateTagKey), each value's length.
type instanceTagsCheck struct{}

func (instanceTagsCheck) Description(context.Context) string {
	return fmt.Sprintf("at most %d tags; keys of letters, digits and + - = . , _ : @ only (instance metadata tags), not aws: or runnerpool:", declared.MaxTags)
}
func (v instanceTagsCheck) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (instanceTagsCheck) ValidateMap(_ context.Context, req validator.MapRequest, resp *validator.MapResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	elems := req.ConfigValue.Elements()
	if len(elems) > declared.MaxTags {
		resp.Diagnostics.AddAttributeError(req.Path, "Too many tags",
			fmt.Sprintf("%d tags: at most %d (EC2 allows 50 per instance and runnerpool adds its own).", len(elems), declared.MaxTags))
		return
	}
	for k, el := range elems {
		p := req.Path.AtMapKey(k)
		if err := declared.ValidateTagKey(k); err != nil {
			resp.Diagnostics.AddAttributeError(p, "Invalid tag key", err.Error()+
				". Without instance metadata tags the agent falls back to reading its record every 30 s (slower claims, more DynamoDB reads), so runnerpool keeps them on and checks keys here.")
			continue
		}
		if s, ok := el.(types.String); ok && !s.IsNull() && !s.IsUnknown() && len(s.ValueString()) > declared.MaxTagValueLen {
			resp.Diagnostics.AddAttributeError(p, "Invalid tag value", fmt.Sprintf("tag %q: value of %d characters, at most %d", k, len(s.ValueString()), declared.MaxTagValueLen))
		}
	}
}
