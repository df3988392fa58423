//go:build tools

// Package tools pins the development tools (docs generator, linter) in their own module so the
// product's go.mod stays lean. Install them with `make tools`.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)
