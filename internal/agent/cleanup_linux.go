//go:build linux

// Linux process and file ownership for the cleanup: processes are found in /proc by their uids.
package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killUserProcesses kills every process of uid until none is left, for at most 10 s. A job can leave
// daemons in sessions and process groups of their own (setsid, double fork), so processes are found by
// uid, never by process group. Each pass first has a helper running as uid call kill(-1, SIGKILL), which
// the kernel applies to every process the uid may signal in one sweep that no fork can escape; then it
// scans /proc and stops (SIGSTOP: a stopped process cannot fork) and kills what is left, for processes
// the helper could not reach (one that changed its effective uid).
func killUserProcesses(ctx context.Context, uid int) error {
	if uid <= 0 {
		return fmt.Errorf("refusing to kill the processes of uid %d", uid)
	}
	return killUntilGone(ctx, fmt.Sprintf("uid %d", uid),
		func() ([]int, error) { return ProcessesOf(uid) }, func() { killAllAs(ctx, uid) })
}

// killUntilGone stops and kills the processes list finds until it finds none, for at most 10 s; each
// pass first runs sweep (nil: none). what names the processes in the error.
func killUntilGone(ctx context.Context, what string, list func() ([]int, error), sweep func()) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if sweep != nil {
			sweep()
		}
		pids, err := list()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of %s still running after SIGKILL: %v", what, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// killAllAs runs `kill -KILL -1` as uid (the shell's built-in: kill(2) with pid -1 signals every
// process the caller may signal, except itself and init). Its failure is not an error: the /proc scan
// that follows sees what is left.
func killAllAs(ctx context.Context, uid int) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "kill -KILL -1 2>/dev/null; exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}, Setsid: true}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	_ = cmd.Run()
}

// ProcessesOf lists the live pids (zombies run no code and are left to their parent) of which uid is
// the real, effective, saved or filesystem uid.
func ProcessesOf(uid int) ([]int, error) {
	return processesWith(func(u int) bool { return u == uid })
}

// ProcessesOfRange lists the live pids with a uid in [start, start+count).
func ProcessesOfRange(start, count int) ([]int, error) {
	return processesWith(func(u int) bool { return u >= start && u < start+count })
}

// killUIDRange kills every process with a uid in [start, start+count) until none is left, for at
// most 10 s: a rootless container's users other than root (the runner user's subordinate range).
func killUIDRange(ctx context.Context, start, count int) error {
	if start <= 0 || count <= 0 {
		return fmt.Errorf("refusing to kill the processes of uids %d+%d", start, count)
	}
	return killUntilGone(ctx, fmt.Sprintf("uids %d-%d", start, start+count-1),
		func() ([]int, error) { return ProcessesOfRange(start, count) }, nil)
}

// processesWith lists the live pids one of whose uids (real, effective, saved, filesystem) match.
func processesWith(match func(uid int) bool) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		f, err := os.Open(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		var zombie, hit bool
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "State:"); ok {
				st := strings.TrimSpace(rest)
				zombie = strings.HasPrefix(st, "Z") || strings.HasPrefix(st, "X")
			}
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				for _, f := range strings.Fields(rest) {
					u, err := strconv.Atoi(f)
					hit = hit || err == nil && match(u)
				}
				break // State comes before Uid
			}
		}
		f.Close()
		if hit && !zombie {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// fileOwner returns the uid owning path (not following symlinks).
func fileOwner(path string) (int, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
