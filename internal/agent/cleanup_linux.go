//go:build linux

// Linux process and file ownership for the cleanup: processes are found in /proc by their real uid.
package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killUserProcesses SIGKILLs every process of uid until none is left (a process can fork while the
// first pass runs, so it repeats), for at most 10 s.
func killUserProcesses(ctx context.Context, uid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := processesOf(uid)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of uid %d still running after SIGKILL: %v", uid, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// processesOf lists the pids whose real uid is uid.
func processesOf(uid int) ([]int, error) {
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
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				if fields := strings.Fields(rest); len(fields) > 0 && fields[0] == strconv.Itoa(uid) {
					pids = append(pids, pid)
				}
				break
			}
		}
		f.Close()
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
