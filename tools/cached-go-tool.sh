#!/usr/bin/env bash
# Prints the path of a Go command built once from the Go module proxy into the tools cache (see
# tools/tf/ensure-terraform.sh for the cache), the one on PATH when there is one:
#
#   tools/cached-go-tool.sh NAME PACKAGE VERSION     e.g. promtool github.com/prometheus/prometheus/cmd/promtool v0.316.0
#
# Used by tools/goreleaser.sh and tools/promtool.sh. Progress goes to stderr; stdout is only the path.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 NAME PACKAGE VERSION" >&2; exit 2; }
name=$1 pkg=$2 version=$3
cache=${RUNNERPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerpool-tools}

if bin=$(command -v "$name" 2>/dev/null); then
	echo "$bin"
	exit 0
fi
bin="$cache/$name-$version/$name"
if [ ! -x "$bin" ]; then
	dir=$(dirname "$bin")
	mkdir -p "$dir"
	# Build into a temporary folder and move it in place, so that concurrent callers never run a
	# half-written binary. go install pkg@version builds outside any module: no go.mod is touched.
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "$name: building $version into $dir (a few minutes, once)" >&2
	GOBIN=$tmp CGO_ENABLED=0 go install -trimpath "$pkg@$version" >&2
	mv -f "$tmp/$name" "$bin"
fi
echo "$bin"
