// Package exampletf evaluates a Terraform root module of this repository's examples (examples/complete)
// without Terraform or any provider, so that tests can load what the example really declares: its IAM
// policy documents as JSON, the policies attached to each role, the reconciler's task environment.
// Variables come from their defaults and a tfvars file; data sources and the attributes only a
// provider knows (ids, ARNs, URLs) come from Computed; every other attribute is the example's own
// expression, evaluated in dependency order. Test code only.
package exampletf

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// Inputs are what Terraform would know from outside the module.
type Inputs struct {
	// Account, Partition and Region answer data.aws_caller_identity, data.aws_partition and
	// data.aws_region.
	Account, Partition, Region string
	// VarFile is a tfvars file (relative to the module) read before Vars; empty: none.
	VarFile string
	// Vars override variables.
	Vars map[string]cty.Value
	// Computed adds the attributes a provider computes (id, arn, url, ...) to one instance of a
	// resource or data source ("resource" or "data"), given the attributes its configuration sets.
	// DefaultComputed is used when nil.
	Computed func(mode, typ string, attrs map[string]cty.Value) map[string]cty.Value
}

// Module is an evaluated module.
type Module struct {
	dir    string
	in     Inputs
	blocks []*hclsyntax.Block
	vars   map[string]cty.Value
	locals map[string]cty.Value
	// objects by mode ("resource", "data"), type and name: an object, a tuple (count) or an object of
	// instances (for_each).
	objects map[string]map[string]map[string]cty.Value
	// unresolved names what could not be evaluated, by address.
	unresolved map[string]string
}

// Load parses every .tf file of dir and evaluates it.
func Load(dir string, in Inputs) (*Module, error) {
	if in.Computed == nil {
		in.Computed = DefaultComputed(in)
	}
	m := &Module{dir: dir, in: in, locals: map[string]cty.Value{}, unresolved: map[string]string{},
		objects: map[string]map[string]map[string]cty.Value{"resource": {}, "data": {}}}
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no .tf files in %s: %v", dir, err)
	}
	for _, f := range files {
		body, err := parseFile(f)
		if err != nil {
			return nil, err
		}
		m.blocks = append(m.blocks, body.Blocks...)
	}
	if err := m.loadVariables(); err != nil {
		return nil, err
	}
	m.evaluate()
	return m, nil
}

func parseFile(path string) (*hclsyntax.Body, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("parsing %s: %w", path, diags)
	}
	return f.Body.(*hclsyntax.Body), nil
}

// loadVariables sets every variable from Vars, the tfvars file or its default, converted to its type
// with the type's optional attribute defaults applied, as Terraform does.
func (m *Module) loadVariables() error {
	given := map[string]cty.Value{}
	if m.in.VarFile != "" {
		body, err := parseFile(filepath.Join(m.dir, m.in.VarFile))
		if err != nil {
			return err
		}
		for name, a := range body.Attributes {
			v, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				return fmt.Errorf("%s: %s: %w", m.in.VarFile, name, diags)
			}
			given[name] = v
		}
	}
	maps.Copy(given, m.in.Vars)
	m.vars = map[string]cty.Value{}
	var errs []error
	for _, b := range m.blocks {
		if b.Type != "variable" || len(b.Labels) != 1 {
			continue
		}
		name := b.Labels[0]
		v, ok := given[name]
		if !ok {
			d, has := b.Body.Attributes["default"]
			if !has {
				errs = append(errs, fmt.Errorf("variable %s has no value and no default", name))
				continue
			}
			var diags hcl.Diagnostics
			if v, diags = d.Expr.Value(nil); diags.HasErrors() {
				errs = append(errs, fmt.Errorf("variable %s: default: %w", name, diags))
				continue
			}
		}
		if t, ok := b.Body.Attributes["type"]; ok && !v.IsNull() {
			ty, defaults, diags := typeexpr.TypeConstraintWithDefaults(t.Expr)
			if diags.HasErrors() {
				errs = append(errs, fmt.Errorf("variable %s: type: %w", name, diags))
				continue
			}
			if defaults != nil {
				v = defaults.Apply(v)
			}
			cv, err := convert.Convert(v, ty)
			if err != nil {
				errs = append(errs, fmt.Errorf("variable %s: %w", name, err))
				continue
			}
			v = cv
		}
		m.vars[name] = v
	}
	return errors.Join(errs...)
}

