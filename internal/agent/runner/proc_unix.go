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
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	cmd.Env = append(cmd.Env, "HOME="+u.HomeDir, "USER="+name, "LOGNAME="+name)
	return nil
}

// signalGroup signals the command's process group.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}
