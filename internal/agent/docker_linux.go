//go:build linux

package agent

import "syscall"

// sysProcAttr runs the daemon as the runner user, in a session of its own (Stop kills it), in the
// namespaces Cloneflags asks for.
func (d *RootlessDocker) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Cloneflags: d.Cloneflags,
		Credential: &syscall.Credential{Uid: uint32(d.UID), Gid: uint32(d.GID), Groups: []uint32{uint32(d.GID)}}}
}

// killSession kills the process group pid leads.
func killSession(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
