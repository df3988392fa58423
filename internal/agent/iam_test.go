// iam_test.go keeps the agent and the example instance role (examples/complete/iam.tf) in step: every
// DynamoDB call the real agent makes during a whole lifecycle must be allowed by the role's policy,
// and nothing the control plane decides from may be writable by it.
package agent_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// runnerPolicy is the runner role's policy document of examples/complete/iam.tf, as far as DynamoDB
// is concerned: the statements whose actions are dynamodb:* on the state table.
type runnerPolicy []policyStatement

type policyStatement struct {
	sid        string
	effect     string
	actions    []string
	conditions []policyCondition
}

// policyCondition is one condition block, its values with the policy variables unresolved.
type policyCondition struct {
	test, variable string
	values         []string
}

// request is one DynamoDB request as IAM evaluates it: the action, the item's partition key and
// top-level attribute names, the ReturnValues asked for, the instance the credentials were issued to
// (with its VPC and private IP), and the network path the request came by (empty when not through
// the VPC's gateway endpoint).
type request struct {
	action, pk   string
	attributes   []string
	returnValues string
	// The credentials' properties: ec2:SourceInstanceARN, aws:EC2InstanceSourceVPC,
	// aws:EC2InstanceSourcePrivateIPv4.
	sourceARN, credVPC, credIP string
	// The network path: aws:SourceVpc, aws:VpcSourceIp.
	sourceVPC, sourceIP string
}

// onInstance is a request signed with the instance's own credentials, from the instance, through the
// gateway endpoint.
func onInstance(action, pk, arn string, attributes ...string) request {
	return request{action: action, pk: pk, attributes: attributes, sourceARN: arn,
		credVPC: "vpc-0runners", credIP: "10.0.1.17", sourceVPC: "vpc-0runners", sourceIP: "10.0.1.17"}
}

// loadRunnerPolicy parses the data "aws_iam_policy_document" "runner" block of iam.tf.
func loadRunnerPolicy(t *testing.T) runnerPolicy {
	t.Helper()
	const path = "../../examples/complete/iam.tf"
	body := parseExample(t, "iam.tf")
	strs := func(e hcl.Expression, what string) []string {
		v, d := e.Value(nil)
		if d.HasErrors() || !v.CanIterateElements() {
			t.Fatalf("%s: %s is not a literal list of strings: %v", path, what, d)
		}
		var out []string
		for it := v.ElementIterator(); it.Next(); {
			_, ev := it.Element()
			if ev.Type() != cty.String {
				t.Fatalf("%s: %s has a non-string element", path, what)
			}
			out = append(out, ev.AsString())
		}
		return out
	}
	str := func(attrs hclsyntax.Attributes, name string) string {
		a, ok := attrs[name]
		if !ok {
			return ""
		}
		v, d := a.Expr.Value(nil)
		if d.HasErrors() || v.Type() != cty.String {
			t.Fatalf("%s: %s is not a literal string", path, name)
		}
		return v.AsString()
	}
	var pol runnerPolicy
	found := false
	for _, b := range body.Blocks {
		if b.Type != "data" || !slices.Equal(b.Labels, []string{"aws_iam_policy_document", "runner"}) {
			continue
		}
		found = true
		for _, sb := range b.Body.Blocks {
			if sb.Type != "statement" {
				continue
			}
			st := policyStatement{sid: str(sb.Body.Attributes, "sid"), effect: str(sb.Body.Attributes, "effect")}
			if st.effect == "" {
				st.effect = "Allow"
			}
			if a, ok := sb.Body.Attributes["actions"]; ok {
				st.actions = strs(a.Expr, st.sid+".actions")
			}
			if _, ok := sb.Body.Attributes["not_actions"]; ok {
				t.Fatalf("%s: statement %s uses not_actions, which this check does not model", path, st.sid)
			}
			if !slices.ContainsFunc(st.actions, func(a string) bool { return strings.HasPrefix(a, "dynamodb:") }) {
				// Only the DynamoDB statements are modelled (TerminateSelf's conditions name the
				// deployment's variables).
				pol = append(pol, st)
				continue
			}
			for _, cb := range sb.Body.Blocks {
				if cb.Type != "condition" {
					continue
				}
				c := policyCondition{test: str(cb.Body.Attributes, "test"), variable: str(cb.Body.Attributes, "variable")}
				if c.variable == "ec2:SourceInstanceARN" {
					// [local.instances]: every instance of the deployment's account and region.
					c.values = []string{"arn:aws:ec2:*:*:instance/*"}
				} else {
					c.values = strs(cb.Body.Attributes["values"].Expr, st.sid+".condition.values")
				}
				st.conditions = append(st.conditions, c)
			}
			pol = append(pol, st)
		}
	}
	if !found || len(pol) == 0 {
		t.Fatalf("%s: no statements in data.aws_iam_policy_document.runner", path)
	}
	return pol
}

