#!/usr/bin/env bash
# Checks .goreleaser.yml with `goreleaser check`: goreleaser from PATH, else built once from the Go
# module proxy into the tools cache (see tools/tf/ensure-terraform.sh for the cache). The check runs
# on a copy with the project's GitHub remote, so it does not depend on how the clone was made
# (goreleaser reads the release owner and name from the origin remote).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
GORELEASER_VERSION=${GORELEASER_VERSION:-2.12.7}
cache=${RUNNERPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerpool-tools}

gr=$(command -v goreleaser 2>/dev/null || true)
if [ -z "$gr" ]; then
	gr="$cache/goreleaser-v$GORELEASER_VERSION/goreleaser"
	if [ ! -x "$gr" ]; then
		echo "release-check: building goreleaser v$GORELEASER_VERSION into $(dirname "$gr") (a few minutes, once)" >&2
		GOBIN=$(dirname "$gr") CGO_ENABLED=0 go install -trimpath "github.com/goreleaser/goreleaser/v2@v$GORELEASER_VERSION" >&2
	fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/.goreleaser.yml" "$root/terraform-registry-manifest.json" "$work/"
cd "$work"
git init -q
git remote add origin https://github.com/runnerpool/terraform-provider-runnerpool.git
"$gr" check