// evaluate resolves locals, data sources and resources in passes until a pass resolves nothing new:
// each pass evaluates what the previous ones made known.
func (m *Module) evaluate() {
	for pass := 0; pass < 64; pass++ {
		progress := false
		for _, b := range m.blocks {
			switch b.Type {
			case "locals":
				for name, a := range b.Body.Attributes {
					if _, done := m.locals[name]; done {
						continue
					}
					if v, diags := a.Expr.Value(m.ctx(nil)); !diags.HasErrors() {
						m.locals[name], progress = v, true
						delete(m.unresolved, "local."+name)
					} else {
						m.unresolved["local."+name] = diags.Error()
					}
				}
			case "resource", "data":
				if len(b.Labels) == 2 && m.evalObject(b) {
					progress = true
				}
			}
		}
		if !progress {
			return
		}
	}
}

// evalObject evaluates one resource or data block's instances; it reports whether anything became
// known that was not.
func (m *Module) evalObject(b *hclsyntax.Block) bool {
	typ, name := b.Labels[0], b.Labels[1]
	addr := b.Type + "." + typ + "." + name
	if b.Type == "resource" {
		addr = typ + "." + name
	}
	instances, err := m.instances(b)
	if err != nil {
		m.unresolved[addr] = err.Error()
		return false
	}
	var out cty.Value
	complete := true
	switch {
	case instances == nil: // a single instance
		attrs, ok := m.evalAttrs(b, typ, nil)
		complete = ok
		out = cty.ObjectVal(attrs)
	case instances.each:
		objs := map[string]cty.Value{}
		for key, each := range instances.byKey {
			attrs, ok := m.evalAttrs(b, typ, map[string]cty.Value{"each": cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal(key), "value": each})})
			complete = complete && ok
			objs[key] = cty.ObjectVal(attrs)
		}
		out = cty.ObjectVal(objs)
	default:
		objs := make([]cty.Value, instances.count)
		for i := range objs {
			attrs, ok := m.evalAttrs(b, typ, map[string]cty.Value{"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(int64(i))})})
			complete = complete && ok
			objs[i] = cty.ObjectVal(attrs)
		}
		out = cty.TupleVal(objs)
	}
	prev, had := m.objects[b.Type][typ][name]
	if m.objects[b.Type][typ] == nil {
		m.objects[b.Type][typ] = map[string]cty.Value{}
	}
	m.objects[b.Type][typ][name] = out
	if complete {
		delete(m.unresolved, addr)
	} else {
		m.unresolved[addr] = "some attributes could not be evaluated"
	}
	return !had || !prev.RawEquals(out)
}

type instanceSet struct {
	each  bool
	byKey map[string]cty.Value
	count int
}

// instances evaluates count or for_each; nil for a single instance.
func (m *Module) instances(b *hclsyntax.Block) (*instanceSet, error) {
	if a, ok := b.Body.Attributes["for_each"]; ok {
		v, diags := a.Expr.Value(m.ctx(nil))
		if diags.HasErrors() {
			return nil, diags
		}
		set := &instanceSet{each: true, byKey: map[string]cty.Value{}}
		if v.IsNull() {
			return set, nil
		}
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			if v.Type().IsSetType() {
				k = e
			}
			set.byKey[k.AsString()] = e
		}
		return set, nil
	}
	if a, ok := b.Body.Attributes["count"]; ok {
		v, diags := a.Expr.Value(m.ctx(nil))
		if diags.HasErrors() {
			return nil, diags
		}
		n, _ := v.AsBigFloat().Int64()
		return &instanceSet{count: int(n)}, nil
	}
	return nil, nil
}

// evalAttrs evaluates a block's attributes (a policy document's statements too) and adds the
// computed ones; ok is false when an attribute could not be evaluated yet.
func (m *Module) evalAttrs(b *hclsyntax.Block, typ string, extra map[string]cty.Value) (map[string]cty.Value, bool) {
	ctx := m.ctx(extra)
	attrs := map[string]cty.Value{}
	ok := true
	for name, a := range b.Body.Attributes {
		if name == "count" || name == "for_each" || name == "depends_on" {
			continue
		}
		v, diags := a.Expr.Value(ctx)
		if diags.HasErrors() {
			ok = false
			continue
		}
		attrs[name] = v
	}
	if b.Type == "data" && typ == "aws_iam_policy_document" {
		doc, err := policyJSON(b.Body, ctx)
		if err != nil {
			ok = false
		} else {
			attrs["json"] = cty.StringVal(doc)
		}
	}
	maps.Copy(attrs, m.in.Computed(b.Type, typ, attrs))
	return attrs, ok
}

