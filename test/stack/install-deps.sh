#!/usr/bin/env bash
# install-deps.sh installs what the local stack (test/stack) needs and the repository does not
# hold: the npm packages of test/stack/node from the committed lock file (npm ci), and a Java
# runtime for DynamoDB Local from Debian (openjdk-17-jre-headless) when java is missing or older
# than 17. `make deps` runs it (the demo, the stack, the bench and the fault matrix need no more).
# With --test it also installs what only the tests use: the IAM policy simulator's npm package
# (test/stack/iamsim), shellcheck, iptables and debootstrap (the user-data tests),
# chromium (the dashboard's browser test), and Docker for the "docker" job access tests (Debian's
# docker.io with rootlesskit, slirp4netns and uidmap, and busybox-static for the image they import);
# `make test` runs it so. Idempotent, and silent when
# there is nothing to do.
set -euo pipefail

for_tests=false
case "${1:-}" in
--test) for_tests=true ;;
"") ;;
*)
	echo "install-deps: usage: install-deps.sh [--test]" >&2
	exit 2
	;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node_dir="$here/node"

say() { echo "install-deps: $*"; }
die() {
	echo "install-deps: error: $*" >&2
	exit 1
}

# --- npm packages -----------------------------------------------------------------------------
# The installed packages are those of the lock file whose checksum install-deps wrote beside them
# after npm ci. A checksum, not modification times: a fresh checkout (a clone, a git worktree whose
# node_modules links to another tree's) gives the lock file a new time without changing it.
stamp="$node_dir/node_modules/.runnerpool-lock.sha256"
want="$(sha256sum "$node_dir/package-lock.json" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
	command -v node >/dev/null 2>&1 || die "node not found on PATH: install Node.js 20 or later"
	command -v npm >/dev/null 2>&1 || die "npm not found on PATH: install Node.js 20 or later (it ships npm)"
	say "npm ci in ${node_dir#"$PWD/"} (DynamoDB Local, fauxqs)"
	(cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) ||
		die "npm ci failed in $node_dir"
	echo "$want" >"$stamp"
fi

# --- Java -------------------------------------------------------------------------------------
# java_major prints the major version of the java on PATH ("1.8.0_x" is 8), or nothing.
java_major() {
	command -v java >/dev/null 2>&1 || return 0
	local v
	v="$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1)"
	[[ "$v" == 1.* ]] && v="${v#1.}"
	echo "${v%%[.+_-]*}"
}

