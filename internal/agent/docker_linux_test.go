//go:build linux

package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
)

// TestRootlessDockerGivesNoRootNorMetadata runs the agent's rootless daemon (agent.RootlessDocker,
// the real dockerd of Debian's docker.io under rootlesskit and slirp4netns) as a throwaway runner
// account, in a network namespace of its own where the instance metadata address is served by root
// and the user data's own block script (the runner uid's owner match) is in force. A container
// reaches another address of that network, but not the metadata service: its connection, made by
// slirp4netns as the runner uid, hits the REJECT rule, while root's reaches the service. Root in a
// container is the runner uid on the host: a file it writes in a bind mount is the runner's, and a
// root-owned host directory stays closed to it.
func TestRootlessDockerGivesNoRootNorMetadata(t *testing.T) {
	t.Parallel()
	tools := agenttest.Docker(t)
	acct := agenttest.NewAccount(t, 0)
	d := agenttest.RootlessDocker(t, acct, tools)
	d.Cloneflags = syscall.CLONE_NEWNET
	ctx := t.Context()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ns := "--net=/proc/" + strconv.Itoa(d.Pid()) + "/ns/net"
	inNS := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "nsenter", append([]string{ns}, args...)...).CombinedOutput()
		return string(out), err
	}

	// The network: the metadata address and another one on lo, each served by root (busybox httpd),
	// and the user data's block rules for the account's uid.
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	for name, body := range map[string]string{"latest": "role-credentials\n", "ok": "reachable\n"} {
		if err := os.MkdirAll(www, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(www, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	block := blockScript(t, acct.UID)
	if err := os.WriteFile(filepath.Join(dir, "block.sh"), []byte(block), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := inNS("sh", "-c", "ip link set lo up && ip addr add 169.254.169.254/32 dev lo && ip addr add 10.254.0.1/32 dev lo && "+filepath.Join(dir, "block.sh")); err != nil {
		t.Fatalf("setting up the network: %v\n%s", err, out)
	}
	for _, addr := range []string{"169.254.169.254:80", "10.254.0.1:80"} {
		srv := exec.CommandContext(ctx, "nsenter", ns, "busybox", "httpd", "-f", "-p", addr, "-h", www)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	}
	if out, err := d.Run(ctx, "import", tools.Image, "busybox:local"); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	run := func(args ...string) (string, error) {
		out, err := d.Run(ctx, append([]string{"run", "--rm"}, args...)...)
		return strings.TrimSpace(string(out)), err
	}

	if out, err := run("busybox:local", "sh", "-c", "timeout 10 wget -q -O- http://10.254.0.1/ok || exit 1"); err != nil || out != "reachable" {
		t.Fatalf("a container reaching another address of the network: %q, %v (the test's network does not work)", out, err)
	}
	before := ownerRulePackets(t, inNS, acct.UID)
	if out, err := run("busybox:local", "sh", "-c", "timeout 3 wget -q -O- http://169.254.169.254/latest || exit 1"); err == nil || strings.Contains(out, "role-credentials") {
		t.Errorf("a container read the metadata service: %q, %v", out, err)
	}
	if after := ownerRulePackets(t, inNS, acct.UID); after <= before {
		t.Errorf("the container's connection did not hit the runner uid's REJECT rule (packets %d -> %d)", before, after)
	}
	if out, err := inNS("timeout", "10", "busybox", "wget", "-q", "-O-", "http://169.254.169.254/latest"); err != nil || !strings.Contains(out, "role-credentials") {
		t.Errorf("root (the agent) no longer reaches the metadata service: %q, %v", out, err)
	}

	// Root in the container is the runner uid on the host.
	mine := filepath.Join(acct.Home, "bind")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mine, acct.UID, acct.GID); err != nil {
		t.Fatal(err)
	}
	if out, err := run("-v", mine+":/b", "busybox:local", "sh", "-c", "id -u && touch /b/by-container-root"); err != nil || out != "0" {
		t.Fatalf("container root writing a bind mount: %q, %v", out, err)
	}
	fi, err := os.Stat(filepath.Join(mine, "by-container-root"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != acct.UID {
		t.Errorf("a file written by the container's root is owned by uid %d on the host, want the runner's %d", uid, acct.UID)
	}
	roots := filepath.Join(acct.Home, "roots") // root's, 0755: as /etc or /usr on the host
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := run("-v", roots+":/r", "busybox:local", "touch", "/r/planted"); err == nil {
		t.Errorf("container root wrote into a root-owned host directory: %q", out)
	}
	if _, err := os.Stat(filepath.Join(roots, "planted")); err == nil {
		t.Errorf("a file appeared in the root-owned host directory")
	}
	if got, _ := agent.ProcessesOf(0); len(got) == 0 {
		t.Errorf("no process of root seen: the process scan is broken")
	}
}

// blockScript is the user data's metadata block script with the runner user replaced by uid.
func blockScript(t *testing.T, uid int) string {
	t.Helper()
	ud, err := userdata.Render(userdata.Params{Table: "runnerpool-test", Region: "eu-central-1", Arch: userdata.ArchX64,
		AgentX64: userdata.Artifact{URL: "https://releases.example.com/runnerpool", SHA256: strings.Repeat("ab", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	block := userdata.BlockScriptOf(ud)
	if !strings.Contains(block, "--uid-owner "+userdata.RunnerUser+" ") {
		t.Fatalf("no owner rule for %s in the block script:\n%s", userdata.RunnerUser, block)
	}
	return strings.ReplaceAll(block, "--uid-owner "+userdata.RunnerUser+" ", "--uid-owner "+strconv.Itoa(uid)+" ")
}

// (busybox's wget -T crashes in Debian 12's busybox-static: the timeouts are timeout(1)'s, under a
// shell that does not exec it (`|| exit 1`), since PID 1 of a container ignores the SIGTERM timeout sends. slirp4netns answers the REJECT
// by dropping the connection: the container's wget waits for its timeout.)

// ownerRulePackets is the packet count of the REJECT rule of uid for the metadata address.
func ownerRulePackets(t *testing.T, inNS func(...string) (string, error), uid int) int {
	t.Helper()
	out, err := inNS("iptables-save", "-c")
	if err != nil {
		t.Fatalf("iptables-save: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A OUTPUT -d 169\.254\.169\.254/32 -m owner --uid-owner ` + strconv.Itoa(uid) + ` -j REJECT`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no owner rule for uid %d:\n%s", uid, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
