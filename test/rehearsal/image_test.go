package main

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
)

// TestImageReferenceForms evaluates examples/complete/variables.tf's own reconciler_image validation
// (exampletf reads the file): the forms a registry takes are accepted, a local build's tag such as
// …:dev included (docs/guides/local-build.md sets one; the earlier validation refused it and took
// only a version tag or a digest), and a moving or missing tag is refused. The rehearsal's
// serve-image-forms step (TestServeFromImageForms) pulls the release's image under each form from a
// registry on loopback and starts `runnerpool serve` from it.
func TestImageReferenceForms(t *testing.T) {
	t.Parallel()
	digest := "@sha256:" + strings.Repeat("a", 64)
	tests := []struct {
		image string
		ok    bool
	}{
		{"ghcr.io/runnerpool/runnerpool:1.2.3", true},
		{"ghcr.io/runnerpool/runnerpool:v1.2.3", true},
		{"123456789012.dkr.ecr.eu-west-1.amazonaws.com/runnerpool:dev", true},
		{"registry.example:5000/runnerpool:dev", true},
		{"ghcr.io/runnerpool/runnerpool" + digest, true},
		{"ghcr.io/runnerpool/runnerpool:1.2.3" + digest, true},
		{"ghcr.io/runnerpool/runnerpool:latest", false},
		{"ghcr.io/runnerpool/runnerpool:latest" + digest, false},
		{"ghcr.io/runnerpool/runnerpool", false},
		{"registry.example:5000/runnerpool", false},
		{"ghcr.io/runnerpool/runnerpool:dev extra", false},
		{"ghcr.io/runnerpool/runnerpool@sha256:short", false},
	}
	for _, tc := range tests {
		t.Run(tc.image, func(t *testing.T) {
			t.Parallel()
			failed := checkImage(t, tc.image)
			if got := !strings.Contains(failed, "reconciler_image must be pinned"); got != tc.ok {
				t.Errorf("accepted = %v, want %v (failed checks: %q)", got, tc.ok, failed)
			}
		})
	}
	for _, image := range imageForms("1.2.3") {
		if failed := checkImage(t, image); strings.Contains(failed, "reconciler_image") {
			t.Errorf("the rehearsal starts serve as %s, which the example refuses: %s", image, failed)
		}
	}
}

// checkImage runs the example's checks with reconciler_image set to image and returns the failures.
func checkImage(t *testing.T, image string) string {
	t.Helper()
	m, err := exampletf.Load("../../examples/complete", exampletf.Inputs{
		Account: "123456789012", Partition: "aws", Region: "eu-west-1", VarFile: "terraform.tfvars.example",
		Vars: map[string]cty.Value{"reconciler_image": cty.StringVal(image)},
	})
	if err != nil {
		t.Fatal(err)
	}
	failed, err := m.Check()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(failed, "\n")
}