major="$(java_major)"
if [[ -z "$major" || "$major" -lt 17 ]]; then
	if [[ -z "$major" ]]; then
		say "java not found: installing openjdk-17-jre-headless (DynamoDB Local runs on Java)"
	else
		say "java $major is too old for DynamoDB Local: installing openjdk-17-jre-headless"
	fi
	command -v apt-get >/dev/null 2>&1 ||
		die "apt-get not available: install a Java 17 or later runtime yourself, then run make deps again"
	sudo=()
	if [[ "$(id -u)" -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 ||
			die "installing Java needs root and sudo is not available: run apt-get install openjdk-17-jre-headless as root"
		sudo=(sudo)
	fi
	# Slim Debian images lack /usr/share/man/man1, where the JRE's postinst links the man pages.
	"${sudo[@]}" mkdir -p /usr/share/man/man1
	if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
		! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null; then
		die "could not install openjdk-17-jre-headless with apt-get; install a Java 17 or later runtime and run make deps again"
	fi
	hash -r
	major="$(java_major)"
	[[ -n "$major" ]] || die "openjdk-17-jre-headless installed but java is still not on PATH"
	[[ "$major" -ge 17 ]] ||
		die "java on PATH is still version $major: put /usr/lib/jvm/java-17-openjdk-*/bin first on PATH"
	say "java $major installed"
fi

# apt_install PKG installs one Debian package (as root, or through sudo), updating the package lists
# only when the first try fails.
apt_install() {
	local pkg="$1"
	command -v apt-get >/dev/null 2>&1 || die "apt-get not available: install $pkg yourself, then run make deps again"
	local sudo=()
	if [[ "$(id -u)" -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 || die "installing $pkg needs root and sudo is not available"
		sudo=(sudo)
	fi
	if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null; then
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null ||
			die "could not install $pkg with apt-get"
	fi
}

$for_tests || exit 0

# --- the IAM simulator ------------------------------------------------------------------------
# The IAM tests check examples/complete's policies with @cloud-copilot/iam-simulate (AGPL: test-only,
# in a folder of its own, test/stack/iamsim), from its committed lock file like the stack's.
sim_dir="$here/iamsim"
sim_stamp="$sim_dir/node_modules/.package-lock.json"
if [[ ! -f "$sim_stamp" || "$sim_dir/package-lock.json" -nt "$sim_stamp" ]]; then
	say "npm ci in ${sim_dir#"$PWD/"} (the IAM policy simulator)"
	(cd "$sim_dir" && npm ci --no-audit --no-fund --loglevel=error) ||
		die "npm ci failed in $sim_dir"
fi

# --- shellcheck -------------------------------------------------------------------------------
# The user-data tests run shellcheck on every rendered bootstrap script.
if ! command -v shellcheck >/dev/null 2>&1; then
	say "shellcheck not found: installing it (the user-data tests lint the rendered scripts)"
	apt_install shellcheck
fi

# --- iptables ---------------------------------------------------------------------------------
# The user-data tests run the rendered metadata block script with the real iptables, in a network
# namespace of their own.
if ! command -v iptables >/dev/null 2>&1 || ! command -v ip6tables-save >/dev/null 2>&1; then
	say "iptables not found: installing it (the user-data tests run the metadata block rules)"
	apt_install iptables
fi

# --- debootstrap ------------------------------------------------------------------------------
# The user-data OS test (make userdata-os-test) boots the rendered user data on a Debian root file
# system it makes with debootstrap; slirp4netns (below) gives that system its network.
if ! command -v debootstrap >/dev/null 2>&1 && ! [[ -x /usr/sbin/debootstrap ]]; then
	say "debootstrap not found: installing it (the user-data OS test)"
	apt_install debootstrap
fi

# --- chromium ---------------------------------------------------------------------------------
# The dashboard's browser test drives the pages in headless Chromium (Debian's chromium package).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
	say "chromium not found: installing it (the dashboard's headless browser test)"
	apt_install chromium
fi

# --- rootless Docker ----------------------------------------------------------------------------
# The "docker" job access tests run the agent's rootless daemon (dockerd-rootless.sh of docker.io,
# rootlesskit, slirp4netns, newuidmap) as a throwaway account, and import an image made of the static
# busybox (no registry is reachable). No daemon is started here.
for pkg in docker.io:dockerd rootlesskit:rootlesskit slirp4netns:slirp4netns uidmap:newuidmap; do
	if ! command -v "${pkg#*:}" >/dev/null 2>&1; then
		say "${pkg#*:} not found: installing ${pkg%%:*} (the rootless Docker tests)"
		apt_install "${pkg%%:*}"
	fi
done
if ! command -v busybox >/dev/null 2>&1 || ! file -L "$(command -v busybox)" 2>/dev/null | grep -q 'statically linked'; then
	say "no static busybox: installing busybox-static (the rootless Docker tests' image)"
	apt_install busybox-static
fi
# slirp4netns opens /dev/net/tun as the runner user: udev makes it 0666 on a Debian host (and on EC2),
# some containers leave it root's alone.
if [[ -c /dev/net/tun && "$(stat -c %a /dev/net/tun)" != 666 ]]; then
	say "/dev/net/tun is mode $(stat -c %a /dev/net/tun): making it 0666, as udev does"
	if [[ "$(id -u)" -ne 0 ]]; then sudo chmod 0666 /dev/net/tun; else chmod 0666 /dev/net/tun; fi
fi