// allows reports whether the policy allows the request, and which statement does. A condition it
// does not model is an error (the test must learn it before the policy may use it).
func (p runnerPolicy) allows(r request) (string, bool, error) {
	allowed := ""
	for _, st := range p {
		if !slices.Contains(st.actions, r.action) && !slices.Contains(st.actions, "dynamodb:*") {
			continue
		}
		if strings.HasPrefix(r.action, "dynamodb:") && !slices.ContainsFunc(st.conditions, func(c policyCondition) bool { return c.variable == "dynamodb:LeadingKeys" }) {
			// A DynamoDB statement without a partition key condition would reach every item.
			if st.effect == "Allow" {
				allowed = st.sid
			}
			continue
		}
		match := true
		for _, c := range st.conditions {
			ok, err := c.holds(r)
			if err != nil {
				return "", false, fmt.Errorf("statement %s: %w", st.sid, err)
			}
			match = match && ok
		}
		if !match {
			continue
		}
		if st.effect == "Deny" {
			return st.sid, false, nil
		}
		allowed = st.sid
	}
	return allowed, allowed != "", nil
}

// context is the request's condition keys as IAM sees them: a key absent from the map is absent
// from the request (aws:SourceVpc and aws:VpcSourceIp off the gateway endpoint, ReturnValues not asked).
func (r request) context() map[string][]string {
	ctx := map[string][]string{
		"ec2:SourceInstanceARN":            {r.sourceARN},
		"aws:EC2InstanceSourceVPC":         {r.credVPC},
		"aws:EC2InstanceSourcePrivateIPv4": {r.credIP},
	}
	for key, v := range map[string]string{"dynamodb:LeadingKeys": r.pk, "dynamodb:ReturnValues": r.returnValues,
		"aws:SourceVpc": r.sourceVPC, "aws:VpcSourceIp": r.sourceIP} {
		if v != "" {
			ctx[key] = []string{v}
		}
	}
	if len(r.attributes) > 0 {
		ctx["dynamodb:Attributes"] = r.attributes
	}
	return ctx
}

// policyVariable is a ${key} reference in a condition value.
var policyVariable = regexp.MustCompile(`\$\{([^}]+)\}`)

// holds evaluates one condition against a request as IAM's documented rules say: a set operator
// (ForAllValues, ForAnyValue) over multi-valued keys, IfExists, and policy variables substituted only
// under the string and ARN operators ("You can use policy variables with ... string and ARN condition
// operators", IAM User Guide, "IAM policy elements: Variables and tags"); under IpAddress a ${...}
// stays the literal text, which is no address. An operator it does not model is an error.
func (c policyCondition) holds(r request) (bool, error) {
	ctx := r.context()
	op, forAll, forAny := c.test, false, false
	if rest, ok := strings.CutPrefix(op, "ForAllValues:"); ok {
		op, forAll = rest, true
	} else if rest, ok := strings.CutPrefix(op, "ForAnyValue:"); ok {
		op, forAny = rest, true
	}
	op, ifExists := strings.CutSuffix(op, "IfExists")
	var match func(pattern, value string) bool
	switch op {
	case "StringEquals", "ArnEquals":
		match = func(p, v string) bool { return p == v }
	case "StringLike", "ArnLike":
		match = func(p, v string) bool { ok, _ := path.Match(p, v); return ok }
	case "IpAddress":
		match = func(p, v string) bool {
			prefix, err := netip.ParsePrefix(p)
			if err != nil {
				a, aerr := netip.ParseAddr(p)
				if aerr != nil {
					return false // a ${...} left as it is: no address, no match
				}
				prefix = netip.PrefixFrom(a, a.BitLen())
			}
			ip, err := netip.ParseAddr(v)
			return err == nil && prefix.Contains(ip)
		}
	default:
		return false, fmt.Errorf("condition operator %q is not modelled", c.test)
	}
	values := c.values
	if op != "IpAddress" {
		values = make([]string, len(c.values))
		for i, v := range c.values {
			unresolved := false
			values[i] = policyVariable.ReplaceAllStringFunc(v, func(ref string) string {
				got := ctx[policyVariable.FindStringSubmatch(ref)[1]]
				if len(got) != 1 {
					unresolved = true
					return ref
				}
				return got[0]
			})
			if unresolved {
				values[i] = "" // a variable whose key is absent matches nothing
			}
		}
	}
	anyMatches := func(v string) bool {
		return slices.ContainsFunc(values, func(p string) bool { return p != "" && match(p, v) })
	}
	got, present := ctx[c.variable]
	switch {
	case forAll: // true when the key is absent or every value matches
		return !slices.ContainsFunc(got, func(v string) bool { return !anyMatches(v) }), nil
	case forAny:
		return slices.ContainsFunc(got, anyMatches), nil
	case !present:
		return ifExists, nil
	default:
		return anyMatches(got[0]), nil
	}
}

