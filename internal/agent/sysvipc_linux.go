//go:build linux

// SysV IPC objects (shared memory segments, message queues, semaphore sets) outlive the processes
// that made them and are no file in any directory: a job's segment is readable by the next job if
// its mode allows, and a queue or semaphore set can carry data or hold a lock across runs. The
// kernel lists them in /proc/sysvipc with their owner's and creator's uids; the cleanup removes every
// object either of which is the runner user (IPC_RMID: a segment still attached goes once its last
// process detaches, and no process of the user is left by then).
package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysvKinds are the files of /proc/sysvipc, the column of the object id, and the control call
// that removes one.
var sysvKinds = []struct {
	file string
	ctl  uintptr
}{{"shm", unix.SYS_SHMCTL}, {"msg", unix.SYS_MSGCTL}, {"sem", unix.SYS_SEMCTL}}

// sysvObject is one SysV IPC object.
type sysvObject struct {
	kind string // shm, msg or sem
	id   int
}

// sysvObjectsOf lists the objects in procDir (/proc/sysvipc) whose owner or creator is uid. The
// columns are found by their header (uid, cuid and the id: shmid, msqid, semid), not by position.
func sysvObjectsOf(procDir string, uid int) ([]sysvObject, error) {
	var out []sysvObject
	for _, k := range sysvKinds {
		f, err := os.Open(filepath.Join(procDir, k.file))
		if errors.Is(err, os.ErrNotExist) {
			continue // no SysV IPC of that kind in this kernel
		}
		if err != nil {
			return nil, fmt.Errorf("listing SysV IPC: %w", err)
		}
		objs, err := parseSysV(k.file, f, uid)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func parseSysV(kind string, f *os.File, uid int) ([]sysvObject, error) {
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return nil, sc.Err()
	}
	col := map[string]int{}
	for i, h := range strings.Fields(sc.Text()) {
		col[h] = i
	}
	idCol, okID := col[map[string]string{"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind]]
	uidCol, okUID := col["uid"]
	cuidCol, okCUID := col["cuid"]
	if !okID || !okUID || !okCUID {
		return nil, fmt.Errorf("/proc/sysvipc/%s: unexpected header %q", kind, sc.Text())
	}
	want := strconv.Itoa(uid)
	var out []sysvObject
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) <= max(idCol, uidCol, cuidCol) || (fs[uidCol] != want && fs[cuidCol] != want) {
			continue
		}
		id, err := strconv.Atoi(fs[idCol])
		if err != nil {
			return nil, fmt.Errorf("/proc/sysvipc/%s: id %q: %w", kind, fs[idCol], err)
		}
		out = append(out, sysvObject{kind: kind, id: id})
	}
	return out, sc.Err()
}

// removeSysVIPC removes every SysV IPC object of uid (procDir: /proc/sysvipc). An object already
// gone (EINVAL, EIDRM) is not an error.
func removeSysVIPC(procDir string, uid int) error {
	objs, err := sysvObjectsOf(procDir, uid)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range objs {
		if err := removeSysV(o); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeSysV(o sysvObject) error {
	for _, k := range sysvKinds {
		if k.file != o.kind {
			continue
		}
		// shmctl(id, IPC_RMID, NULL), msgctl(id, IPC_RMID, NULL), semctl(id, 0, IPC_RMID).
		a1, a2 := uintptr(unix.IPC_RMID), uintptr(0)
		if o.kind == "sem" {
			a1, a2 = 0, unix.IPC_RMID
		}
		_, _, errno := unix.Syscall(k.ctl, uintptr(o.id), a1, a2)
		if errno != 0 && errno != unix.EINVAL && errno != unix.EIDRM {
			return fmt.Errorf("removing SysV %s %d: %w", o.kind, o.id, errno)
		}
	}
	return nil
}
