#!/usr/bin/env bash
# Installs the runnerpool binary for the provision and release actions, in seconds: the released
# archive for the runner's OS and architecture (names from .goreleaser.yml), verified against the
# release's checksums file before anything is unpacked. `go install` is used only when asked for
# (RP_INSTALL=go-install): a compile on a runner without a Go cache is the start-up latency runnerpool
# exists to remove.
#
# Environment:
#   RP_VERSION      release to install: empty (default) for the actions' own release, the version in
#                   VERSION beside this script (at a release's tag, that release: release.yml refuses
#                   a tag VERSION does not name); "latest"; or a tag such as v1.2.3 (or 1.2.3)
#   RP_INSTALL      "release" (default) or "go-install"
#   RP_RELEASE_URL  releases base URL (default https://github.com/runnerpool/terraform-provider-runnerpool/releases)
#   RUNNER_OS, RUNNER_ARCH, RUNNER_TOOL_CACHE, RUNNER_TEMP, GITHUB_PATH: set by GitHub Actions
#
# Nothing is run unverified. On a reused runner the tool cache (and PATH) outlive the job, so a
# previous job could have replaced what is there: a runnerpool on PATH, the cached binary or the
# cached archive is used only when it matches the release's checksums file for the requested version,
# fetched now (the archive by its listed digest, a binary by the digest of the binary in that
# verified archive). Anything else is replaced from a verified archive, downloaded again when the
# cached one does not match. On success the install directory is appended to GITHUB_PATH (later
# steps find `runnerpool`) and printed on stdout.
set -euo pipefail

module=github.com/runnerpool/terraform-provider-runnerpool
# The actions' own release: the VERSION file of the commit the workflow pinned them to.
own=$(dirname "${BASH_SOURCE[0]}")/VERSION
version=${RP_VERSION:-}
install=${RP_INSTALL:-release}
base=${RP_RELEASE_URL:-https://$module/releases}
base=${base%/}

fail() {
	echo "install-runnerpool: $*" >&2
	exit 1
}

add_path() {
	if [ -n "${GITHUB_PATH:-}" ]; then
		echo "$1" >>"$GITHUB_PATH"
	fi
	echo "$1"
}

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | awk '{print $1}'
	else
		shasum -a 256 "$1" | awk '{print $1}'
	fi
}

if [ -z "$version" ]; then
	[ -r "$own" ] || fail "no version given and no $own (the actions' own release)"
	version=$(tr -d ' \t\r\n' <"$own")
	[ -n "$version" ] || fail "$own is empty"
fi
pinned=${version#v}
if [ "$version" = latest ]; then
	pinned=""
fi

case "$install" in
release) ;;
go-install)
	command -v go >/dev/null 2>&1 || fail "RP_INSTALL=go-install needs Go on the runner (actions/setup-go)"
	ref=$version
	if [ "$ref" != latest ] && [ "${ref#v}" = "$ref" ]; then
		ref=v$ref
	fi
	echo "install-runnerpool: go install $module/reconciler/cmd/runnerpool@$ref (slow: compiles on the runner)" >&2
	go install "$module/reconciler/cmd/runnerpool@$ref" >&2
	add_path "$(go env GOPATH)/bin"
	exit 0
	;;
*) fail "RP_INSTALL $install: want release or go-install" ;;
esac

# The release's OS and architecture names (goreleaser's .Os and .Arch): linux only, amd64 or arm64.
runner_os=${RUNNER_OS:-$(uname -s)}
runner_arch=${RUNNER_ARCH:-$(uname -m)}
case "$runner_os" in
Linux | linux) os=linux ;;
*) fail "no runnerpool release for $runner_os (releases are for linux); use install: go-install" ;;
esac
case "$runner_arch" in
X64 | x86_64 | amd64) arch=amd64 ;;
ARM64 | aarch64 | arm64) arch=arm64 ;;
*) fail "no runnerpool release for $runner_arch (releases are for amd64 and arm64); use install: go-install" ;;
esac

curl_() {
	curl --fail --silent --show-error --location --retry 3 --connect-timeout 10 "$@"
}

# "latest" is the tag GitHub's /releases/latest redirects to.
if [ -z "$pinned" ]; then
	tag_url=$(curl_ --head --output /dev/null --write-out '%{url_effective}' "$base/latest") ||
		fail "finding the latest release at $base/latest"
	tag=${tag_url##*/}
	if [ -z "$tag" ] || [ "$tag" = latest ]; then
		fail "no release tag in $tag_url"
	fi
	pinned=${tag#v}
fi
case "$pinned" in
*[!A-Za-z0-9._+-]*) fail "version $pinned: not a release version" ;;
esac

dir=${RUNNER_TOOL_CACHE:-${RUNNER_TEMP:-${TMPDIR:-/tmp}}}/runnerpool/$pinned/$arch
archive=runnerpool_${pinned}_${os}_${arch}.tar.gz
sums=terraform-provider-runnerpool_${pinned}_SHA256SUMS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
url=$base/download/v$pinned
# The checksums file is fetched on every run: it is what everything else is checked against.
curl_ --output "$work/$sums" "$url/$sums" || fail "downloading $url/$sums"

# The archive's line in the checksums file, by exact name; then its digest.
want=$(awk -v f="$archive" '$2 == f || $2 == "*" f {print $1}' "$work/$sums")
[ -n "$want" ] || fail "$archive is not listed in $sums: refusing it"
if [ -f "$dir/$archive" ] && [ "$(sha256 "$dir/$archive")" = "$want" ]; then
	cp "$dir/$archive" "$work/$archive"
else
	if [ -f "$dir/$archive" ]; then
		echo "install-runnerpool: cached $dir/$archive does not match $sums: downloading it again" >&2
	fi
	curl_ --output "$work/$archive" "$url/$archive" || fail "downloading $url/$archive"
	got=$(sha256 "$work/$archive")
	[ "$got" = "$want" ] || fail "$archive: sha256 $got does not match $sums ($want): refusing it"
fi

mkdir -p "$work/x"
tar -xzf "$work/$archive" -C "$work/x" runnerpool || fail "$archive holds no runnerpool binary"
binary=$(sha256 "$work/x/runnerpool")

# A runnerpool on PATH, or the cached one, that is exactly the release's binary is used as it is.
if existing=$(command -v runnerpool 2>/dev/null) && [ "$(sha256 "$existing")" = "$binary" ]; then
	echo "install-runnerpool: using $existing (matches $sums)" >&2
	add_path "$(dirname "$existing")"
	exit 0
fi
if [ -f "$dir/runnerpool" ]; then
	if [ "$(sha256 "$dir/runnerpool")" = "$binary" ]; then
		echo "install-runnerpool: using cached $dir/runnerpool (matches $sums)" >&2
		add_path "$dir"
		exit 0
	fi
	echo "install-runnerpool: cached $dir/runnerpool does not match $sums: replacing it" >&2
fi

mkdir -p "$dir"
install -m 0755 "$work/x/runnerpool" "$dir/runnerpool.tmp"
mv -f "$dir/runnerpool.tmp" "$dir/runnerpool"
cp "$work/$archive" "$dir/$archive.tmp"
mv -f "$dir/$archive.tmp" "$dir/$archive"
echo "install-runnerpool: installed runnerpool $pinned ($os/$arch) in $dir" >&2
add_path "$dir"
