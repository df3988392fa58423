package exampletf_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/stack/exampletf"
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
