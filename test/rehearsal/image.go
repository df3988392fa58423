package main

import "strings"

// imageForms are the forms of reconciler_image the example must accept for a release of version and
// for a local build (docs/guides/local-build.md): the release's tag, a local tag, a digest, both.
// TestImageReferenceForms evaluates examples/complete/variables.tf's validation on each.
func imageForms(version string) []string {
	digest := "@sha256:" + strings.Repeat("0", 64)
	return []string{
		"ghcr.io/runnerpool/runnerpool:" + version,
		"123456789012.dkr.ecr.eu-west-1.amazonaws.com/runnerpool:dev",
		"123456789012.dkr.ecr.eu-west-1.amazonaws.com/runnerpool" + digest,
		"ghcr.io/runnerpool/runnerpool:" + version + digest,
	}
}
