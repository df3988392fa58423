// The Docker daemon of a "docker" class (job_access = "docker"): dockerd run rootless, as the runner
// user, by Docker's own dockerd-rootless.sh (rootlesskit with slirp4netns). Its containers run in a
// user namespace that maps container root onto the runner uid and other container users onto the
// runner user's subordinate range, so a container's root is the runner user on the host: it can
// write only what the runner user can. Its network leaves through slirp4netns, a process of the
// runner user, so the instance metadata block by owner (the user data's iptables rule) holds for
// every container too. The agent starts it, exports it to the runner as DOCKER_HOST, and after
// every run kills it with everything of the runner user, starts it again and removes what the job
// left (containers, volumes, networks); images stay, for the next run of the same repository (the
// only one the pool hands the instance to: docs/security.md).
package agent

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// RootlessScripts are where distributions install dockerd-rootless.sh: Debian and Ubuntu's
// docker.io, Docker's docker-ce-rootless-extras.
var RootlessScripts = []string{"/usr/share/docker.io/contrib/dockerd-rootless.sh", "/usr/bin/dockerd-rootless.sh"}

// RootlessDocker runs and cleans the runner user's Docker daemon.
type RootlessDocker struct {
	// UID, GID and Home are the runner user's (an account with a subordinate id range), SubStart
	// and SubCount its subordinate uid range (/etc/subuid): the host uids of the container users
	// other than root, whose processes the cleanup kills too.
	UID, GID           int
	Home               string
	SubStart, SubCount int
	// RuntimeDir is the daemon's XDG_RUNTIME_DIR (its socket is RuntimeDir/docker.sock) and DataRoot
	// its --data-root: both the runner user's (0700), created when missing, outside the home and the
	// temporary directories the cleanup empties.
	RuntimeDir, DataRoot string
	// Script is dockerd-rootless.sh; Docker the docker CLI.
	Script, Docker string
	// StartTimeout bounds the wait for the daemon to answer; 60 s.
	StartTimeout time.Duration
	// Output receives the daemon's log; discarded when nil.
	Output io.Writer
	// Cloneflags are namespaces the daemon starts in (tests: CLONE_NEWNET, a network of its own).
	Cloneflags uintptr

	starting sync.Mutex // one Start at a time
	mu       sync.Mutex
	cmd      *exec.Cmd
}

// Host is the daemon's address, the runner's DOCKER_HOST.
func (d *RootlessDocker) Host() string { return "unix://" + filepath.Join(d.RuntimeDir, "docker.sock") }

// Pid is the daemon's process (rootlesskit's parent), or 0.
func (d *RootlessDocker) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Docker runs the docker CLI against the daemon (as root: the socket is the runner user's, root
// may connect to it) and returns its combined output.
func (d *RootlessDocker) Run(ctx context.Context, args ...string) ([]byte, error) {
	return runCommand(ctx, d.Docker, append([]string{"--host", d.Host()}, args...)...)
}

// Healthy reports whether the daemon answers.
func (d *RootlessDocker) Healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := d.Run(ctx, "version", "--format", "{{.Server.Version}}")
	return err == nil
}

// Start starts the daemon (a running one is left alone when it answers) and waits until it answers.
func (d *RootlessDocker) Start(ctx context.Context) error {
	d.starting.Lock()
	defer d.starting.Unlock()
	if d.Healthy(ctx) {
		return nil
	}
	// Whatever is left of an earlier daemon (containerd runs in a process group of its own, and a
	// second dockerd refuses to start beside it) goes first.
	d.Stop()
	if err := d.killAll(ctx); err != nil {
		return fmt.Errorf("rootless docker: %w", err)
	}
	for _, dir := range []string{d.RuntimeDir, d.DataRoot} {
		if err := userDir(dir, d.UID, d.GID); err != nil {
			return fmt.Errorf("rootless docker: %w", err)
		}
	}
	// The runtime state of a killed daemon (sockets, pid files: a containerd pid file naming a dead,
	// or reused, pid makes the next dockerd wait for a containerd that never answers) goes too.
	if err := emptyDir(d.RuntimeDir); err != nil {
		return fmt.Errorf("rootless docker: %w", err)
	}
	var log bytes.Buffer
	out := io.Writer(&log)
	if d.Output != nil {
		out = io.MultiWriter(&log, d.Output)
	}
	fmt.Fprintf(out, "runnerpool: starting the runner user's docker daemon (%s)\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(d.Script, "--data-root", d.DataRoot)
	cmd.Dir = d.Home
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"HOME=" + d.Home, "XDG_RUNTIME_DIR=" + d.RuntimeDir, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = d.sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("rootless docker: starting %s: %w", d.Script, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	d.mu.Lock()
	d.cmd = cmd
	d.mu.Unlock()

	timeout := cmp.Or(d.StartTimeout, 60*time.Second)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !d.Healthy(ctx) {
		select {
		case err := <-exited:
			return fmt.Errorf("rootless docker: the daemon exited: %v: %s", err, lastBytes(log.String(), 2048))
		case <-deadline.C:
			d.Stop()
			return fmt.Errorf("rootless docker: no answer within %v: %s", timeout, lastBytes(log.String(), 2048))
		case <-ctx.Done():
			d.Stop()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Stop kills the daemon's session (rootlesskit, dockerd, containerd and their children that stayed
// in it). The cleanup kills every process of the runner user anyway.
func (d *RootlessDocker) Stop() {
	d.mu.Lock()
	cmd := d.cmd
	d.cmd = nil
	d.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		killSession(cmd.Process.Pid)
	}
}

// killAll kills every process of the runner user and of its subordinate uids.
func (d *RootlessDocker) killAll(ctx context.Context) error {
	if err := killUserProcesses(ctx, d.UID); err != nil {
		return err
	}
	if d.SubCount > 0 {
		return killUIDRange(ctx, d.SubStart, d.SubCount)
	}
	return nil
}

// Clean removes what a job left with the daemon: every container, volume and network of its own
// (dockerCleanup), and checks that none is left.
func (d *RootlessDocker) Clean(ctx context.Context) error {
	run := func(ctx context.Context, _ string, args ...string) ([]byte, error) { return d.Run(ctx, args...) }
	if err := dockerCleanup(ctx, d.Docker, run); err != nil {
		return fmt.Errorf("rootless docker: %w", err)
	}
	for _, list := range [][]string{{"ps", "--all", "--quiet"}, {"volume", "ls", "--quiet"}} {
		out, err := d.Run(ctx, list...)
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			return fmt.Errorf("rootless docker: after the cleanup `docker %v` lists %q (%v)", list, bytes.TrimSpace(out), err)
		}
	}
	return nil
}

// userDir makes dir (and its parents, root's) with dir itself the user's, 0700.
func userDir(dir string, uid, gid int) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
		return fmt.Errorf("directory %q must be an absolute path below /", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := os.Lchown(dir, uid, gid); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// FindRootlessScript is the first of RootlessScripts (or dockerd-rootless.sh on PATH) that exists.
func FindRootlessScript() (string, error) {
	if p, err := exec.LookPath("dockerd-rootless.sh"); err == nil {
		return p, nil
	}
	for _, p := range RootlessScripts {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", errors.New("dockerd-rootless.sh not found (Debian: apt-get install docker.io rootlesskit slirp4netns uidmap)")
}
