//go:build linux && userdata_os

// The rendered user data run on a real Debian system (`make userdata-os-test`, in CI by .ci/run): a
// Debian 12 root file system made with debootstrap from Debian's mirror (cached in the tools cache,
// its package lists emptied as a cloud image ships them), entered with chroot in a mount and network
// namespace of its own. The namespace reaches Debian's mirror and this test's servers on the host's
// loopback through slirp4netns (10.0.2.2 is the host's 127.0.0.1); the instance metadata address is
// redirected to a fake IMDSv2 server; the runner tarball (a small fake with the real layout, whose
// bin/installdependencies.sh exits 1 as it does on Amazon Linux 2023) and the agent are served over
// HTTPS with a CA of the test's own. Needs root, debootstrap, slirp4netns, iptables, iproute2 and
// util-linux (`make userdata-os-test` installs them).

package userdata

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// osPreRunner is the class's pre-runner script the boot writes (gzip and base64 in the user data).
const osPreRunner = "#!/bin/bash\necho 'pre-runner of the class'\n"

const (
	osSuite      = "bookworm"
	osInstanceID = "i-0123456789abcdef0"
	// slirpHost is the host's loopback as slirp4netns shows it to the namespace.
	slirpHost = "10.0.2.2"
)

// TestMain doubles as the lock holder the lock-wait case runs inside the namespace: with
// RUNNERPOOL_HOLD_LOCKS set it takes apt's locks (fcntl, as apt does) for the time it names, as
// unattended-upgrades does at first boot.
func TestMain(m *testing.M) {
	if files := os.Getenv("RUNNERPOOL_HOLD_LOCKS"); files != "" {
		os.Exit(holdLocks(strings.Split(files, ":"), os.Getenv("RUNNERPOOL_HOLD_FOR")))
	}
	os.Exit(m.Run())
}

func holdLocks(files []string, hold string) int {
	d, err := time.ParseDuration(hold)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, name := range files {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o640)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK}); err != nil {
			fmt.Fprintln(os.Stderr, "locking", name, err)
			return 2
		}
	}
	fmt.Println("locks held")
	time.Sleep(d)
	return 0
}

// osCase is one boot of the rendered user data.
type osCase struct {
	access  string // the class's job access
	bake    bool   // run `bake` first, then the boot, on the same system
	holdFor string // hold apt's locks this long as the boot starts
}

// TestUserDataOnDebian runs the rendered user data on Debian 12 as cloud-init would (as root, no
// arguments) and checks what the instance is left with: the class's packages and the runner's
// dependencies installed, the runner user, the metadata block rules in the namespace's iptables, the
// runner installed root-owned with its manifest, the agent unit enabled; with apt's locks held at
// the start, the boot waits for them; on a system prepared by `bake`, the boot downloads nothing and
// runs no apt at all.
func TestUserDataOnDebian(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("this test enters a chroot in namespaces of its own and needs root (euid %d)", os.Geteuid())
	}
	for _, bin := range []string{"debootstrap", "slirp4netns", "unshare", "iptables", "ip", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH (Debian: apt-get install debootstrap slirp4netns iptables iproute2 util-linux; make userdata-os-test does): %v", bin, err)
		}
	}
	rootfs := debianRootfs(t)
	srv := newOSServers(t)
	for _, tc := range []struct {
		name string
		c    osCase
	}{
		{"cold-docker-class-locks-held", osCase{access: "docker", holdFor: "40s"}},
		{"baked-docker-class", osCase{access: "docker", bake: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out := runOnDebian(t, rootfs, srv, tc.c)
			t.Logf("%s: %v", tc.name, time.Since(start).Round(time.Second))
			checkBooted(t, out, tc.c)
			if tc.c.bake {
				checkBakedBoot(t, out, srv)
			}
			if tc.c.holdFor != "" && !strings.Contains(out.log, "a package lock held") {
				t.Errorf("the boot did not wait for apt's locks:\n%s", out.log)
			}
			checkBootWait(t, out, tc.c)
		})
	}
}

