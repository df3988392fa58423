// policy.go renders a data "aws_iam_policy_document" block as the JSON document the AWS provider
// makes of it: statements (dynamic ones too) with Sid, Effect, Action/NotAction,
// Resource/NotResource, Principal and Condition.
package exampletf

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

func policyJSON(body *hclsyntax.Body, ctx *hcl.EvalContext) (string, error) {
	var statements []map[string]any
	err := eachBlock(body, "statement", ctx, func(b *hclsyntax.Body, ctx *hcl.EvalContext) error {
		st, err := statement(b, ctx)
		statements = append(statements, st)
		return err
	})
	if err != nil {
		return "", err
	}
	doc, err := json.Marshal(map[string]any{"Version": "2012-10-17", "Statement": statements})
	return string(doc), err
}

// eachBlock calls f for every nested block of the type, static or dynamic (for_each expanded, the
// iterator named as the block type or by its iterator attribute), with the context to evaluate it in.
func eachBlock(body *hclsyntax.Body, typ string, ctx *hcl.EvalContext, f func(*hclsyntax.Body, *hcl.EvalContext) error) error {
	for _, b := range body.Blocks {
		switch {
		case b.Type == typ:
			if err := f(b.Body, ctx); err != nil {
				return err
			}
		case b.Type == "dynamic" && len(b.Labels) == 1 && b.Labels[0] == typ:
			if err := eachDynamic(b, ctx, f); err != nil {
				return err
			}
		}
	}
	return nil
}

func eachDynamic(b *hclsyntax.Block, ctx *hcl.EvalContext, f func(*hclsyntax.Body, *hcl.EvalContext) error) error {
	iterator := b.Labels[0]
	if a, ok := b.Body.Attributes["iterator"]; ok {
		iterator = hcl.ExprAsKeyword(a.Expr)
	}
	fe, ok := b.Body.Attributes["for_each"]
	if !ok {
		return fmt.Errorf("dynamic %q has no for_each", b.Labels[0])
	}
	v, diags := fe.Expr.Value(ctx)
	if diags.HasErrors() {
		return diags
	}
	var content *hclsyntax.Body
	for _, c := range b.Body.Blocks {
		if c.Type == "content" {
			content = c.Body
		}
	}
	if content == nil || v.IsNull() {
		return nil
	}
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		child := ctx.NewChild()
		child.Variables = map[string]cty.Value{iterator: cty.ObjectVal(map[string]cty.Value{"key": k, "value": e})}
		if err := f(content, child); err != nil {
			return err
		}
	}
	return nil
}

func statement(b *hclsyntax.Body, ctx *hcl.EvalContext) (map[string]any, error) {
	st := map[string]any{"Effect": "Allow"}
	for attr, key := range map[string]string{"sid": "Sid", "effect": "Effect", "actions": "Action",
		"not_actions": "NotAction", "resources": "Resource", "not_resources": "NotResource"} {
		a, ok := b.Attributes[attr]
		if !ok {
			continue
		}
		v, diags := a.Expr.Value(ctx)
		if diags.HasErrors() {
			return nil, diags
		}
		g, err := goValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", attr, err)
		}
		st[key] = g
	}
	principals := map[string][]any{}
	err := eachBlock(b, "principals", ctx, func(p *hclsyntax.Body, ctx *hcl.EvalContext) error {
		typ, ids, err := pair(p, ctx, "type", "identifiers")
		principals[typ] = append(principals[typ], ids...)
		return err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case len(principals) == 1 && len(principals["*"]) == 1 && principals["*"][0] == "*":
		// The AWS provider renders type "*" with identifiers ["*"] as "Principal": "*"
		// (internal/service/iam, IAMPolicyStatementPrincipalSet.MarshalJSON: only {"*": ["*"]} becomes "*").
		st["Principal"] = "*"
	case len(principals) > 0:
		st["Principal"] = principals
	}
	conditions := map[string]map[string][]any{}
	err = eachBlock(b, "condition", ctx, func(c *hclsyntax.Body, ctx *hcl.EvalContext) error {
		test, values, err := pair(c, ctx, "test", "values")
		if err != nil {
			return err
		}
		variable, diags := c.Attributes["variable"].Expr.Value(ctx)
		if diags.HasErrors() {
			return diags
		}
		if conditions[test] == nil {
			conditions[test] = map[string][]any{}
		}
		conditions[test][variable.AsString()] = append(conditions[test][variable.AsString()], values...)
		return nil
	})
	if len(conditions) > 0 {
		st["Condition"] = maps.Clone(conditions)
	}
	return st, err
}

// pair evaluates a block's string attribute and its list attribute.
func pair(b *hclsyntax.Body, ctx *hcl.EvalContext, str, list string) (string, []any, error) {
	s, diags := b.Attributes[str].Expr.Value(ctx)
	if diags.HasErrors() {
		return "", nil, diags
	}
	l, diags := b.Attributes[list].Expr.Value(ctx)
	if diags.HasErrors() {
		return "", nil, diags
	}
	g, err := goValue(l)
	if err != nil {
		return "", nil, err
	}
	items, ok := g.([]any)
	if !ok {
		items = []any{g}
	}
	return s.AsString(), items, nil
}

// goValue converts a string or a collection of strings to Go.
func goValue(v cty.Value) (any, error) {
	if !v.IsWhollyKnown() || v.IsNull() {
		return nil, fmt.Errorf("value not known")
	}
	if v.Type() == cty.String {
		return v.AsString(), nil
	}
	if !v.CanIterateElements() {
		return nil, fmt.Errorf("%s is neither a string nor a list of strings", v.Type().FriendlyName())
	}
	out := []any{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.Type() != cty.String {
			return nil, fmt.Errorf("element of type %s, want string", e.Type().FriendlyName())
		}
		out = append(out, e.AsString())
	}
	return out, nil
}
