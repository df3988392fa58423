//go:build linux

package userdata

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBlockJobMetadataRules runs the rendered block script, twice, with the real iptables in a network
// namespace of its own (the machine's rules are untouched), with the runner user replaced by a throwaway
// uid. It shows that each rule exists once after two runs (a restart or a reboot adds nothing), that a
// connection to the metadata address from the runner's uid hits the REJECT rule, IPv4 and IPv6, and that
// one from root does not. Needs root, unshare and setpriv (util-linux) and iptables (Debian: apt-get
// install iptables).
func TestBlockJobMetadataRules(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatalf("this test creates a network namespace and needs root (euid %d)", os.Geteuid())
	}
	for _, bin := range []string{"unshare", "setpriv", "iptables", "ip6tables", "iptables-save", "ip6tables-save", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH (Debian: apt-get install iptables iproute2 util-linux): %v", bin, err)
		}
	}
	block := blockScript(t, render(t, func(p *Params) { p.Arch = ArchX64 }))
	uid := strconv.Itoa(61000 + rand.IntN(4000))
	block = strings.ReplaceAll(block, "--uid-owner "+RunnerUser+" ", "--uid-owner "+uid+" ")

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "block.sh"), []byte(block), 0o755); err != nil {
		t.Fatal(err)
	}
	connect := func(addr string) string {
		return `timeout 5 bash -c 'exec 3<>/dev/tcp/` + addr + `/80' 2>/dev/null || true`
	}
	asUID := "setpriv --reuid=" + uid + " --regid=" + uid + " --clear-groups "
	test := `set -eu
cd ` + dir + `
ip link set lo up
ip addr add 169.254.169.254/32 dev lo
ip -6 addr add fd00:ec2::254/128 dev lo nodad
./block.sh
./block.sh
iptables-save -c > v4.before; ip6tables-save -c > v6.before
` + asUID + connect("169.254.169.254") + `
` + asUID + connect("fd00:ec2::254") + `
iptables-save -c > v4.job; ip6tables-save -c > v6.job
` + connect("169.254.169.254") + `
` + connect("fd00:ec2::254") + `
iptables-save -c > v4.root; ip6tables-save -c > v6.root
`
	cmd := exec.CommandContext(t.Context(), "unshare", "--net", "bash", "-c", test)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("running the block script in a network namespace: %v\n%s", err, out)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, v := range []struct{ name, addr string }{{"v4", "169.254.169.254"}, {"v6", "fd00:ec2::254"}} {
		owner := regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A OUTPUT -d ` + regexp.QuoteMeta(v.addr) + `/\d+ -m owner --uid-owner ` + uid + ` -j REJECT`)
		rules := read(v.name + ".before")
		for _, want := range []*regexp.Regexp{
			owner,
			regexp.MustCompile(`(?m)^\[\d+:\d+\] -A DOCKER-USER -d ` + regexp.QuoteMeta(v.addr) + `/\d+ -j REJECT`),
			regexp.MustCompile(`(?m)^\[\d+:\d+\] -A FORWARD -j DOCKER-USER$`),
		} {
			if n := len(want.FindAllString(rules, -1)); n != 1 {
				t.Errorf("%s: %d rules match %s after two runs, want 1:\n%s", v.name, n, want, rules)
			}
		}
		packets := func(file string) int {
			m := owner.FindStringSubmatch(read(file))
			if m == nil {
				t.Fatalf("%s: no owner rule in %s", v.name, file)
			}
			n, _ := strconv.Atoi(m[1])
			return n
		}
		before, job, root := packets(v.name+".before"), packets(v.name+".job"), packets(v.name+".root")
		if job <= before {
			t.Errorf("%s: the runner uid's connection to %s did not hit the REJECT rule (packets %d -> %d)", v.name, v.addr, before, job)
		}
		if root != job {
			t.Errorf("%s: root's connection to %s hit the runner's REJECT rule (packets %d -> %d)", v.name, v.addr, job, root)
		}
	}
	if bytes.Contains([]byte(block), []byte("--uid-owner "+RunnerUser+" ")) {
		t.Errorf("the runner user was not replaced in the block script")
	}
}
