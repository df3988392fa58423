// Process attributes of the stack's children on Linux: their own process group, and SIGKILL from the
// kernel when this process dies, so a crashed or killed test binary leaves no emulator behind.
package stack

import "syscall"

// sysProcAttr puts a child in its own process group (Close signals the group) and asks the kernel to
// kill it when its parent dies. Pdeathsig fires when the OS thread that started the child exits; the
// Go runtime does not end threads except under LockOSThread, which this package does not use.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