// call is one DynamoDB request of the agent: the IAM action, the partition key it touches, the
// top-level attributes it writes (joined, sorted) and the ReturnValues it asks for.
type call struct{ action, pk, attributes, returnValues string }

// recorder is a DynamoDB client middleware that records every call.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) add(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("recordCalls", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		c := call{action: "dynamodb:" + awsmiddleware.GetOperationName(ctx)}
		key := map[string]types.AttributeValue(nil)
		switch p := in.Parameters.(type) {
		case *dynamodb.GetItemInput:
			key = p.Key
		case *dynamodb.PutItemInput:
			key = p.Item
			c.attributes = strings.Join(slices.Sorted(maps.Keys(p.Item)), ",")
			c.returnValues = string(p.ReturnValues)
		case *dynamodb.UpdateItemInput:
			key = p.Key
			c.attributes = "(update expression: not modelled)"
		case *dynamodb.DeleteItemInput:
			key = p.Key
		}
		if v, ok := key["pk"].(*types.AttributeValueMemberS); ok {
			c.pk = v.Value
		}
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
		return next.HandleInitialize(ctx, in)
	}), middleware.Before)
}

func (r *recorder) distinct() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// TestAgentCallsAllowedByIAMPolicy runs one instance through boot, a run, a release, a second claim
// and its termination with ARN instance keys, records every DynamoDB call its agent makes, and checks
// each against the runner role's policy in examples/complete/iam.tf; then checks that the policy lets
// the instance write none of the control plane's items (its own included), and nothing of another
// instance.
func TestAgentCallsAllowedByIAMPolicy(t *testing.T) {
	t.Parallel()
	pol := loadRunnerPolicy(t)
	arnPrefix := store.InstanceARNPrefix("us-east-1", "123456789012")
	rec := &recorder{}
	e := newEnv(t, envOptions{keyPrefix: arnPrefix, agentAPI: []func(*middleware.Stack) error{rec.add}})

	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.waitRunner(id, "run-1")
	e.toRunning(id, "run-1")
	e.release(id, "run-1")
	e.waitSignal(id, store.SignalReleased, "run-1")
	e.putCredential(id, "run-2", store.CredentialRegistration, e.runnerToken("registration"))
	in, err := e.store.Claim(t.Context(), id, "run-2", time.Now().Add(10*time.Minute))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	e.notify(in)
	e.waitSignal(id, store.SignalRegistered, "run-2")
	if _, err := e.store.Expire(t.Context(), id, "run-2", "test"); err != nil {
		t.Fatalf("expire: %v", err)
	}
	e.waitEC2State(id, "shutting-down", "terminated")

	arn := arnPrefix + id
	calls := rec.distinct()
	if len(calls) == 0 {
		t.Fatal("the agent made no DynamoDB call")
	}
	var cases []policyCase
	for _, c := range calls {
		r := onInstance(c.action, c.pk, arn)
		if c.attributes != "" {
			r.attributes = strings.Split(c.attributes, ",")
		}
		r.returnValues = c.returnValues
		cases = append(cases, policyCase{fmt.Sprintf("the agent calls %s on %q writing [%s]", c.action, c.pk, c.attributes), r, true})
	}
	// The lifecycle exercised both partitions: reads of the record and credentials, writes of reports.
	for _, want := range []struct{ action, pk string }{
		{"dynamodb:GetItem", e.store.InstanceKey(id)},
		{"dynamodb:PutItem", e.store.AgentKey(id)},
	} {
		if !slices.ContainsFunc(calls, func(c call) bool { return c.action == want.action && c.pk == want.pk }) {
			t.Errorf("the lifecycle made no %s on %s; calls %v", want.action, want.pk, calls)
		}
	}
	cases = append(cases, policyRefusals(arn, e.store.InstanceKey(id), e.store.AgentKey(id), e.store.InstanceKey("i-0other"), e.store.AgentKey("i-0other"))...)
	checkCases(t, pol, cases)
}

