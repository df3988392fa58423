#!/usr/bin/env bash
# Prints the path of goreleaser: the one on PATH, else the pinned version built once from the Go
# module proxy into the tools cache (see tools/tf/ensure-terraform.sh for the cache). Used by
# tools/release-check.sh and by the install script's test, which builds a snapshot release with it.
set -euo pipefail
GORELEASER_VERSION=${GORELEASER_VERSION:-2.12.7}
cache=${RUNNERPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerpool-tools}

if gr=$(command -v goreleaser 2>/dev/null); then
	echo "$gr"
	exit 0
fi
gr="$cache/goreleaser-v$GORELEASER_VERSION/goreleaser"
if [ ! -x "$gr" ]; then
	dir=$(dirname "$gr")
	mkdir -p "$dir"
	# Build into a temporary folder and move it in place, so that concurrent callers never run a
	# half-written binary.
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "goreleaser: building v$GORELEASER_VERSION into $dir (a few minutes, once)" >&2
	GOBIN=$tmp CGO_ENABLED=0 go install -trimpath "github.com/goreleaser/goreleaser/v2@v$GORELEASER_VERSION" >&2
	mv -f "$tmp/goreleaser" "$gr"
fi
echo "$gr"
