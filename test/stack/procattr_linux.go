// Process attributes of the stack's children on Linux: their own process group, and SIGKILL from the
// kernel when this process dies, so a crashed or killed test binary leaves no emulator behind.
package stack

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr puts a child in its own process group (Close signals the group) and asks the kernel to
// kill it when its parent dies. Pdeathsig fires when the OS thread that started the child exits; the
// Go runtime does not end threads except under LockOSThread, which this package does not use.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// ProcStat is /proc/PID/stat after the command name, split: [0] is field 3 (the state: R, S, Z,
// X...), [11] and [12] fields 14 and 15 (utime, stime in clock ticks). The command name (field 2)
// is in parentheses and may hold spaces and parentheses itself, so the fields are counted from the
// last ')'.
func ProcStat(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, fmt.Errorf("reading /proc stat of pid %d: %w", pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("malformed /proc stat of pid %d: %q", pid, b)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// processCPU is the user + system CPU time pid has used (USER_HZ is 100 on every Linux
// architecture Go supports).
func processCPU(pid int) (time.Duration, error) {
	f, err := ProcStat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat of pid %d: %q", pid, f)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading CPU time of pid %d: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}
