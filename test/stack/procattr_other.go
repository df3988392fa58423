//go:build unix && !linux

// Process attributes of the stack's children on Unix systems other than Linux: their own process
// group only (there is no parent-death signal), so a killed parent can leave them behind.
package stack

import (
	"errors"
	"syscall"
	"time"
)

// sysProcAttr puts a child in its own process group, which Close signals.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// errNoProc: /proc is read on Linux only.
var errNoProc = errors.New("/proc is read on Linux only")

// ProcStat is not read on this system.
func ProcStat(int) ([]string, error) { return nil, errNoProc }

// processCPU is not read on this system.
func processCPU(int) (time.Duration, error) { return 0, errNoProc }
