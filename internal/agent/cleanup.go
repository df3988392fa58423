// Cleanup after a run, before the instance may be pooled again: nothing a job left behind may reach
// the next workflow. The runner user's leftover processes are killed (a job can start daemons that
// outlive it), docker containers, volumes and networks are removed, the workspace is emptied, and the
// runner user's files in the temporary and world-writable directories (TempDirs: /tmp, /var/tmp,
// /dev/shm, /run/lock, /var/crash, and /dev/mqueue where POSIX message queues live), its SysV IPC
// objects (sysvipc_linux.go), its crontab and at jobs (which would run while the instance is idle)
// and (optionally) its home directory are removed. Last, the runner's installation is
// pruned of the runner user's files and checked against its manifest (integrity.go).
package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// spoolDirs hold users' crontabs and at jobs (Debian and Ubuntu; Amazon Linux and RHEL), named for or
// owned by their user.
var spoolDirs = []string{"/var/spool/cron/crontabs", "/var/spool/cron", "/var/spool/cron/atjobs", "/var/spool/at"}

// runnerAccount looks up RunnerUser: ok is false when none is configured.
func (a *agent) runnerAccount() (uid int, home string, ok bool, err error) {
	if a.cfg.RunnerUser == "" {
		return -1, "", false, nil
	}
	if n, err := strconv.Atoi(a.cfg.RunnerUser); err == nil {
		// A bare uid, with no account (tests: a throwaway uid).
		if n <= 0 {
			return -1, "", false, fmt.Errorf("runner uid %d: want a user's, not root's", n)
		}
		return n, "", true, nil
	}
	u, err := user.Lookup(a.cfg.RunnerUser)
	if err != nil {
		return -1, "", false, fmt.Errorf("runner user: %w", err)
	}
	uid, err = strconv.Atoi(u.Uid)
	if err != nil || uid <= 0 {
		return -1, "", false, fmt.Errorf("runner user %s has uid %q", a.cfg.RunnerUser, u.Uid)
	}
	return uid, u.HomeDir, true, nil
}

// runnerUID is runnerAccount's uid.
func (a *agent) runnerUID() (int, bool, error) {
	uid, _, ok, err := a.runnerAccount()
	return uid, ok, err
}

// cleanup runs every step and reports every failure.
func (a *agent) cleanup(ctx context.Context) error {
	var errs []error
	uid, home, ok, err := a.runnerAccount()
	if err != nil {
		return fmt.Errorf("cleaning up: %w", err)
	}
	if ok {
		if err := killUserProcesses(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	if d := a.cfg.RootlessDocker; d != nil {
		if err := cleanRootless(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	if a.cfg.Docker != "" {
		if err := dockerCleanup(ctx, a.cfg.Docker, runCommand); err != nil {
			errs = append(errs, err)
		}
	}
	if err := emptyDir(a.cfg.WorkDir); err != nil {
		errs = append(errs, err)
	}
	if uid > 0 {
		if err := removeSysVIPC("/proc/sysvipc", uid); err != nil {
			errs = append(errs, err)
		}
		for _, d := range a.cfg.TempDirs {
			if err := removeOwnedBy(d, uid); err != nil {
				errs = append(errs, err)
			}
		}
		if a.cfg.CleanHome && home != "" && filepath.IsAbs(home) && filepath.Clean(home) != "/" {
			if err := emptyDir(home); err != nil {
				errs = append(errs, err)
			}
		}
		for _, d := range spoolDirs {
			if err := removeOwnedBy(d, uid); err != nil {
				errs = append(errs, err)
			}
			// A crontab is named for its user, whoever owns the file (cronie's may be root's).
			if _, err := strconv.Atoi(a.cfg.RunnerUser); err != nil {
				if err := os.Remove(filepath.Join(d, a.cfg.RunnerUser)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	// Last, with every step that could leave a process or a file done: the installation the next
	// workflow runs.
	if err := a.checkRunner(ctx, true); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleaning up: %w", errors.Join(errs...))
	}
	return nil
}

// cleanRootless cleans the runner user's Docker daemon after a run. The daemon ran as the runner user
// and the job could do anything with it, so its word is not taken: the daemon was killed with the
// runner user's processes; what ran as the user's subordinate uids (containers' other users) is
// killed too; then a daemon started afresh (root's binaries, a clean session) removes the job's
// containers, volumes and networks and is checked to list none, and is stopped again: a pooled
// instance runs no process of the runner user. Images stay.
func cleanRootless(ctx context.Context, d *RootlessDocker) error {
	d.Stop()
	if err := d.killAll(ctx); err != nil {
		return fmt.Errorf("rootless docker: %w", err)
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	if err := d.Clean(ctx); err != nil {
		return err
	}
	// Pooled with no process of the runner user: the daemon starts again at the next registration.
	d.Stop()
	if err := d.killAll(ctx); err != nil {
		return fmt.Errorf("rootless docker: %w", err)
	}
	return nil
}

// emptyDir removes everything inside dir (and creates dir when missing).
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("emptying %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeOwnedBy removes the entries of dir that belong to uid.
func removeOwnedBy(dir string, uid int) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cleaning %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		owner, ok := fileOwner(p)
		if !ok || owner != uid {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runCommand runs a command and returns its combined output.
func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// dockerCleanup removes every container (running or not) and every volume, and prunes unused networks. A
// job's containers can outlive it (services, `docker run -d`), and its volumes hold its data.
func dockerCleanup(ctx context.Context, docker string, run func(ctx context.Context, name string, args ...string) ([]byte, error)) error {
	out, err := run(ctx, docker, "ps", "--all", "--quiet")
	if err != nil {
		return fmt.Errorf("listing containers: %w: %s", err, bytes.TrimSpace(out))
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		if out, err := run(ctx, docker, append([]string{"rm", "--force", "--volumes"}, ids...)...); err != nil {
			return fmt.Errorf("removing containers: %w: %s", err, bytes.TrimSpace(out))
		}
	}
	// With no container left no volume is in use: remove them all (named ones too, which
	// `volume prune` keeps on Docker 23+).
	out, err = run(ctx, docker, "volume", "ls", "--quiet")
	if err != nil {
		return fmt.Errorf("listing volumes: %w: %s", err, bytes.TrimSpace(out))
	}
	if names := strings.Fields(string(out)); len(names) > 0 {
		if out, err := run(ctx, docker, append([]string{"volume", "rm", "--force"}, names...)...); err != nil {
			return fmt.Errorf("removing volumes: %w: %s", err, bytes.TrimSpace(out))
		}
	}
	if out, err := run(ctx, docker, "network", "prune", "--force"); err != nil {
		return fmt.Errorf("pruning networks: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
