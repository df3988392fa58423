//go:build unix && !linux

// Process attributes of the stack's children on Unix systems other than Linux: their own process
// group only (there is no parent-death signal), so a killed parent can leave them behind.
package stack

import "syscall"

// sysProcAttr puts a child in its own process group, which Close signals.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
