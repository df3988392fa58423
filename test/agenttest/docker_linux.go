//go:build linux

package agenttest

import (
	"archive/tar"
	"debug/elf"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
)

// DockerTools are what the rootless Docker tests use: Debian's docker.io (dockerd, the docker CLI,
// dockerd-rootless.sh), rootlesskit, slirp4netns, uidmap (newuidmap) and busybox-static (the image's
// only binary). `make test-deps` installs them (test/stack/install-deps.sh --test).
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
	d, err := FindDockerTools()
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("rootless Docker: %v (make test-deps installs docker.io rootlesskit slirp4netns uidmap busybox-static)", err)
		}
		t.Fatalf("rootless Docker: %v (CI is set: make test-deps installs docker.io rootlesskit slirp4netns uidmap busybox-static)", err)
	}
	d.Image = filepath.Join(t.TempDir(), "busybox.tar")
	if err := WriteBusyboxImage(d.Image); err != nil {
		t.Fatal(err)
	}
	return d
}

// FindDockerTools finds the tools (DockerTools.Image is left empty), or says which is missing.
func FindDockerTools() (DockerTools, error) {
	script, err := agent.FindRootlessScript()
	if err != nil {
		return DockerTools{}, err
	}
	d := DockerTools{Script: script}
	for _, bin := range []string{"dockerd", "rootlesskit", "slirp4netns", "newuidmap", "newgidmap", "busybox"} {
		if _, err := exec.LookPath(bin); err != nil {
			return DockerTools{}, fmt.Errorf("%s not found: %w", bin, err)
		}
	}
	// Docker's own CLI: a newer one on PATH first (it talks to the older daemon all the same).
	if d.Docker, err = exec.LookPath("docker"); err != nil {
		return DockerTools{}, fmt.Errorf("the docker CLI: %w", err)
	}
	// slirp4netns opens /dev/net/tun as the runner user: Debian's udev makes it 0666.
	if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
		return DockerTools{}, fmt.Errorf("/dev/net/tun is not usable by every user (%v): chmod 0666 /dev/net/tun, as udev leaves it", err)
	}
	return d, nil
}

// WriteBusyboxImage writes a root file system of the static busybox (and its applets' links) as a
// tar at path.
func WriteBusyboxImage(path string) error { return WriteImage(path, 0) }

// WriteImage is WriteBusyboxImage with a file of pad random (incompressible) bytes, /data/pad: an
// image of a real one's size (the bench: postgres is some 150 MB).
func WriteImage(path string, pad int) error {
	bin, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("busybox: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return fmt.Errorf("%s is dynamically linked: the image needs busybox-static", bin)
		}
	}
	f.Close()
	body, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	entries := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755}, {Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777},
		{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}, {Typeflag: tar.TypeDir, Name: "data/", Mode: 0o755},
	}
	for _, applet := range strings.Fields("sh ls id cat echo sleep touch wget nc stat mkdir rm httpd true test timeout") {
		entries = append(entries, &tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777})
	}
	files := []struct{ name, body string }{
		{"bin/busybox", string(body)},
		{"data/pad", string(randomBytes(pad))},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"},
		{"etc/group", "root:x:0:\nnobody:x:65534:\n"},
	}
	for _, e := range entries {
		if err := tw.WriteHeader(e); err != nil {
			return err
		}
	}
	for _, f := range files {
		if f.name == "data/pad" && f.body == "" {
			continue
		}
		mode := int64(0o644)
		if f.name == "bin/busybox" {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: mode, Size: int64(len(f.body))}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

// RootlessDocker is a daemon of acct's under a fresh directory (traversable by the account: the
// test's temporary directories are root's alone), stopped with everything of the account when the
// test ends.
func RootlessDocker(t *testing.T, acct Account, tools DockerTools) *agent.RootlessDocker {
	t.Helper()
	d, remove, err := NewRootlessDocker(acct, tools)
	t.Cleanup(remove)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// NewRootlessDocker is RootlessDocker without a test: remove (never nil) stops the daemon, kills
// everything of the account and removes the directory (kept when RUNNERPOOL_KEEP_DOCKER is set,
// with the daemon's log in it).
func NewRootlessDocker(acct Account, tools DockerTools) (_ *agent.RootlessDocker, remove func(), err error) {
	remove = func() {}
	base, err := os.MkdirTemp("", "runnerpool-docker-")
	if err != nil {
		return nil, remove, err
	}
	remove = func() { _ = os.RemoveAll(base) }
	if err := os.Chmod(base, 0o755); err != nil {
		return nil, remove, err
	}
	start, count, err := agent.SubordinateRange("/etc/subuid", acct.Name, acct.UID)
	if err != nil {
		return nil, remove, err
	}
	logf, err := os.Create(filepath.Join(base, "daemon.log"))
	if err != nil {
		return nil, remove, err
	}
	d := &agent.RootlessDocker{Output: logf, UID: acct.UID, GID: acct.GID, Home: acct.Home, SubStart: start, SubCount: count,
		RuntimeDir: filepath.Join(base, "run"), DataRoot: filepath.Join(base, "data"), Script: tools.Script, Docker: tools.Docker}
	return d, func() {
		d.Stop()
		KillAccount(acct.UID, start, count)
		_ = logf.Close()
		if os.Getenv("RUNNERPOOL_KEEP_DOCKER") == "" {
			_ = os.RemoveAll(base)
		}
	}, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{'r', 'p'}).Read(b) // never fails
	return b
}
