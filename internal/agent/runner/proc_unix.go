//go:build unix

// Process handling of the Actions driver on Unix: run.sh and config.sh run as the runner user in a
// process group of their own, so the agent can stop the runner and everything it started.
package runner

import (
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

const (
	sigInterrupt = syscall.SIGINT
	sigKill      = syscall.SIGKILL
)

// asUser makes cmd run as the named user (with that user's HOME) in its own process group.
func asUser(cmd *exec.Cmd, name string) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if name == "" {
		return nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("looking up runner user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return fmt.Errorf("runner user %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return fmt.Errorf("runner user %s: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return fmt.Errorf("runner user %s has uid 0", name)
	}
	groups, err := supplementaryGroups(u)
	if err != nil {
		return fmt.Errorf("runner user %s: %w", name, err)
	}
	// Groups as initgroups(3) sets them at a login: without it the runner's processes would have
	// no supplementary group at all (not even the ones the image gave the runner user).
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}
	cmd.Env = append(cmd.Env, "HOME="+u.HomeDir, "USER="+name, "LOGNAME="+name)
	return nil
}

// supplementaryGroups are the groups the user is a member of (its primary group included), as
// initgroups(3) would set them.
func supplementaryGroups(u *user.User) ([]uint32, error) {
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("looking up groups: %w", err)
	}
	groups := make([]uint32, 0, len(ids))
	for _, id := range ids {
		g, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("group id %q: %w", id, err)
		}
		groups = append(groups, uint32(g))
	}
	return groups, nil
}

// signalGroup signals the command's process group.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}
