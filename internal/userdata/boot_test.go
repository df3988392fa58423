package userdata

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestAptLockWaitIsOneDeadline: the apt calls of a boot share one deadline, declared.AptLockWait after
// the first, which the runner class's registration wait counts on (declared.BootWait). The script's
// apt_get runs under bash with apt-get and sleep replaced: apt-get always fails after waiting out the
// lock timeout it is given (a lock held throughout), and time is bash's SECONDS, moved on by each.
// Before, each call had 600 s of its own and two calls waited 1,200 s and more.
func TestAptLockWaitIsOneDeadline(t *testing.T) {
	t.Parallel()
	script := render(t, func(p *Params) { p.Arch = ArchX64 })
	start := strings.Index(script, "apt_get() {\n")
	end := strings.Index(script[max(start, 0):], "\n}\n")
	if start < 0 || end < 0 {
		t.Fatalf("no apt_get function in the script")
	}
	fn := script[start : start+end+3]
	harness := `set -u
apt-get() {
  local o
  for o in "$@"; do
    case "${o}" in DPkg::Lock::Timeout=*) SECONDS=$((SECONDS + ${o#*=})); echo "timeout ${o#*=}" >&2 ;; esac
  done
  return 1
}
sleep() { SECONDS=$((SECONDS + $1)); }
` + fn + `
apt_get update >/dev/null || echo "update gave up at ${SECONDS}"
apt_get install -y x >/dev/null || echo "install gave up at ${SECONDS}"
`
	out, err := exec.CommandContext(t.Context(), "bash", "-c", harness).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	limit := int(declared.AptLockWait.Seconds())
	var gaveUp []int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if at, ok := strings.CutPrefix(line, "update gave up at "); ok {
			n, _ := strconv.Atoi(at)
			gaveUp = append(gaveUp, n)
		}
		if at, ok := strings.CutPrefix(line, "install gave up at "); ok {
			n, _ := strconv.Atoi(at)
			gaveUp = append(gaveUp, n)
		}
	}
	if len(gaveUp) != 2 {
		t.Fatalf("want both calls to give up, got:\n%s", out)
	}
	// One retry's sleep (10 s) past the deadline at most.
	if last := gaveUp[1]; last > limit+10 {
		t.Errorf("the boot's apt calls waited %d s in all, want at most %d (declared.AptLockWait) and one retry:\n%s", last, limit+10, out)
	}
	if !strings.Contains(string(out), "timeout "+fmt.Sprint(limit)) {
		t.Errorf("the first call's lock timeout is not %d s:\n%s", limit, out)
	}
}

// TestRenderPackageStep: every variant refreshes the package lists before any install, installs in
// one apt step that waits for the package locks, never runs the runner's installdependencies.sh
// (which exits 1 on Amazon Linux 2023) and installs the runner's dependencies with dnf there. The
// script runs on the real Debian system in TestUserDataOnDebian (os_test.go).
func TestRenderPackageStep(t *testing.T) {
	t.Parallel()
	aptInstall := regexp.MustCompile(`apt(-get|_get) install`)
	for _, tc := range append(goldenCases, struct {
		name string
		p    func(*Params)
	}{"job-access-docker", func(p *Params) { p.JobAccess = "docker" }}, struct {
		name string
		p    func(*Params)
	}{"job-access-root", func(p *Params) { p.JobAccess = "root" }}) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			script := render(t, tc.p)
			installs := aptInstall.FindAllStringIndex(script, -1)
			if len(installs) != 1 {
				t.Fatalf("%d apt installs in the script, want one package step", len(installs))
			}
			if update := strings.Index(script, "apt_get update"); update < 0 || update > installs[0][0] {
				t.Errorf("apt-get update (at %d) does not come before the install (at %d)", update, installs[0][0])
			}
			for _, want := range []string{
				"-o DPkg::Lock::Timeout=$((apt_deadline",                                    // the install waits for the dpkg lock
				"until DEBIAN_FRONTEND=noninteractive apt-get",                              // a held lists lock is retried
				"want '' 'lttng-ust openssl-libs krb5-libs zlib libicu'",                    // AL2023: the runner's dependencies with dnf
				`dnf install -y "${dnf_pkgs[@]}"`,                                           // in one dnf step
				"FAILED (exit $1) at line $2",                                               // a failure names its step
				`echo "${RUNNER_VERSION} ${runner_sha256}" > "${STATE_DIR}/runner.release"`, // what a prepared runner is checked by
			} {
				if !strings.Contains(script, want) {
					t.Errorf("script lacks %q", want)
				}
			}
			if strings.Contains(script, "installdependencies.sh\"") || strings.Contains(script, "bin/installdependencies.sh\n") {
				t.Errorf("script runs the runner's installdependencies.sh")
			}
		})
	}
}

// TestRenderSkipsPreparedRunner: the runner download, its extraction and the dependency install all
// sit behind the check of an installed runner (runner.release and its manifest), and the agent download
// behind the check of the installed agent's SHA-256.
func TestRenderSkipsPreparedRunner(t *testing.T) {
	t.Parallel()
	script := render(t, func(p *Params) { p.Arch = ArchX64 })
	guard := strings.Index(script, "if ! $runner_ok; then\n  fetch ")
	download := strings.Index(script, "actions-runner-linux-${arch}-${RUNNER_VERSION}.tar.gz")
	if guard < 0 || download < guard {
		t.Errorf("the runner download is not behind the prepared-runner check")
	}
	if agentGuard, fetch := strings.Index(script, "if agent_ready; then"), strings.Index(script, `fetch "${agent_url}"`); agentGuard < 0 || fetch < agentGuard {
		t.Errorf("the agent download is not behind the installed-agent check")
	}
	for _, want := range []string{
		`sha256sum --check --quiet --strict "${STATE_DIR}/runner.sha256"`,
		`echo "${agent_sha256}  ${AGENT_PATH}" | sha256sum --check --status --strict -`,
		`if ! $runner_ok || [ "${#apt_pkgs[@]}" -gt 0 ]; then`, // nothing to install, no apt-get update
	} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	// Bake mode stops before anything of an instance: the metadata call, the units.
	bake, imds := strings.Index(script, `if [ "${MODE}" = bake ]; then`), strings.Index(script, "instance_id=$(imds instance-id)")
	if bake < 0 || imds < bake || strings.Index(script, "systemctl enable") < bake {
		t.Errorf("bake mode does not stop before the instance's own steps")
	}
}
