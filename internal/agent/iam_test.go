// iam_test.go keeps the agent and the example instance role (examples/complete/iam.tf) in step: every
// DynamoDB call the real agent makes during a whole lifecycle must be allowed by the role's policy,
// and nothing the control plane decides from may be writable by it.
package agent_test

import (
	"context"
	"fmt"
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
	sid     string
	effect  string
	actions []string
	// leadingKeys are the allowed partition keys (dynamodb:LeadingKeys, ForAllValues:StringEquals),
	// with ${ec2:SourceInstanceARN} unresolved; nil when the statement has no such condition.
	leadingKeys []string
}

const sourceARNVar = "${ec2:SourceInstanceARN}"

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
			for _, cb := range sb.Body.Blocks {
				if cb.Type != "condition" || str(cb.Body.Attributes, "variable") != "dynamodb:LeadingKeys" {
					// The other conditions (ec2:SourceInstanceARN, aws:ARN) hold for requests the
					// instance signs with its own role, which is the case modelled here.
					continue
				}
				if test := str(cb.Body.Attributes, "test"); test != "ForAllValues:StringEquals" {
					t.Fatalf("%s: statement %s tests dynamodb:LeadingKeys with %s, which this check does not model", path, st.sid, test)
				}
				st.leadingKeys = append(st.leadingKeys, strs(cb.Body.Attributes["values"].Expr, st.sid+".condition.values")...)
			}
			pol = append(pol, st)
		}
	}
	if !found || len(pol) == 0 {
		t.Fatalf("%s: no statements in data.aws_iam_policy_document.runner", path)
	}
	return pol
}

// allows reports whether the policy allows action (e.g. "dynamodb:PutItem") on partition key pk for a
// request signed by the instance whose ARN is sourceARN, and which statement does.
func (p runnerPolicy) allows(action, pk, sourceARN string) (string, bool) {
	allowed := ""
	for _, st := range p {
		if !slices.Contains(st.actions, action) && !slices.Contains(st.actions, "dynamodb:*") {
			continue
		}
		if strings.HasPrefix(action, "dynamodb:") && st.leadingKeys == nil {
			// A DynamoDB statement without a partition key condition would reach every item.
			if st.effect == "Allow" {
				allowed = st.sid
			}
			continue
		}
		match := false
		for _, k := range st.leadingKeys {
			if pk != "" && strings.ReplaceAll(k, sourceARNVar, sourceARN) == pk {
				match = true
			}
		}
		if !match {
			continue
		}
		if st.effect == "Deny" {
			return st.sid, false
		}
		allowed = st.sid
	}
	return allowed, allowed != ""
}

// call is one DynamoDB request of the agent: the IAM action and the partition key it touches.
type call struct{ action, pk string }

// recorder is a DynamoDB client middleware that records every call's action and partition key.
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
		case *dynamodb.UpdateItemInput:
			key = p.Key
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
	var actions []string
	for _, c := range calls {
		sid, ok := pol.allows(c.action, c.pk, arn)
		if !ok {
			t.Errorf("the agent calls %s on %q, which the runner role does not allow", c.action, c.pk)
			continue
		}
		actions = append(actions, fmt.Sprintf("%s %s (%s)", c.action, c.pk, sid))
	}
	t.Logf("agent calls: %v", actions)
	// The lifecycle exercised both partitions: reads of the record and credentials, writes of reports.
	for _, want := range []call{
		{"dynamodb:GetItem", e.store.InstanceKey(id)},
		{"dynamodb:PutItem", e.store.AgentKey(id)},
	} {
		if !slices.Contains(calls, want) {
			t.Errorf("the lifecycle made no %s on %s; calls %v", want.action, want.pk, calls)
		}
	}

	writes := []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:TransactWriteItems"}
	for _, action := range writes {
		// The control plane's items of this very instance: state, scope, run, credentials.
		if sid, ok := pol.allows(action, e.store.InstanceKey(id), arn); ok {
			t.Errorf("statement %s lets the instance %s its control-plane items (%s)", sid, action, e.store.InstanceKey(id))
		}
		// Runs, configuration, leases and any other instance.
		for _, pk := range []string{"RUN#1:2:1", "CONFIG#runner_class#default", "LEASE#leader",
			e.store.InstanceKey("i-0other"), e.store.AgentKey("i-0other")} {
			if sid, ok := pol.allows(action, pk, arn); ok {
				t.Errorf("statement %s lets the instance %s %s", sid, action, pk)
			}
		}
	}
	for _, action := range []string{"dynamodb:Query", "dynamodb:Scan"} {
		if sid, ok := pol.allows(action, "", arn); ok {
			t.Errorf("statement %s lets the instance %s", sid, action)
		}
	}
}
