//go:build !linux

package agent

import "syscall"

// sysProcAttr and killSession: rootless Docker runs on Linux instances only; elsewhere the daemon's
// start fails (its script does not exist).
func (d *RootlessDocker) sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func killSession(int) {}
