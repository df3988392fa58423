//go:build tools

// Package actionlint pins actionlint, the linter of .github/workflows, in a module of its own: it
// needs go.yaml.in/yaml/v4 v4.0.0-rc.3, whose API the later release candidate that golangci-lint
// (tools/go.mod) requires no longer has, so the two cannot share one module's versions.
// `make workflows-check` runs it.
package actionlint

import _ "github.com/rhysd/actionlint/cmd/actionlint"
