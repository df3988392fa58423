//go:build linux

package agenttest

import (
	"archive/tar"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
)

// DockerTools are what the rootless Docker tests use: Debian's docker.io (dockerd, the docker CLI,
// dockerd-rootless.sh), rootlesskit, slirp4netns, uidmap (newuidmap) and busybox-static (the image's
// only binary). `make test-deps` installs them (internal/stack/install-deps.sh --test).
type DockerTools struct {
	Script, Docker string
	// Image is a busybox root file system as a tar, for `docker import` (no registry is reachable).
	Image string
}

// Docker returns the tools, or skips the test when docker.io is not installed and CI is not set;
// under CI (CI=true) a missing tool fails the test.
func Docker(t *testing.T) DockerTools {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the rootless Docker tests start the daemon as a throwaway account and need root (euid %d)", os.Geteuid())
	}
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "" {
			t.Skipf("rootless Docker: "+format+" (make test-deps installs docker.io rootlesskit slirp4netns uidmap busybox-static)", args...)
		}
		t.Fatalf("rootless Docker: "+format+" (CI is set: make test-deps installs docker.io rootlesskit slirp4netns uidmap busybox-static)", args...)
	}
	script, err := agent.FindRootlessScript()
	if err != nil {
		missing("%v", err)
	}
	var d DockerTools
	d.Script = script
	for _, bin := range []string{"dockerd", "rootlesskit", "slirp4netns", "newuidmap", "newgidmap", "busybox"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing("%s not found: %v", bin, err)
		}
	}
	// Docker's own CLI: a newer one on PATH first (it talks to the older daemon all the same).
	if d.Docker, err = exec.LookPath("docker"); err != nil {
		missing("the docker CLI: %v", err)
	}
	// slirp4netns opens /dev/net/tun as the runner user: Debian's udev makes it 0666.
	if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
		missing("/dev/net/tun is not usable by every user (%v): chmod 0666 /dev/net/tun, as udev leaves it", err)
	}
	d.Image = busyboxImage(t)
	return d
}

// busyboxImage writes a root file system of the static busybox (and its applets' links) as a tar.
func busyboxImage(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	if f, err := elf.Open(bin); err != nil {
		t.Fatalf("busybox: %v", err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Fatalf("%s is dynamically linked: the image needs busybox-static", bin)
			}
		}
		f.Close()
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "busybox.tar")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	for _, dir := range []string{"bin/", "tmp/", "etc/", "data/"} {
		mode := int64(0o755)
		if dir == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: mode}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields("sh ls id cat echo sleep touch wget nc stat mkdir rm httpd true test timeout") {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n", "etc/group": "root:x:0:\nnobody:x:65534:\n"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// RootlessDocker is a daemon of acct's under a fresh directory (traversable by the account: the
// test's temporary directories are root's alone), stopped with everything of the account when the
// test ends.
func RootlessDocker(t *testing.T, acct Account, tools DockerTools) *agent.RootlessDocker {
	t.Helper()
	base, err := os.MkdirTemp("", "runnerpool-docker-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	start, count, err := agent.SubordinateRange("/etc/subuid", acct.Name, acct.UID)
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(base, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logf.Close() })
	d := &agent.RootlessDocker{Output: logf, UID: acct.UID, GID: acct.GID, Home: acct.Home, SubStart: start, SubCount: count,
		RuntimeDir: filepath.Join(base, "run"), DataRoot: filepath.Join(base, "data"), Script: tools.Script, Docker: tools.Docker}
	t.Cleanup(func() {
		d.Stop()
		KillAccount(acct.UID, start, count)
		if os.Getenv("RUNNERPOOL_KEEP_DOCKER") == "" {
			_ = os.RemoveAll(base)
		}
	})
	return d
}
