// example_guards_test.go checks the two instance-side guards of examples/complete that no call can
// show here (there is no IAM and no real launch template on the local stack): the instance role
// terminates only the instance it belongs to, and the launch template allows IMDSv2 only.
package agent_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// parseExample parses one file of examples/complete.
func parseExample(t *testing.T, name string) *hclsyntax.Body {
	t.Helper()
	path := "../../examples/complete/" + name
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("parsing %s: %v", path, diags)
	}
	return f.Body.(*hclsyntax.Body)
}

// literal is an attribute's value when it is a literal (no references); cty.NilVal otherwise.
func literal(attrs hclsyntax.Attributes, name string) cty.Value {
	a, ok := attrs[name]
	if !ok {
		return cty.NilVal
	}
	v, d := a.Expr.Value(nil)
	if d.HasErrors() {
		return cty.NilVal
	}
	return v
}

func literalStrings(v cty.Value) []string {
	if v == cty.NilVal || !v.CanIterateElements() {
		return nil
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		if _, e := it.Element(); e.Type() == cty.String {
			out = append(out, e.AsString())
		}
	}
	return out
}

// Every EC2 action of the instance role is ec2:TerminateInstances, allowed only on the instance that
// signs the request (the ARN of the instance acted on, built from ec2:InstanceID, equals
// ec2:SourceInstanceARN: documented keys only) and only when it carries this deployment's
// tag: a job that reached the role cannot stop, terminate or tag another instance.
func TestExampleRunnerCanTerminateOnlyItself(t *testing.T) {
	t.Parallel()
	body := parseExample(t, "iam.tf")
	src, err := os.ReadFile("../../examples/complete/iam.tf")
	if err != nil {
		t.Fatal(err)
	}
	terminate := 0
	for _, b := range body.Blocks {
		if b.Type != "data" || !slices.Equal(b.Labels, []string{"aws_iam_policy_document", "runner"}) {
			continue
		}
		for _, st := range b.Body.Blocks {
			if st.Type != "statement" {
				continue
			}
			sid := "?"
			if v := literal(st.Body.Attributes, "sid"); v != cty.NilVal {
				sid = v.AsString()
			}
			if _, ok := st.Body.Attributes["not_actions"]; ok {
				t.Fatalf("statement %s uses not_actions: every action of the instance role must be named", sid)
			}
			if v := literal(st.Body.Attributes, "effect"); v != cty.NilVal && v.AsString() != "Allow" {
				continue
			}
			actions := literalStrings(literal(st.Body.Attributes, "actions"))
			if len(actions) == 0 {
				t.Fatalf("statement %s: actions are not a literal list", sid)
			}
			for _, a := range actions {
				switch {
				case a == "ec2:TerminateInstances":
				case len(a) > 4 && a[:4] == "ec2:", a == "*", a == "ec2:*":
					t.Errorf("statement %s allows %s: the instance role may only terminate itself", sid, a)
					continue
				default:
					continue
				}
				terminate++
				// Condition values as written in iam.tf (they name locals, so they are source text).
				conds := map[string]string{}
				for _, c := range st.Body.Blocks {
					if c.Type != "condition" {
						continue
					}
					test, variable := literal(c.Body.Attributes, "test"), literal(c.Body.Attributes, "variable")
					values, ok := c.Body.Attributes["values"]
					if test == cty.NilVal || variable == cty.NilVal || !ok {
						continue
					}
					conds[test.AsString()+" "+variable.AsString()] = string(values.Expr.Range().SliceBytes(src))
				}
				if got := conds["ArnEquals ec2:SourceInstanceARN"]; !strings.HasSuffix(got, `:instance/$${ec2:InstanceID}"]`) {
					t.Errorf("statement %s: ec2:TerminateInstances without ArnEquals ec2:SourceInstanceARN = arn:...:instance/${ec2:InstanceID} (conditions %v)", sid, conds)
				}
				if _, ok := conds["StringEquals aws:ResourceTag/runnerpool:deployment"]; !ok {
					t.Errorf("statement %s: ec2:TerminateInstances without the deployment tag condition (conditions %v)", sid, conds)
				}
			}
		}
	}
	if terminate != 1 {
		t.Errorf("the instance role allows ec2:TerminateInstances in %d statements, want exactly 1 (self-termination)", terminate)
	}
}

// The example launch template serves instance metadata with IMDSv2 only (session tokens required),
// one hop (a container behind a bridge cannot reach it even where the firewall rule is opted out),
// and instance metadata tags (the claim notice).
func TestExampleLaunchTemplateIMDSv2Only(t *testing.T) {
	t.Parallel()
	body := parseExample(t, "main.tf")
	found := 0
	for _, b := range body.Blocks {
		if b.Type != "resource" || len(b.Labels) == 0 || b.Labels[0] != "aws_launch_template" {
			continue
		}
		for _, mo := range b.Body.Blocks {
			if mo.Type != "metadata_options" {
				continue
			}
			found++
			for name, want := range map[string]cty.Value{
				"http_endpoint":               cty.StringVal("enabled"),
				"http_tokens":                 cty.StringVal("required"),
				"http_put_response_hop_limit": cty.NumberIntVal(1),
				"instance_metadata_tags":      cty.StringVal("enabled"),
			} {
				if got := literal(mo.Body.Attributes, name); got == cty.NilVal || !got.Equals(want).True() {
					t.Errorf("launch template %v: metadata_options.%s = %#v, want %#v", b.Labels, name, got, want)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no aws_launch_template with metadata_options in examples/complete/main.tf")
	}
}