// ctx is the evaluation context: var, local, data, resources by type, the functions the examples use,
// and extra (each, count).
func (m *Module) ctx(extra map[string]cty.Value) *hcl.EvalContext {
	vars := map[string]cty.Value{"var": cty.ObjectVal(m.vars), "local": cty.ObjectVal(m.locals)}
	data := map[string]cty.Value{}
	for typ, byName := range m.objects["data"] {
		data[typ] = cty.ObjectVal(byName)
	}
	vars["data"] = cty.ObjectVal(data)
	for typ, byName := range m.objects["resource"] {
		vars[typ] = cty.ObjectVal(byName)
	}
	maps.Copy(vars, extra)
	return &hcl.EvalContext{Variables: vars, Functions: functions}
}

// Resource is the evaluated value of a resource (a data source with mode "data"): an object of
// attributes, a tuple of them (count) or an object of them by key (for_each); cty.NilVal when the
// module has none.
func (m *Module) Resource(mode, typ, name string) cty.Value {
	v, ok := m.objects[mode][typ][name]
	if !ok {
		return cty.NilVal
	}
	return v
}

// Local is the evaluated value of a local (cty.NilVal when the module has none).
func (m *Module) Local(name string) cty.Value {
	v, ok := m.locals[name]
	if !ok {
		return cty.NilVal
	}
	return v
}

// Block is the configuration block of a resource or data source ("resource" or "data"), for what
// only its nested blocks say (nil when the module has none).
func (m *Module) Block(mode, typ, name string) *hclsyntax.Block {
	for _, b := range m.blocks {
		if b.Type == mode && slices.Equal(b.Labels, []string{typ, name}) {
			return b
		}
	}
	return nil
}

// Eval evaluates an expression of the module, such as an attribute of a nested block, with extra
// variables (each, count, a dynamic block's iterator).
func (m *Module) Eval(expr hcl.Expression, extra map[string]cty.Value) (cty.Value, error) {
	v, diags := expr.Value(m.ctx(extra))
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	return v, nil
}

// Variable is a variable's value (cty.NilVal when the module has no such variable).
func (m *Module) Variable(name string) cty.Value {
	v, ok := m.vars[name]
	if !ok {
		return cty.NilVal
	}
	return v
}

// Unresolved lists what could not be evaluated (address: reason), sorted.
func (m *Module) Unresolved() []string {
	var out []string
	for addr, why := range m.unresolved {
		out = append(out, addr+": "+why)
	}
	sort.Strings(out)
	return out
}

// RolePolicies returns the inline policies (aws_iam_role_policy, every instance) attached to the role
// aws_iam_role.<role>, as JSON documents by policy name.
func (m *Module) RolePolicies(role string) (map[string]string, error) {
	r := m.Resource("resource", "aws_iam_role", role)
	if r == cty.NilVal {
		return nil, fmt.Errorf("no aws_iam_role.%s", role)
	}
	id := r.GetAttr("id")
	out := map[string]string{}
	for name, v := range m.objects["resource"]["aws_iam_role_policy"] {
		for _, inst := range instancesOf(v) {
			attrs := inst.AsValueMap()
			if attrs["role"] == cty.NilVal || attrs["policy"] == cty.NilVal {
				return nil, fmt.Errorf("aws_iam_role_policy.%s: role or policy could not be evaluated (%s)", name, m.unresolved["aws_iam_role_policy."+name])
			}
			if attrs["role"].Equals(id).True() {
				out[attrs["name"].AsString()] = attrs["policy"].AsString()
			}
		}
	}
	return out, nil
}

// instancesOf lists the instances of a resource value (one, count or for_each).
func instancesOf(v cty.Value) []cty.Value {
	if v.Type().IsTupleType() {
		return v.AsValueSlice()
	}
	if v.Type().IsObjectType() && !v.Type().HasAttribute("id") {
		var out []cty.Value
		for _, k := range slices.Sorted(maps.Keys(v.AsValueMap())) {
			out = append(out, v.GetAttr(k))
		}
		return out
	}
	return []cty.Value{v}
}

