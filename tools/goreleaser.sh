#!/usr/bin/env bash
# Prints the path of goreleaser: the one on PATH, else the pinned version built once from the Go
# module proxy into the tools cache (tools/cached-go-tool.sh). Used by tools/release-check.sh and by
# the release tests (reconciler/cmd/runnerpool), which build a snapshot release with it.
set -euo pipefail
GORELEASER_VERSION=${GORELEASER_VERSION:-2.12.7}
exec "$(dirname "$0")/cached-go-tool.sh" goreleaser github.com/goreleaser/goreleaser/v2 "v$GORELEASER_VERSION"