// checkBootWait: the boot's own time, from the user data's start to the agent started (whose
// registration then takes seconds), fits the registration wait the reconciler gives the class
// (declared.RunnerClass.BootWait): a boot that installs, with apt's locks held as unattended-upgrades
// holds them, must leave room for the longest lock wait the user data allows (declared.AptLockWait)
// within the install's share (declared.InstallAllowance), so that the worst case still fits; a boot on
// the prepared image, with half the deployment's wait to spare for EC2's own boot. The figures are
// logged ("boot wait:" lines).
func checkBootWait(t *testing.T, r osRun, c osCase) {
	t.Helper()
	took, err := time.ParseDuration(strings.TrimSpace(r.bootSeconds) + "s")
	if err != nil {
		t.Fatalf("the boot's time was not measured (%q): %v", r.bootSeconds, err)
	}
	base := declared.DefaultRegistrationWait
	wait := declared.RunnerClass{JobAccess: c.access}.BootWait(base, !c.bake)
	if !c.bake {
		held, err := time.ParseDuration(c.holdFor)
		if err != nil {
			t.Fatal(err)
		}
		rest := took - held // the install and the downloads, the lock wait aside
		worst := declared.AptLockWait + rest
		t.Logf("boot wait: installs, apt's locks held %s: the user data took %s (%s beyond the locks); worst case %s (the %s lock wait); the class's registration wait %s",
			held, took.Round(time.Second), rest.Round(time.Second), worst.Round(time.Second), declared.AptLockWait, wait)
		if took < held {
			t.Errorf("the boot took %s, less than the %s apt's locks were held: it did not wait for them", took, held)
		}
		if rest > declared.InstallAllowance {
			t.Errorf("the boot took %s beyond apt's locks, more than the %s declared.InstallAllowance gives it: a boot waiting the whole %s lock wait would outlast the class's registration wait %s",
				rest.Round(time.Second), declared.InstallAllowance, declared.AptLockWait, wait)
		}
		return
	}
	t.Logf("boot wait: prepared image: the user data took %s; the class's registration wait %s", took.Round(time.Second), wait)
	if took > base/2 {
		t.Errorf("the boot on the prepared image took %s, more than half the %s registration wait (the rest is EC2's boot and the registration)", took, base)
	}
}

// osServers are the test's servers on the host's loopback.
type osServers struct {
	imds, files         *httptest.Server
	caPEM               []byte
	agentSHA, runnerSHA string
	// agentURL and runnerBaseURL are where the boot downloads from: the files server, or the
	// rehearsal's release host (os_release_test.go); 127.0.0.1 is the namespace's slirpHost.
	agentURL, runnerBaseURL       string
	agentGets, runnerGets, tokens atomic.Int32
}