// DefaultComputed computes, for the types examples/complete uses, the attributes their providers
// compute: ids, ARNs (from the account, partition and region) and URLs, derived from the configured
// name so that they are stable and readable.
func DefaultComputed(in Inputs) func(mode, typ string, attrs map[string]cty.Value) map[string]cty.Value {
	return func(mode, typ string, attrs map[string]cty.Value) map[string]cty.Value {
		str := func(name string) string {
			if v, ok := attrs[name]; ok && v.Type() == cty.String && v.IsKnown() && !v.IsNull() {
				return v.AsString()
			}
			return ""
		}
		arn := func(service, resource string) cty.Value {
			return cty.StringVal(fmt.Sprintf("arn:%s:%s:%s:%s:%s", in.Partition, service, in.Region, in.Account, resource))
		}
		name := str("name")
		if name == "" {
			name = strings.TrimSuffix(str("name_prefix"), "-")
		}
		out := map[string]cty.Value{}
		switch mode + " " + typ {
		case "data aws_caller_identity":
			out["account_id"] = cty.StringVal(in.Account)
		case "data aws_partition":
			out["partition"] = cty.StringVal(in.Partition)
		case "data aws_region":
			out["name"], out["region"] = cty.StringVal(in.Region), cty.StringVal(in.Region)
		case "data runnerpool_user_data":
			out["rendered"], out["rendered_base64"] = cty.StringVal("#!/bin/sh"), cty.StringVal("IyEvYmluL3No")
		case "resource runnerpool_state_table":
			out["arn"] = arn("dynamodb", "table/"+name)
		case "resource runnerpool_pool_queue":
			if name == "" {
				name = "runnerpool-" + str("runner_class")
			}
			out["name"], out["arn"] = cty.StringVal(name), arn("sqs", name)
			out["url"] = cty.StringVal(fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", in.Region, in.Account, name))
		case "resource aws_sqs_queue":
			out["arn"] = arn("sqs", name)
			out["url"] = cty.StringVal(fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", in.Region, in.Account, name))
		case "resource aws_iam_role":
			out["id"] = cty.StringVal(name)
			out["arn"] = cty.StringVal(fmt.Sprintf("arn:%s:iam::%s:role/%s", in.Partition, in.Account, name))
		case "resource aws_iam_instance_profile":
			out["id"] = cty.StringVal(name)
			out["arn"] = cty.StringVal(fmt.Sprintf("arn:%s:iam::%s:instance-profile/%s", in.Partition, in.Account, name))
		case "resource aws_launch_template":
			id := "lt-" + fakeID(name)
			out["id"], out["arn"] = cty.StringVal(id), arn("ec2", "launch-template/"+id)
		case "resource aws_security_group":
			id := "sg-" + fakeID(name)
			out["id"], out["arn"] = cty.StringVal(id), arn("ec2", "security-group/"+id)
		case "resource aws_cloudwatch_log_group":
			out["arn"] = arn("logs", "log-group:"+name) // the AWS provider's arn, without a trailing ":*"
		case "resource aws_s3_bucket": // S3 bucket ARNs have neither region nor account
			out["id"], out["arn"] = cty.StringVal(str("bucket")), cty.StringVal("arn:"+in.Partition+":s3:::"+str("bucket"))
		case "resource aws_kms_key":
			out["arn"] = arn("kms", "key/"+fakeID(name))
		default:
			id := typ + "-" + fakeID(name)
			out["id"], out["arn"] = cty.StringVal(id), arn(strings.SplitN(strings.TrimPrefix(typ, "aws_"), "_", 2)[0], id)
		}
		if _, ok := attrs["name"]; !ok && name != "" {
			out["name"] = cty.StringVal(name)
		}
		return out
	}
}

// fakeID is a stable 17-hex-digit id made from a name.
func fakeID(name string) string {
	h := uint64(14695981039346656037)
	for _, c := range []byte(name) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return fmt.Sprintf("%017x", h)[:17]
}

// functions are the Terraform functions the examples call (from go-cty's standard library, which
// Terraform's own are built on), and try/can.
var functions = map[string]function.Function{
	"can": tryfunc.CanFunc, "try": tryfunc.TryFunc,
	"coalesce": stdlib.CoalesceFunc, "compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc,
	"contains": stdlib.ContainsFunc, "distinct": stdlib.DistinctFunc, "flatten": stdlib.FlattenFunc,
	"format": stdlib.FormatFunc, "join": stdlib.JoinFunc, "jsonencode": stdlib.JSONEncodeFunc,
	"keys": stdlib.KeysFunc, "length": stdlib.LengthFunc, "lookup": stdlib.LookupFunc,
	"lower": stdlib.LowerFunc, "max": stdlib.MaxFunc, "merge": stdlib.MergeFunc, "min": stdlib.MinFunc,
	"regex": stdlib.RegexFunc, "replace": stdlib.ReplaceFunc, "split": stdlib.SplitFunc,
	"substr": stdlib.SubstrFunc, "tostring": stringConv, "trimprefix": stdlib.TrimPrefixFunc,
	"trimsuffix": stdlib.TrimSuffixFunc, "upper": stdlib.UpperFunc, "values": stdlib.ValuesFunc,
	"startswith": prefixFunc(strings.HasPrefix), "endswith": prefixFunc(strings.HasSuffix),
	"tolist": listConv, "toset": setConv, "sort": stdlib.SortFunc, "sum": sumFunc, "floor": stdlib.FloorFunc,
}

var sumFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "list", Type: cty.List(cty.Number)}},
	Type:   function.StaticReturnType(cty.Number),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		total := cty.NumberIntVal(0)
		for _, v := range args[0].AsValueSlice() {
			total = total.Add(v)
		}
		return total, nil
	},
})

