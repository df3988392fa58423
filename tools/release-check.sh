#!/usr/bin/env bash
# Checks .goreleaser.yml with `goreleaser check` (goreleaser from tools/goreleaser.sh). The check runs
# on a copy with the project's GitHub remote, so it does not depend on how the clone was made
# (goreleaser reads the release owner and name from the origin remote).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gr=$("$root/tools/goreleaser.sh")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/.goreleaser.yml" "$root/terraform-registry-manifest.json" "$work/"
cd "$work"
git init -q
git remote add origin https://github.com/runnerpool/terraform-provider-runnerpool.git
"$gr" check
