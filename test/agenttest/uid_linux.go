//go:build linux

package agenttest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
)

var uidMu sync.Mutex

// ThrowawayUID is a random high uid (60000+) that no process and no account uses, for a test that runs
// a job's processes under a runner user (agent.Config.RunnerUser as a number). Tests run as root.
func ThrowawayUID(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test starts processes under another uid and needs root (euid %d)", os.Geteuid())
	}
	uid, err := FreeUID()
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

// FreeUID is a random high uid (60000+) that no process and no account uses.
func FreeUID() (int, error) {
	uidMu.Lock()
	defer uidMu.Unlock()
	passwd, _ := os.ReadFile("/etc/passwd")
	for range 100 {
		uid := 60000 + rand.IntN(5000)
		if pids, err := agent.ProcessesOf(uid); err != nil || len(pids) > 0 {
			continue
		}
		if bytes.Contains(passwd, []byte(":"+strconv.Itoa(uid)+":")) {
			continue
		}
		return uid, nil
	}
	return 0, errors.New("no unused uid found")
}

// Account is a throwaway login account for a test: a user with a passwd entry, a home, its own
// primary group, Groups as supplementary groups and a subordinate uid/gid range (rootless Docker's
// user namespace), as the user data's useradd leaves the runner user on a Debian image.
type Account struct {
	Name   string
	UID    int
	GID    int
	Home   string
	Groups []int // supplementary group ids, in the order asked
}

// NewAccount creates such an account with n supplementary groups of its own, and removes them all
// (and the home) when the test ends. Tests run as root; useradd, groupadd and usermod come from
// Debian's passwd package.
func NewAccount(t *testing.T, n int) Account {
	t.Helper()
	a, remove, err := CreateAccount(ThrowawayUID(t), n)
	t.Cleanup(remove)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// CreateAccount creates an account of uid with n supplementary groups of its own; remove (never nil)
// deletes what was made.
func CreateAccount(uid, n int) (_ Account, remove func(), err error) {
	name := "rp" + strconv.Itoa(uid)
	var undo []func()
	remove = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	run := func(args ...string) error {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	var groups []string
	for i := range n {
		g := name + "g" + strconv.Itoa(i)
		if err := run("groupadd", g); err != nil {
			return Account{}, remove, err
		}
		undo = append(undo, func() { _ = exec.Command("groupdel", g).Run() })
		groups = append(groups, g)
	}
	args := []string{"useradd", "--uid", strconv.Itoa(uid), "--user-group", "--create-home", "--shell", "/bin/sh"}
	if len(groups) > 0 {
		args = append(args, "--groups", strings.Join(groups, ","))
	}
	if err := run(append(args, name)...); err != nil {
		return Account{}, remove, err
	}
	undo = append(undo, func() {
		_ = exec.Command("userdel", "--force", "--remove", name).Run()
		_ = exec.Command("groupdel", name).Run()
	})
	// A subordinate id range of its own (/etc/subuid, /etc/subgid), as useradd gives a login user
	// (not one above UID_MAX, as this one is): far above the usual ranges, distinct per uid.
	// userdel takes it back.
	sub := 100_000_000 + (uid-60000)*65536
	ids := strconv.Itoa(sub) + "-" + strconv.Itoa(sub+65535)
	if err := run("usermod", "--add-subuids", ids, "--add-subgids", ids, name); err != nil {
		return Account{}, remove, err
	}
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, remove, err
	}
	a := Account{Name: name, UID: uid, Home: u.HomeDir}
	a.GID, _ = strconv.Atoi(u.Gid)
	for _, g := range groups {
		gr, err := user.LookupGroup(g)
		if err != nil {
			return Account{}, remove, err
		}
		id, _ := strconv.Atoi(gr.Gid)
		a.Groups = append(a.Groups, id)
	}
	return a, remove, nil
}

// KillAccount kills every process of uid and of the uid range [start, start+count) (a rootless
// daemon's containers), until none is left or 10 s passed.
func KillAccount(uid, start, count int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pids, _ := agent.ProcessesOf(uid)
		if count > 0 {
			more, _ := agent.ProcessesOfRange(start, count)
			pids = append(pids, more...)
		}
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