// policyCase is one request to the runner role and whether it must be allowed.
type policyCase struct {
	name string
	r    request
	want bool
}

// checkCases checks each case with this file's evaluator and with the independent IAM simulator on
// the runner role's policies of examples/complete (iam_sim_test.go): both must agree with the case.
func checkCases(t *testing.T, pol runnerPolicy, cases []policyCase) {
	t.Helper()
	var allowed []string
	for _, tc := range cases {
		sid, got, err := pol.allows(tc.r)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: allowed %v (statement %q), want %v", tc.name, got, sid, tc.want)
		}
		if got {
			allowed = append(allowed, fmt.Sprintf("%s (%s)", tc.name, sid))
		}
	}
	t.Logf("allowed: %v", allowed)
	simulateCases(t, cases)
}

// policyRefusals are what the runner role must never allow the instance whose ARN is arn: writing
// its control-plane items, any item of runs, configuration, leases or another instance, reading
// another instance's items, queries and scans; and the agent's own report it must allow.
func policyRefusals(arn, ownRecord, ownReports, otherRecord, otherReports string) []policyCase {
	var cases []policyCase
	writes := []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
	for _, action := range writes {
		// The control plane's items of this very instance: state, scope, run, credentials.
		cases = append(cases, policyCase{action + " of its own control-plane items", onInstance(action, ownRecord, arn, "pk", "sk"), false})
		// Runs, configuration, leases and any other instance.
		for _, pk := range []string{"RUN#1:2:1", "CONFIG#runner_class#default", "LEASE#leader", otherRecord, otherReports} {
			cases = append(cases, policyCase{action + " of " + pk, onInstance(action, pk, arn, "pk", "sk"), false})
		}
	}
	for _, pk := range []string{otherRecord, otherReports} {
		cases = append(cases, policyCase{"GetItem of another instance's " + pk, onInstance("dynamodb:GetItem", pk, arn), false})
	}
	for _, action := range []string{"dynamodb:Query", "dynamodb:Scan"} {
		cases = append(cases, policyCase{action, onInstance(action, "", arn), false})
	}
	return append(cases, policyCase{"the agent's own report", onInstance("dynamodb:PutItem", ownReports, arn, "pk", "sk", "signal", "at", "ttl"), true})
}

