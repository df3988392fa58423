// What a job may do on this instance: the runner class's job_access, which the user data passes to
// the agent (-job-access). The agent decides the grant (GrantFor) and applies it as root at first
// boot, before the pre-runner script and before any registration (Host); an instance whose grant
// cannot be applied never registers a runner (it signals UD_PRE_RUNNER_FAILED and is discarded).
//
//   - user: nothing; jobs run as the unprivileged runner user (today's default).
//   - docker: a Docker daemon of the runner user's own (rootless, docker.go): no sudo, no docker
//     group, nothing the runner user could not already do; the daemon's containers run in a user
//     namespace mapped onto the runner uid and its subordinate range.
//   - root: a sudoers drop-in (NOPASSWD: ALL) and the docker group (rootful Docker), as GitHub's
//     hosted runners give. Such a job owns the machine and can forge anything the agent reports, so
//     the control plane never hands the instance to another repository (release.reuseRefused,
//     declared.CheckPosture).
package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// SudoersPath is the sudoers drop-in of a root class's runner user.
const SudoersPath = "/etc/sudoers.d/runnerpool-runner"

// Grant is what the class's job access hands the runner user.
type Grant struct {
	JobAccess string
	// Sudoers is the content of SudoersPath ("": none is written).
	Sudoers string
	// Groups are the groups the runner user joins.
	Groups []string
	// RootlessDocker: the agent runs a Docker daemon as the runner user (docker.go), which needs
	// a subordinate uid and gid range for its user namespace.
	RootlessDocker bool
}

// GrantFor decides the grant of jobAccess ("" is declared.JobAccessUser) for the runner user.
func GrantFor(jobAccess, user string) (Grant, error) {
	if err := declared.ValidateJobAccess(jobAccess); err != nil {
		return Grant{}, err
	}
	g := Grant{JobAccess: jobAccess}
	if g.JobAccess == "" {
		g.JobAccess = declared.JobAccessUser
	}
	if g.JobAccess != declared.JobAccessUser && !validUserName(user) {
		return Grant{}, fmt.Errorf("job access %q needs a runner account, not %q", g.JobAccess, user)
	}
	switch g.JobAccess {
	case declared.JobAccessRoot:
		who := user
		if _, err := strconv.Atoi(user); err == nil {
			who = "#" + user // sudoers' form of a bare uid
		}
		g.Sudoers = "# runnerpool: runner class job_access = \"root\": the job owns this machine.\n" + who + " ALL=(ALL) NOPASSWD: ALL\n"
		g.Groups = []string{"docker"}
	case declared.JobAccessDocker:
		g.RootlessDocker = true
	}
	return g, nil
}

// validUserName is a user name (or a bare uid: tests) a sudoers line and usermod take as one word.
func validUserName(s string) bool {
	if s == "" || s == "root" || s == "0" || len(s) > 32 {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	})
}

// Host applies a grant to the machine. OSHost does it on an instance; the sandbox records it.
type Host interface {
	Apply(ctx context.Context, user string, g Grant) error
}

// OSHost applies grants to this machine. Root is "/" when empty (tests point it elsewhere).
type OSHost struct {
	Root string
	// Run runs a command (usermod, visudo); exec when nil.
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

// Apply writes the sudoers drop-in (checked with visudo when it is installed), adds the user to its
// groups and checks the subordinate id ranges rootless Docker needs.
func (h OSHost) Apply(ctx context.Context, user string, g Grant) error {
	run := h.Run
	if run == nil {
		run = runCommand
	}
	var errs []error
	if g.Sudoers != "" {
		if err := h.writeSudoers(ctx, run, g.Sudoers); err != nil {
			errs = append(errs, err)
		}
	}
	for _, grp := range g.Groups {
		if out, err := run(ctx, "usermod", "--append", "--groups", grp, user); err != nil {
			errs = append(errs, fmt.Errorf("adding %s to group %s: %w: %s", user, grp, err, bytes.TrimSpace(out)))
		}
	}
	if g.RootlessDocker {
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if _, _, err := SubordinateRange(filepath.Join(h.root(), f), user, -1); err != nil {
				errs = append(errs, fmt.Errorf("rootless docker: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

func (h OSHost) root() string {
	if h.Root == "" {
		return "/"
	}
	return h.Root
}

func (h OSHost) writeSudoers(ctx context.Context, run func(context.Context, string, ...string) ([]byte, error), content string) error {
	path := filepath.Join(h.root(), SudoersPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("sudoers drop-in: %w", err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o440); err != nil {
		return fmt.Errorf("sudoers drop-in: %w", err)
	}
	// A drop-in sudo cannot parse breaks sudo for everyone: check it before it is in place.
	if _, err := exec.LookPath("visudo"); err == nil {
		if out, err := run(ctx, "visudo", "-c", "-q", "-f", tmp); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("sudoers drop-in refused by visudo: %w: %s", err, bytes.TrimSpace(out))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("sudoers drop-in: %w", err)
	}
	return nil
}

// SubordinateRange reads the first range of /etc/subuid-format file for user (or for uid, when not
// negative): its start and count.
func SubordinateRange(file, user string, uid int) (start, count int, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, fmt.Errorf("reading %s: %w", file, err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) != 3 || !(f[0] == user || uid >= 0 && f[0] == strconv.Itoa(uid)) {
			continue
		}
		start, err1 := strconv.Atoi(f[1])
		count, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || start <= 0 || count <= 0 {
			return 0, 0, fmt.Errorf("%s: bad range %q", file, strings.TrimSpace(line))
		}
		return start, count, nil
	}
	return 0, 0, fmt.Errorf("%s has no subordinate range for %s (useradd gives login users one; usermod --add-subuids)", file, user)
}

// String lists a grant's effects for the log.
func (g Grant) String() string {
	var parts []string
	if g.Sudoers != "" {
		parts = append(parts, "sudo ("+SudoersPath+")")
	}
	for _, grp := range slices.Sorted(slices.Values(g.Groups)) {
		parts = append(parts, "group "+grp)
	}
	if g.RootlessDocker {
		parts = append(parts, "rootless docker")
	}
	if len(parts) == 0 {
		return g.JobAccess + ": nothing"
	}
	return g.JobAccess + ": " + strings.Join(parts, ", ")
}
