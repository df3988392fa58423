#!/usr/bin/env bash
# Fails when the committed docs/ differ from what `make docs` (tfplugindocs, from templates/, examples/
# and the provider's schema) generates. It generates into a temporary copy of the repository, so the
# working tree is never touched. CI runs it; run `make docs` and commit docs/ to fix a failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# tfplugindocs asks a Terraform CLI for the provider's schema: use the one the acceptance tests use.
tf=$("$root/tools/tf/ensure-terraform.sh" terraform)
export PATH="$(dirname "$tf"):$PATH"

copy="$work/repo"
mkdir -p "$copy"
(cd "$root" && tar --exclude=./.git --exclude=./bin --exclude=./dist --exclude='node_modules' --exclude='./.terraform*' -cf - .) | (cd "$copy" && tar -xf -)
(cd "$root/tools" && go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate \
	--provider-dir "$copy" --provider-name runnerpool) >"$work/tfplugindocs.log" 2>&1 || {
	cat "$work/tfplugindocs.log" >&2
	echo "docs-check: tfplugindocs failed" >&2
	exit 1
}
if ! diff -ruN "$root/docs" "$copy/docs"; then
	echo "docs-check: docs/ is out of date: run 'make docs' and commit the result" >&2
	exit 1
fi
echo "docs-check: docs/ is up to date"