var stringConv = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType, AllowNull: true}},
	Type:   function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return convert.Convert(args[0], cty.String)
	},
})

var (
	listConv = collectionConv(cty.ListValEmpty, cty.ListVal)
	setConv  = collectionConv(cty.SetValEmpty, cty.SetVal)
)

// collectionConv is tolist or toset: the elements of a tuple, list or set as a list or set.
func collectionConv(empty func(cty.Type) cty.Value, of func([]cty.Value) cty.Value) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType}},
		Type:   func([]cty.Value) (cty.Type, error) { return cty.DynamicPseudoType, nil },
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if args[0].LengthInt() == 0 {
				return empty(cty.DynamicPseudoType), nil
			}
			return of(args[0].AsValueSlice()), nil
		},
	})
}

func prefixFunc(f func(s, prefix string) bool) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "s", Type: cty.String}, {Name: "p", Type: cty.String}},
		Type:   function.StaticReturnType(cty.Bool),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.BoolVal(f(args[0].AsString(), args[1].AsString())), nil
		},
	})
}

// Check evaluates what Terraform checks at plan time: every variable's validation blocks and every
// resource's lifecycle preconditions. It returns the error messages of those that fail, and an error
// for a condition that cannot be evaluated.
func (m *Module) Check() ([]string, error) {
	var failed []string
	var errs []error
	check := func(where string, b *hclsyntax.Block, ctx *hcl.EvalContext) {
		cond, ok := b.Body.Attributes["condition"]
		if !ok {
			return
		}
		v, diags := cond.Expr.Value(ctx)
		if diags.HasErrors() || v.Type() != cty.Bool || v.IsNull() {
			errs = append(errs, fmt.Errorf("%s: condition: %v", where, diags))
			return
		}
		if v.False() {
			msg, _ := b.Body.Attributes["error_message"].Expr.Value(ctx)
			failed = append(failed, where+": "+msg.AsString())
		}
	}
	for _, b := range m.blocks {
		switch {
		case b.Type == "variable" && len(b.Labels) == 1:
			for _, vb := range b.Body.Blocks {
				if vb.Type == "validation" {
					check("var."+b.Labels[0], vb, m.ctx(nil))
				}
			}
		case b.Type == "resource" && len(b.Labels) == 2:
			if set, err := m.instances(b); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: %w", b.Labels[0], b.Labels[1], err))
				continue
			} else if set != nil && set.count == 0 && len(set.byKey) == 0 {
				continue // no instance, nothing checked
			}
			for _, lb := range b.Body.Blocks {
				if lb.Type != "lifecycle" {
					continue
				}
				for _, pb := range lb.Body.Blocks {
					if pb.Type == "precondition" {
						check(b.Labels[0]+"."+b.Labels[1], pb, m.ctx(nil))
					}
				}
			}
		}
	}
	return failed, errors.Join(errs...)
}
