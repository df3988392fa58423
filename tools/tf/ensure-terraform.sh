#!/usr/bin/env bash
# Prints the path of a Terraform or OpenTofu CLI for the provider's acceptance tests, building it from
# the Go module proxy when none is installed, into a cache that outlives the clone (so CI builds it
# once per cache, not once per run).
#
#   tools/tf/ensure-terraform.sh terraform   # `terraform` on PATH, else builds hashicorp/terraform
#   tools/tf/ensure-terraform.sh tofu        # `tofu` on PATH, else builds opentofu/opentofu
#
# Environment:
#   RUNNERPOOL_TOOLS_CACHE  cache folder (default: the user cache dir, ${XDG_CACHE_HOME:-~/.cache},
#                           /runnerpool-tools; os.UserCacheDir on Linux). Cache it in CI.
#   TERRAFORM_VERSION       version built when terraform is missing (default 1.5.7, the last MPL release)
#   TOFU_VERSION            version built when tofu is missing (default 1.12.6, builds with Go 1.26)
#   RUNNERPOOL_TF_BUILD=1   ignore the CLI on PATH and use (or build) the cached one
#
# Building takes a few minutes (terraform ~2 min, OpenTofu ~8 min on 2 cores). Progress goes to stderr;
# stdout is only the path.
set -euo pipefail

TERRAFORM_VERSION=${TERRAFORM_VERSION:-1.5.7}
TOFU_VERSION=${TOFU_VERSION:-1.12.6}
cache=${RUNNERPOOL_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerpool-tools}

usage() { echo "usage: $0 terraform|tofu" >&2; exit 2; }
[ $# -eq 1 ] || usage

on_path() {
	[ "${RUNNERPOOL_TF_BUILD:-}" = 1 ] && return 1
	command -v "$1" 2>/dev/null
}

case "$1" in
terraform)
	if on_path terraform; then exit 0; fi
	dir="$cache/terraform-v$TERRAFORM_VERSION"
	if [ ! -x "$dir/terraform" ]; then
		echo "ensure-terraform: building terraform v$TERRAFORM_VERSION into $dir (a few minutes, once)" >&2
		mkdir -p "$dir"
		# go install pkg@version builds outside any module: the repository's go.mod is not touched.
		GOBIN="$dir" CGO_ENABLED=0 go install -trimpath "github.com/hashicorp/terraform@v$TERRAFORM_VERSION" >&2
	fi
	echo "$dir/terraform"
	;;
tofu)
	if on_path tofu; then exit 0; fi
	dir="$cache/tofu-v$TOFU_VERSION"
	if [ ! -x "$dir/tofu" ]; then
		echo "ensure-terraform: building OpenTofu v$TOFU_VERSION into $dir (several minutes, once)" >&2
		mkdir -p "$dir"
		# OpenTofu's go.mod replaces hcl with its fork, which `go install pkg@version` refuses; build
		# the module source from the module cache instead, where its go.mod is the main module's.
		work=$(mktemp -d)
		trap 'rm -rf "$work"' EXIT
		src=$(cd "$work" && go mod download -json "github.com/opentofu/opentofu@v$TOFU_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
		[ -n "$src" ] || { echo "ensure-terraform: could not download github.com/opentofu/opentofu@v$TOFU_VERSION" >&2; exit 1; }
		(cd "$src" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" go build -trimpath \
			-ldflags "-X github.com/opentofu/opentofu/version.dev=no" -o "$work/tofu" ./cmd/tofu) >&2
		mv "$work/tofu" "$dir/tofu"
	fi
	echo "$dir/tofu"
	;;
*)
	usage
	;;
esac
