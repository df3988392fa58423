//go:build linux

package agent

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
)

// A job leaves a SysV shared memory segment, message queue and semaphore set behind (ipcmk, as the
// runner user): they are no file and no process, and used to survive the cleanup into the next
// run. removeSysVIPC removes each of them, and nothing of another uid.
func TestRemoveSysVIPCOfTheRunnerUser(t *testing.T) {
	t.Parallel()
	uid := throwawayUID(t)
	if _, err := exec.LookPath("ipcmk"); err != nil {
		t.Fatalf("ipcmk (util-linux) is needed to create SysV objects as another user: %v", err)
	}
	for _, flag := range [][]string{{"-M", "4096"}, {"-Q"}, {"-S", "1"}} {
		cmd := exec.CommandContext(t.Context(), "ipcmk", flag...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ipcmk %v as uid %d: %v: %s", flag, uid, err, out)
		}
	}
	objs, err := sysvObjectsOf("/proc/sysvipc", uid)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.kind)
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"msg", "sem", "shm"}) {
		t.Fatalf("objects of uid %d = %+v; want one of each kind", uid, objs)
	}
	if err := removeSysVIPC("/proc/sysvipc", uid); err != nil {
		t.Fatalf("removeSysVIPC: %v", err)
	}
	if left, err := sysvObjectsOf("/proc/sysvipc", uid); err != nil || len(left) != 0 {
		t.Errorf("left after the cleanup: %+v, %v", left, err)
	}
}
