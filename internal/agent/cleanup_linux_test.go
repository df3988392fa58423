//go:build linux

package agent

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var uidMu sync.Mutex

// throwawayUID is a random high uid that no process and no account uses (tests run as root and start
// processes under it, never under a uid real processes use).
func throwawayUID(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test starts processes under another uid and needs root (euid %d)", os.Geteuid())
	}
	uidMu.Lock()
	defer uidMu.Unlock()
	passwd, _ := os.ReadFile("/etc/passwd")
	for range 100 {
		uid := 60000 + rand.IntN(5000)
		if pids, err := ProcessesOf(uid); err != nil || len(pids) > 0 {
			continue
		}
		if bytes.Contains(passwd, []byte(":"+strconv.Itoa(uid)+":")) {
			continue
		}
		return uid
	}
	t.Fatal("no unused uid found")
	return 0
}

// TestKillUserProcessesSetsidDaemon: a job leaves a daemon behind the way a job can, double-forked into
// a session of its own (so no process group of the runner's holds it), plus a loop that keeps forking;
// after the clean-up's kill, none of the uid's processes is left.
func TestKillUserProcessesSetsidDaemon(t *testing.T) {
	t.Parallel()
	uid := throwawayUID(t)
	// A directory the uid can reach (t.TempDir's parent is root's alone).
	dir, err := os.MkdirTemp("", "runnerpool-daemon-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pids")
	// The "job": starts a setsid'd shell that forks a sleeping daemon and a forking loop, records their
	// pids, and exits, leaving them orphaned in their own session.
	script := `setsid sh -c '
sleep 600 </dev/null >/dev/null 2>&1 &
echo $! >> ` + pidFile + `
( while :; do sleep 600 & sleep 0.01; done ) </dev/null >/dev/null 2>&1 &
echo $! >> ` + pidFile + `
echo $$ >> ` + pidFile + `
wait' </dev/null >/dev/null 2>&1 &
exit 0`
	cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starting the daemon: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = killUserProcesses(context.Background(), uid) })

	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) < 3 {
		t.Fatalf("the daemon recorded pids %v, want 3", pids)
	}
	for _, pid := range pids {
		if sid, err := sessionOf(pid); err != nil || sid == os.Getpid() || sid == syscall.Getpgrp() {
			t.Fatalf("process %d: session %d, %v; want a session of its own", pid, sid, err)
		}
	}
	if live, _ := ProcessesOf(uid); len(live) < 3 {
		t.Fatalf("uid %d has %d processes before the kill (%v), want at least 3", uid, len(live), live)
	}

	if err := killUserProcesses(t.Context(), uid); err != nil {
		t.Fatalf("killUserProcesses: %v", err)
	}
	if live, err := ProcessesOf(uid); err != nil || len(live) != 0 {
		t.Errorf("after the kill uid %d still has processes %v (%v)", uid, live, err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("daemon process %d is still running", pid)
		}
	}
}

func TestKillUserProcessesRefusesRoot(t *testing.T) {
	t.Parallel()
	if err := killUserProcesses(t.Context(), 0); err == nil {
		t.Errorf("killUserProcesses(0) succeeded")
	}
}

// sessionOf is a process's session id (/proc/PID/stat field 6).
func sessionOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return strconv.Atoi(f[3])
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
