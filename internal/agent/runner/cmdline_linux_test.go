//go:build linux

package runner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// TestActionsNoCredentialOnCommandLine runs stand-in config.sh and run.sh scripts that start a child and
// stay alive, and reads /proc while they run: no process of the runner's process group has the
// registration token, the JIT configuration or the removal token in its /proc/PID/cmdline (readable by
// every user), and the scripts did receive each one, in their environment.
func TestActionsNoCredentialOnCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Each script records what it received, starts a child that outlives a moment (a shell waiting
	// for the test's go-ahead) and waits for it.
	const stayAlive = `sh -c 'while [ ! -e go ]; do sleep 0.02; done' &
echo started >> started.log
wait
rm -f go
`
	write("config.sh", `printf '%s\n' "${ACTIONS_RUNNER_INPUT_TOKEN:-none}" >> received.log
`+stayAlive+`if [ "$1" = remove ]; then rm -f .runner; else echo '{}' > .runner; fi
`)
	// run.sh waits in the foreground, not in wait: a shell runs its INT trap only once the
	// foreground command ends, and wait on a child that ignores SIGINT would never end.
	write("run.sh", `printf '%s\n' "${ACTIONS_RUNNER_INPUT_JITCONFIG:-none}" >> received.log
trap 'exit 0' INT
sh -c 'while [ ! -e go ]; do sleep 0.02; done' &
echo started >> started.log
while [ ! -e go ]; do sleep 0.02; done
rm -f go
`)

	// StopTimeout 1 s: where this test's process inherited SIGINT ignored (a job a shell put in the
	// background), no shell below it can trap SIGINT, and Run kills the group after StopTimeout.
	a, err := NewActions(ActionsOptions{Dir: dir, StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan int, 1)
	a.start = func(cmd *exec.Cmd) error {
		err := cmd.Start()
		if err == nil {
			started <- cmd.Process.Pid
		}
		return err
	}

	// inspect waits until the script reports it started the n-th time, then checks every process of
	// its process group (the script and its child) and lets it finish.
	n := 0
	inspect := func(secret string, finish func()) {
		t.Helper()
		n++
		pgid := <-started
		waitLines(t, filepath.Join(dir, "started.log"), n)
		pids := processGroup(t, pgid)
		if len(pids) < 2 {
			t.Errorf("process group %d has %d processes (%v), want the script and its child", pgid, len(pids), pids)
		}
		for _, pid := range pids {
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err != nil {
				continue // exited meanwhile
			}
			if bytes.Contains(cmdline, []byte(secret)) {
				t.Errorf("process %d has the credential on its command line: %q", pid, cmdline)
			}
		}
		finish()
	}
	goAhead := func() {
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Registration with a token.
	const regToken = "REGTOKEN-3f9a1c"
	cred := store.Credential{URL: "https://github.com/acme/api", Token: regToken, Labels: []string{"42"}}
	errc := make(chan error, 1)
	go func() { errc <- a.Register(t.Context(), cred, "runnerpool-i-1") }()
	inspect(regToken, goAhead)
	if err := <-errc; err != nil {
		t.Fatalf("Register: %v", err)
	}

	// Removal.
	const rmToken = "RMTOKEN-77d2e0"
	go func() { errc <- a.Remove(t.Context(), store.Credential{Token: rmToken}) }()
	inspect(rmToken, goAhead)
	if err := <-errc; err != nil {
		t.Fatalf("Remove: %v", err)
	}

	// A JIT configuration: run.sh gets it.
	const jit = "eyJKSVQiOiJjb25maWcifQ-5be1"
	if err := a.Register(t.Context(), store.Credential{Token: jit, JIT: true}, "runnerpool-i-1"); err != nil {
		t.Fatalf("Register JIT: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go func() { errc <- a.Run(ctx) }()
	// Run stops run.sh (SIGINT, then SIGKILL to its group); the go-ahead comes only after Run
	// returned: given before, it could end run.sh first, and a JIT run.sh that exits by itself has
	// spent its configuration (Run answers ErrSpent). The test gave it right after the cancel before,
	// and the two raced.
	inspect(jit, cancel)
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	goAhead()

	b, err := os.ReadFile(filepath.Join(dir, "received.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), regToken+"\n"+rmToken+"\n"+jit+"\n"; got != want {
		t.Errorf("the scripts received %q through their environment, want %q", got, want)
	}
}

// waitLines waits until path has at least n lines.
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never had %d lines", path, n)
}

// processGroup lists the live processes of process group pgid, from /proc/PID/stat.
func processGroup(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may contain spaces and parentheses.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		f := strings.Fields(rest)
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}
