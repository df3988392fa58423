package exampletf_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
)

func loadComplete(t *testing.T) *exampletf.Module {
	t.Helper()
	m, err := exampletf.Load("../../../examples/complete", exampletf.Inputs{
		Account: "123456789012", Partition: "aws", Region: "eu-west-1", VarFile: "terraform.tfvars.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLoadComplete: examples/complete evaluates whole (every local, data source and resource) from
// its tfvars example, and its roles' policies come out as JSON documents with the example's values.
func TestLoadComplete(t *testing.T) {
	t.Parallel()
	m := loadComplete(t)
	if u := m.Unresolved(); len(u) > 0 {
		t.Errorf("unresolved:\n%s", strings.Join(u, "\n"))
	}
	pols, err := m.RolePolicies("runner")
	if err != nil {
		t.Fatal(err)
	}
	doc, ok := pols["runnerpool-agent"]
	if !ok {
		t.Fatalf("the runner role has no runnerpool-agent policy: %v", pols)
	}
	var parsed struct{ Statement []map[string]any }
	if err := json.Unmarshal([]byte(doc), &parsed); err != nil || len(parsed.Statement) == 0 {
		t.Fatalf("runnerpool-agent: %v: %s", err, doc)
	}
	for _, want := range []string{`"arn:aws:dynamodb:eu-west-1:123456789012:table/runnerpool-ci-prod"`, `"INSTANCE#${ec2:SourceInstanceARN}"`, `"ci-prod"`} {
		if !strings.Contains(doc, want) {
			t.Errorf("runnerpool-agent lacks %s: %s", want, doc)
		}
	}
	t.Log(doc)
}

// TestCheckComplete: the tfvars example passes every validation and precondition of the example, and
// the ones that guard a day-one mistake refuse it.
func TestCheckComplete(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vars map[string]cty.Value
		want string // a substring of the failure; empty: none
	}{
		{"the tfvars example", nil, ""},
		{"an image on latest", map[string]cty.Value{"reconciler_image": cty.StringVal("ghcr.io/runnerpool/runnerpool:latest")}, "reconciler_image must be pinned"},
		{"an image without a tag", map[string]cty.Value{"reconciler_image": cty.StringVal("ghcr.io/runnerpool/runnerpool")}, "reconciler_image must be pinned"},
		{"a digest", map[string]cty.Value{"reconciler_image": cty.StringVal("ghcr.io/runnerpool/runnerpool@sha256:" + strings.Repeat("a", 64))}, ""},
		{"both an App and a token", map[string]cty.Value{"github_token_secret_arn": cty.StringVal("arn:aws:secretsmanager:eu-west-1:123456789012:secret:t")}, "exactly one of github_app"},
		{"an instance cap below the warm pools", map[string]cty.Value{"max_instances": cty.NumberIntVal(2)}, "max_instances is below"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := exampletf.Load("../../../examples/complete", exampletf.Inputs{
				Account: "123456789012", Partition: "aws", Region: "eu-west-1", VarFile: "terraform.tfvars.example", Vars: tc.vars,
			})
			if err != nil {
				t.Fatal(err)
			}
			failed, err := m.Check()
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(failed, "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("failed checks %q, want one containing %q", got, tc.want)
			}
		})
	}
}
