package exampletf_test

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// TestExampleProvidersOnlyInProvidersTF: examples/complete configures its providers in providers.tf
// and nowhere else, so deleting that file makes the directory a child module, as the example's
// README says (Terraform refuses count and for_each on a module with provider blocks of its own).
func TestExampleProvidersOnlyInProvidersTF(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../../examples/complete/*.tf")
	if err != nil || len(files) == 0 {
		t.Fatalf("the example's files: %v, %v", files, err)
	}
	providers := 0
	for _, f := range files {
		file, diags := hclsyntax.ParseConfig(mustRead(t, f), f, hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		for _, b := range file.Body.(*hclsyntax.Body).Blocks {
			if b.Type != "provider" {
				continue
			}
			if filepath.Base(f) != "providers.tf" {
				t.Errorf("%s configures provider %v: only providers.tf may", filepath.Base(f), b.Labels)
			}
			providers++
		}
	}
	if providers == 0 {
		t.Error("providers.tf configures no provider")
	}
}