func newOSServers(t *testing.T) *osServers {
	t.Helper()
	s := &osServers{}
	agent := []byte("#!/bin/sh\necho 'runnerpool agent (test)'\n")
	runner := fakeRunnerTarball(t)
	s.agentSHA, s.runnerSHA = sum(agent), sum(runner)

	s.imds = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			s.tokens.Add(1)
			fmt.Fprint(w, "test-token")
		case r.Method == http.MethodGet && r.URL.Path == "/latest/meta-data/instance-id" && r.Header.Get("X-aws-ec2-metadata-token") == "test-token":
			fmt.Fprint(w, osInstanceID)
		default:
			http.Error(w, "unauthorized", http.StatusUnauthorized) // IMDSv2 refuses a call without its token
		}
	}))
	t.Cleanup(s.imds.Close)

	s.files = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/runnerpool_linux_amd64":
			s.agentGets.Add(1)
			w.Write(agent)
		case "/v" + RunnerVersion + "/actions-runner-linux-x64-" + RunnerVersion + ".tar.gz":
			s.runnerGets.Add(1)
			w.Write(runner)
		default:
			http.NotFound(w, r)
		}
	}))
	cert, caPEM := testCertificate(t)
	s.files.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.files.StartTLS()
	t.Cleanup(s.files.Close)
	s.caPEM = caPEM
	s.agentURL, s.runnerBaseURL = s.files.URL+"/runnerpool_linux_amd64", s.files.URL
	return s
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// fakeRunnerTarball is a runner release in miniature: the real top-level layout, and a
// bin/installdependencies.sh that fails as the real one does on Amazon Linux 2023.
func fakeRunnerTarball(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name, body string
		mode       int64
	}{
		{"config.sh", "#!/bin/bash\necho config\n", 0o755},
		{"run.sh", "#!/bin/bash\necho run\n", 0o755},
		{"env.sh", "#!/bin/bash\n", 0o755},
		{"bin/Runner.Listener", "#!/bin/bash\necho listener\n", 0o755},
		{"bin/Runner.Worker", "#!/bin/bash\necho worker\n", 0o755},
		{"bin/installdependencies.sh", "#!/bin/bash\ntouch /tmp/installdependencies-ran\necho 'Can not determine the OS' >&2\nexit 1\n", 0o755},
		{"externals/node20/bin/node", "#!/bin/sh\n", 0o755},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: "./" + f.name, Mode: f.mode, Size: int64(len(f.body)), Uid: 1001, Gid: 121, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testCertificate is a CA and a server certificate for slirpHost signed by it.
func testCertificate(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runnerpool os test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: slirpHost},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(slirpHost)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// debianRootfs is the cached Debian root file system, made once with debootstrap: minbase with
// systemd, curl and ca-certificates (what a cloud image has), the updates and security suites in its
// sources, and its package lists and downloaded packages removed, as a cloud image ships.
func debianRootfs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(stack.ToolsCache(), "debian-"+osSuite+"-rootfs-v1")
	if _, err := os.Stat(filepath.Join(dir, "etc", "os-release")); err == nil {
		return dir
	}
	mirror := os.Getenv("RUNNERPOOL_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	if err := os.MkdirAll(stack.ToolsCache(), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(stack.ToolsCache(), "debootstrap-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), "debootstrap", "--variant=minbase", "--include=systemd,curl,ca-certificates", osSuite, tmp, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap %s from %s: %v\n%s", osSuite, mirror, err, lastLines(string(out), 30))
	}
	sources := fmt.Sprintf("deb %[1]s %[2]s main\ndeb %[1]s %[2]s-updates main\ndeb %[3]s %[2]s-security main\n",
		mirror, osSuite, strings.TrimSuffix(mirror, "/debian")+"/debian-security")
	if err := os.WriteFile(filepath.Join(tmp, "etc/apt/sources.list"), []byte(sources), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, glob := range []string{"var/lib/apt/lists/*_*", "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin"} {
		matches, _ := filepath.Glob(filepath.Join(tmp, glob))
		for _, m := range matches {
			if err := os.Remove(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("debootstrap %s: %v (cached in %s)", osSuite, time.Since(start).Round(time.Second), dir)
	return dir
}

// osRun is what a boot left behind, read inside the namespace before it ended.
type osRun struct {
	log, iptables, packages, passwd, wants, unit, release, tree, requests string
	ranInstallDeps                                                        bool
	bootLog                                                               string // the boot's own part of the log (after a bake)
	bootSeconds                                                           string // the boot's own time, user data start to end, in seconds
	preRunner                                                             string // the pre-runner script the boot wrote
}

// runOnDebian boots the rendered user data for c on a copy-on-write view of rootfs.
func runOnDebian(t *testing.T, rootfs string, srv *osServers, c osCase) osRun {
	t.Helper()
	p := validParams()
	p.Arch, p.JobAccess, p.LogGroup = ArchX64, c.access, "/runnerpool/test/instances"
	p.PreRunnerScript = osPreRunner
	p.AgentX64 = Artifact{URL: strings.Replace(srv.agentURL, "127.0.0.1", slirpHost, 1), SHA256: srv.agentSHA}
	p.RunnerBaseURL = strings.Replace(srv.runnerBaseURL, "127.0.0.1", slirpHost, 1)
	p.Runner = &RunnerPin{Version: RunnerVersion, SHA256X64: srv.runnerSHA} // the fake tarball, at the default version
	script, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	for name, body := range map[string][]byte{"userdata.sh": []byte(script), "ca.crt": srv.caPEM, "inner.sh": []byte(innerScript)} {
		if err := os.WriteFile(filepath.Join(work, name), body, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	archives := filepath.Join(stack.ToolsCache(), "debian-"+osSuite+"-apt-archives")
	if err := os.MkdirAll(filepath.Join(archives, "partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bake := "0"
	if c.bake {
		bake = "1"
	}
	srv.agentGets.Store(0)
	srv.runnerGets.Store(0)

	cmd := exec.CommandContext(t.Context(), "unshare", "--net", "--mount", "--propagation", "private", "bash", filepath.Join(work, "inner.sh"))
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"WORK=" + work, "LOWER=" + rootfs, "ARCHIVES=" + archives, "BAKE=" + bake, "HOLD_FOR=" + c.holdFor,
		"TESTBIN=" + self, "IMDS_PORT=" + port(t, srv.imds.URL)}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slirp := exec.CommandContext(t.Context(), "slirp4netns", "--configure", "--mtu=65520", fmt.Sprint(cmd.Process.Pid), "tap0")
	var slirpOut bytes.Buffer
	slirp.Stdout, slirp.Stderr = &slirpOut, &slirpOut
	if err := slirp.Start(); err != nil {
		t.Fatal(err)
	}
	runErr := cmd.Wait()
	_ = slirp.Process.Kill()
	_ = slirp.Wait()
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(work, "out", name))
		return string(b)
	}
	r := osRun{log: read("bootstrap.log"), iptables: read("iptables"), packages: read("packages"), passwd: read("passwd"),
		wants: read("wants"), unit: read("unit"), release: read("release"), tree: read("tree"), bootLog: read("boot.log"),
		ranInstallDeps: read("installdeps") != "", preRunner: read("prerunner"), bootSeconds: read("boot-seconds")}
	if runErr != nil {
		t.Fatalf("the user data failed on Debian: %v\n%s\n--- bootstrap log:\n%s\n--- slirp4netns:\n%s", runErr, lastLines(out.String(), 40), lastLines(r.log, 60), lastLines(slirpOut.String(), 10))
	}
	return r
}

func port(t *testing.T, u string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// innerScript runs in the new mount and network namespace: it waits for slirp4netns's tap0, sends the
// metadata address to the fake IMDS, mounts an overlay of the cached root file system, runs the user
// data in it (after `bake` when asked), and copies out what the checks read.
const innerScript = `set -euo pipefail
for _ in $(seq 100); do ip link show tap0 >/dev/null 2>&1 && break; sleep 0.1; done
ip link show tap0 >/dev/null
ip link set lo up
iptables -t nat -A OUTPUT -d 169.254.169.254/32 -p tcp --dport 80 -j DNAT --to-destination 10.0.2.2:${IMDS_PORT}
root=${WORK}/merged
mkdir -p "${WORK}/upper" "${WORK}/ovl" "${root}" "${WORK}/out"
mount -t overlay overlay -o "lowerdir=${LOWER},upperdir=${WORK}/upper,workdir=${WORK}/ovl" "${root}"
mount -t proc proc "${root}/proc"
mount --rbind /dev "${root}/dev"
mount --bind "${ARCHIVES}" "${root}/var/cache/apt/archives"
echo 'nameserver 10.0.2.3' > "${root}/etc/resolv.conf"
install -D -m 0644 "${WORK}/ca.crt" "${root}/usr/local/share/ca-certificates/runnerpool-test.crt"
chroot "${root}" update-ca-certificates >/dev/null
install -m 0700 "${WORK}/userdata.sh" "${root}/root/userdata.sh"
# SYSTEMD_OFFLINE: systemctl enables units offline and ignores start and daemon-reload, as it does in a
# chroot it recognises (it cannot here where /proc/1/root is unreadable, as in some VMs).
run() { chroot "${root}" /usr/bin/env -i SYSTEMD_OFFLINE=1 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root /bin/bash /root/userdata.sh "$@"; }
if [ "${BAKE}" = 1 ]; then
  run bake docker
  cp "${root}/var/log/runnerpool-bootstrap.log" "${WORK}/out/bake.log"
  : > "${root}/var/log/runnerpool-bootstrap.log"
fi
if [ -n "${HOLD_FOR}" ]; then
  RUNNERPOOL_HOLD_LOCKS="${root}/var/lib/dpkg/lock-frontend:${root}/var/lib/dpkg/lock:${root}/var/lib/apt/lists/lock" \
    RUNNERPOOL_HOLD_FOR="${HOLD_FOR}" "${TESTBIN}" > "${WORK}/out/hold.log" 2>&1 &
  for _ in $(seq 100); do grep -q 'locks held' "${WORK}/out/hold.log" 2>/dev/null && break; sleep 0.1; done
fi
rc=0
boot_start=$(date +%s.%N)
run || rc=$?
awk -v end="$(date +%s.%N)" -v start="${boot_start}" 'BEGIN { printf "%.1f\n", end - start }' > "${WORK}/out/boot-seconds"
cp "${root}/var/log/runnerpool-bootstrap.log" "${WORK}/out/boot.log"
cat "${WORK}/out/bake.log" "${WORK}/out/boot.log" > "${WORK}/out/bootstrap.log" 2>/dev/null || cp "${WORK}/out/boot.log" "${WORK}/out/bootstrap.log"
iptables-save > "${WORK}/out/iptables"
chroot "${root}" dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' > "${WORK}/out/packages"
cp "${root}/etc/passwd" "${WORK}/out/passwd"
ls "${root}/etc/systemd/system/multi-user.target.wants/" > "${WORK}/out/wants" || true
cp "${root}/etc/systemd/system/runnerpool-agent.service" "${WORK}/out/unit" || true
cat "${root}/var/lib/runnerpool/runner.release" > "${WORK}/out/release" || true
chroot "${root}" stat -c '%n %U:%G %a' /opt/actions-runner /opt/actions-runner/bin/Runner.Listener /opt/actions-runner/_work /var/lib/runnerpool/runner.sha256 /usr/local/bin/runnerpool > "${WORK}/out/tree" || true
cp "${root}/opt/runnerpool/pre-runner.sh" "${WORK}/out/prerunner" || true
[ ! -e "${root}/tmp/installdependencies-ran" ] || echo yes > "${WORK}/out/installdeps"
wait
exit "${rc}"
`

// checkBooted checks what every boot must leave.
func checkBooted(t *testing.T, r osRun, c osCase) {
	t.Helper()
	for _, pkg := range []string{"iptables", "docker.io", "rootlesskit", "slirp4netns", "uidmap", "libicu72", "libkrb5-3", "zlib1g", "liblttng-ust1", "libssl3"} {
		if !strings.Contains(r.packages, "\n"+pkg+" ii ") && !strings.HasPrefix(r.packages, pkg+" ii ") {
			t.Errorf("package %s is not installed", pkg)
		}
	}
	if !strings.Contains(r.passwd, "\n"+RunnerUser+":") {
		t.Errorf("no %s user in /etc/passwd", RunnerUser)
	}
	for _, want := range []string{"-m owner --uid-owner", "-A DOCKER-USER -d 169.254.169.254/32 -j REJECT", "-A FORWARD -j DOCKER-USER"} {
		if !strings.Contains(r.iptables, want) {
			t.Errorf("the metadata block is not applied: no %q in\n%s", want, r.iptables)
		}
	}
	for _, want := range []string{ServiceName, "runnerpool-block-job-metadata.service", "runnerpool-logs.service"} {
		if !strings.Contains(r.wants, want) {
			t.Errorf("%s is not enabled (multi-user.target.wants: %q)", want, r.wants)
		}
	}
	if !strings.Contains(r.unit, "ExecStart="+AgentPath+" agent -table runnerpool-prod") || !strings.Contains(r.unit, "-job-access "+c.access) {
		t.Errorf("agent unit:\n%s", r.unit)
	}
	for _, want := range []string{RunnerDir + " root:" + RunnerUser + " 1775", RunnerDir + "/bin/Runner.Listener root:root 755",
		RunnerDir + "/_work " + RunnerUser + ":" + RunnerUser + " 755", ManifestPath + " root:root 600", AgentPath + " root:root 755"} {
		if !strings.Contains(r.tree, want) {
			t.Errorf("installation: no %q in\n%s", want, r.tree)
		}
	}
	if !strings.HasPrefix(r.release, RunnerVersion+" ") {
		t.Errorf("runner.release = %q", r.release)
	}
	if r.preRunner != osPreRunner {
		t.Errorf("pre-runner script on the instance = %q, want %q", r.preRunner, osPreRunner)
	}
	if r.ranInstallDeps {
		t.Errorf("the runner's installdependencies.sh ran")
	}
	if !strings.Contains(r.log, "runnerpool: agent started on "+osInstanceID) {
		t.Errorf("the bootstrap did not finish:\n%s", lastLines(r.log, 30))
	}
}

// checkBakedBoot: on a prepared system the boot downloads nothing and runs no apt.
func checkBakedBoot(t *testing.T, r osRun, srv *osServers) {
	t.Helper()
	if n, m := srv.agentGets.Load(), srv.runnerGets.Load(); n != 1 || m != 1 {
		t.Errorf("agent downloaded %d times, runner %d times over bake and boot; want once each (at bake)", n, m)
	}
	for _, want := range []string{"runner " + RunnerVersion + " is installed and intact: using it", "is the wanted one: using it"} {
		if !strings.Contains(r.bootLog, want) {
			t.Errorf("boot log lacks %q:\n%s", want, r.bootLog)
		}
	}
	for _, unwanted := range []string{"Reading package lists", "Hit:", "Get:"} {
		if strings.Contains(r.bootLog, unwanted) {
			t.Errorf("the boot on a prepared system ran apt (%q):\n%s", unwanted, r.bootLog)
		}
	}
}