// TestIAMPolicyRefusesIndexKeysAndCopiedCredentials: the runner role lets the instance write its
// reports only with the agent's attributes, so no item it writes carries an index key (it would
// appear in the control plane's listings), nor asks for old values back; and a copy of its
// credentials used from another host (not through the runners' gateway endpoint, or from another
// address) reaches nothing in the table.
func TestIAMPolicyRefusesIndexKeysAndCopiedCredentials(t *testing.T) {
	t.Parallel()
	pol := loadRunnerPolicy(t)
	arn := store.InstanceARNPrefix("us-east-1", "123456789012") + "i-0abc"
	st := store.New(nil, "t", store.WithInstanceKeyPrefix(store.InstanceARNPrefix("us-east-1", "123456789012")))
	reports, record := st.AgentKey("i-0abc"), st.InstanceKey("i-0abc")
	report := []string{"pk", "sk", "signal", "at", "ttl", "run_id", "detail", "key", "sig"}
	tests := []policyCase{
		{"the agent's signal", onInstance("dynamodb:PutItem", reports, arn, report...), true},
		{"the agent reads its record", onInstance("dynamodb:GetItem", record, arn), true},
		{"the agent reads its last signal", onInstance("dynamodb:GetItem", reports, arn), true},
		{"a report carrying idx_state and threshold", onInstance("dynamodb:PutItem", reports, arn, "pk", "sk", "idx_state", "threshold"), false},
		{"a report carrying idx_run", onInstance("dynamodb:PutItem", reports, arn, "pk", "sk", "idx_run"), false},
		{"a report carrying idx_pool and id", onInstance("dynamodb:PutItem", reports, arn, "pk", "sk", "idx_pool", "id"), false},
		{"a report carrying idx_fit", onInstance("dynamodb:PutItem", reports, arn, "pk", "sk", "idx_fit"), false},
		{"a report carrying an attribute the agent never writes", onInstance("dynamodb:PutItem", reports, arn, "pk", "sk", "blob"), false},
		{"a report asking for the old item back", func() request {
			r := onInstance("dynamodb:PutItem", reports, arn, "pk", "sk", "signal")
			r.returnValues = "ALL_OLD"
			return r
		}(), false},
		{"a copied credential over the internet reads the credential", func() request {
			r := onInstance("dynamodb:GetItem", record, arn)
			r.sourceVPC, r.sourceIP = "", ""
			return r
		}(), false},
		{"a copied credential from another host of the VPC writes a report", func() request {
			r := onInstance("dynamodb:PutItem", reports, arn, "pk", "sk", "signal")
			r.sourceIP = "10.0.1.99"
			return r
		}(), false},
		{"a copied credential from another VPC reads the record", func() request {
			r := onInstance("dynamodb:GetItem", record, arn)
			r.sourceVPC = "vpc-0elsewhere"
			return r
		}(), false},
	}
	checkCases(t, pol, tests)
	// Every DynamoDB statement ties the request to the instance's network path.
	for _, st := range pol {
		if !slices.ContainsFunc(st.actions, func(a string) bool { return strings.HasPrefix(a, "dynamodb:") }) {
			continue
		}
		for _, v := range []string{"aws:SourceVpc", "aws:VpcSourceIp"} {
			if !slices.ContainsFunc(st.conditions, func(c policyCondition) bool {
				return c.variable == v || slices.Contains(c.values, "${"+v+"}")
			}) {
				t.Errorf("statement %s has no condition on %s", st.sid, v)
			}
		}
	}
}

// TestIAMEvaluatorSubstitutesVariablesOnlyUnderStringAndARNOperators: the evaluator above follows
// IAM's rule that policy variables are substituted only under string and ARN operators, so the
// IpAddress form the example once used (aws:VpcSourceIp = ${aws:EC2InstanceSourcePrivateIPv4})
// matches nothing, and the string form matches the instance's own address only.
func TestIAMEvaluatorSubstitutesVariablesOnlyUnderStringAndARNOperators(t *testing.T) {
	t.Parallel()
	arn := store.InstanceARNPrefix("us-east-1", "123456789012") + "i-0abc"
	own := onInstance("dynamodb:GetItem", "INSTANCE#"+arn, arn)
	other := own
	other.sourceIP = "10.0.1.99"
	tests := []struct {
		name    string
		c       policyCondition
		r       request
		want    bool
		wantErr bool
	}{
		{"IpAddress never substitutes", policyCondition{"IpAddress", "aws:VpcSourceIp", []string{"${aws:EC2InstanceSourcePrivateIPv4}"}}, own, false, false},
		{"IpAddress with a literal block", policyCondition{"IpAddress", "aws:VpcSourceIp", []string{"10.0.0.0/16"}}, own, true, false},
		{"StringEquals substitutes", policyCondition{"StringEquals", "aws:EC2InstanceSourcePrivateIPv4", []string{"${aws:VpcSourceIp}"}}, own, true, false},
		{"StringEquals from another address", policyCondition{"StringEquals", "aws:EC2InstanceSourcePrivateIPv4", []string{"${aws:VpcSourceIp}"}}, other, false, false},
		{"ArnEquals substitutes", policyCondition{"ArnEquals", "ec2:SourceInstanceARN", []string{arn[:strings.LastIndex(arn, "/")+1] + "i-0abc"}}, own, true, false},
		{"a variable of an absent key matches nothing", policyCondition{"StringEquals", "aws:EC2InstanceSourceVPC", []string{"${aws:SourceVpc}"}}, func() request { r := own; r.sourceVPC = ""; return r }(), false, false},
		{"ForAllValues on an absent key holds", policyCondition{"ForAllValues:StringEquals", "dynamodb:Attributes", []string{"pk"}}, own, true, false},
		{"NumericEquals is not modelled", policyCondition{"NumericEquals", "aws:MultiFactorAuthAge", []string{"1"}}, own, false, true},
	}
	for _, tc := range tests {
		got, err := tc.c.holds(tc.r)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: holds = %v, %v; want %v (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}
