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

// processCPU is the user + system CPU time pid has used, from /proc/PID/stat (fields 14 and 15,
// in clock ticks; USER_HZ is 100 on every Linux architecture Go supports).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("reading CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading CPU time of pid %d: malformed /proc stat %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("reading CPU time of pid %d: short /proc stat %q", pid, b)
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
