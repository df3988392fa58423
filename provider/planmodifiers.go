// Plan modifiers shared by the resources.
package provider

import (
	"context"
	"reflect"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
)

var _ planmodifier.String = durationByValue{}

// durationByValue plans no change for a duration spelled differently from the state but of the
// same value ("90m" against "1h30m", as an import reads it back): durations compare by value.
type durationByValue struct{}

func (durationByValue) Description(context.Context) string {
	return "A duration equal in value to the state's keeps the state's spelling."
}

func (d durationByValue) MarkdownDescription(ctx context.Context) string { return d.Description(ctx) }

func (durationByValue) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.StateValue.IsNull() || req.StateValue.IsUnknown() || req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
		return
	}
	a, err1 := time.ParseDuration(req.StateValue.ValueString())
	b, err2 := time.ParseDuration(req.PlanValue.ValueString())
	if err1 == nil && err2 == nil && a == b {
		resp.PlanValue = req.StateValue
	}
}

// sameValuesExcept reports whether two models hold equal values in every field but the one named
// skip: attr.Value fields compare by value, nested blocks (structs and slices of them) field by field.
func sameValuesExcept[M any](a, b M, skip string) bool {
	return sameValue(reflect.ValueOf(a), reflect.ValueOf(b), skip)
}

func sameValue(a, b reflect.Value, skip string) bool {
	if x, ok := a.Interface().(attr.Value); ok {
		y, ok := b.Interface().(attr.Value)
		return ok && x.Equal(y)
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).Name != skip && !sameValue(a.Field(i), b.Field(i), "") {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i), "") {
				return false
			}
		}
		return true
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem(), "")
	}
	return false
}

// Phrases markReplacement appends to attribute descriptions.
const (
	forcesReplacement = "Changing it forces replacement."
	updatedInPlace    = "Changing it updates the resource in place."
)

// markReplacement ends the description of every attribute a configuration sets with whether
// changing it replaces the resource (a RequiresReplace plan modifier) or updates it in place, so the
// docs say so for each. Computed-only attributes are left alone.
func markReplacement(s *schema.Schema) {
	markAttributes(s.Attributes)
	markBlocks(s.Blocks)
}

func markBlocks(blocks map[string]schema.Block) {
	for _, b := range blocks {
		switch nb := b.(type) {
		case schema.ListNestedBlock:
			markAttributes(nb.NestedObject.Attributes)
			markBlocks(nb.NestedObject.Blocks)
		case schema.SingleNestedBlock:
			markAttributes(nb.Attributes)
			markBlocks(nb.Blocks)
		}
	}
}

func markAttributes(attrs map[string]schema.Attribute) {
	ctx := context.Background()
	for name, a := range attrs {
		if !a.IsRequired() && !a.IsOptional() {
			continue
		}
		switch t := a.(type) {
		case schema.StringAttribute:
			t.MarkdownDescription = withReplacement(t.MarkdownDescription, descriptions(ctx, t.PlanModifiers))
			attrs[name] = t
		case schema.Int64Attribute:
			t.MarkdownDescription = withReplacement(t.MarkdownDescription, descriptions(ctx, t.PlanModifiers))
			attrs[name] = t
		case schema.BoolAttribute:
			t.MarkdownDescription = withReplacement(t.MarkdownDescription, descriptions(ctx, t.PlanModifiers))
			attrs[name] = t
		case schema.ListAttribute:
			t.MarkdownDescription = withReplacement(t.MarkdownDescription, descriptions(ctx, t.PlanModifiers))
			attrs[name] = t
		case schema.MapAttribute:
			t.MarkdownDescription = withReplacement(t.MarkdownDescription, descriptions(ctx, t.PlanModifiers))
			attrs[name] = t
		case schema.SetAttribute:
			t.MarkdownDescription = withReplacement(t.MarkdownDescription, descriptions(ctx, t.PlanModifiers))
			attrs[name] = t
		}
	}
}

// withReplacement appends the phrase; RequiresReplace's description says "destroy and recreate".
func withReplacement(desc string, modifiers []string) string {
	if strings.Contains(desc, forcesReplacement) || strings.Contains(desc, updatedInPlace) {
		return desc
	}
	for _, m := range modifiers {
		if strings.Contains(m, "destroy and recreate") {
			return strings.TrimSpace(desc + " " + forcesReplacement)
		}
	}
	return strings.TrimSpace(desc + " " + updatedInPlace)
}

// descriptions are the descriptions of an attribute's plan modifiers.
func descriptions[M interface{ Description(context.Context) string }](ctx context.Context, mods []M) []string {
	out := make([]string, 0, len(mods))
	for _, m := range mods {
		out = append(out, m.Description(ctx))
	}
	return out
}
