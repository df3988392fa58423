package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

func TestActionsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := NewActions(ActionsOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cred := store.Credential{Kind: store.CredentialRegistration, RunID: "12345", URL: "https://github.com/acme/api",
		Token: "AABBCC", Labels: []string{"12345", "linux-x64"}}

	reg, err := a.RegisterCommand(t.Context(), cred, "runnerpool-i-0abc")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"./config.sh", "--unattended", "--url", "https://github.com/acme/api",
		"--name", "runnerpool-i-0abc", "--labels", "12345,linux-x64", "--work", "_work", "--replace", "--disableupdate"}
	if diff := cmp.Diff(want, reg.Args); diff != "" {
		t.Errorf("config.sh args (-want +got):\n%s", diff)
	}
	if got := envOf(reg, envToken); got != "AABBCC" {
		t.Errorf("config.sh %s = %q, want the registration token", envToken, got)
	}
	if reg.Dir != dir {
		t.Errorf("config.sh dir = %q, want %q", reg.Dir, dir)
	}
	if reg.SysProcAttr == nil || !reg.SysProcAttr.Setpgid {
		t.Errorf("config.sh not in its own process group")
	}

	rm, err := a.RemoveCommand(t.Context(), store.Credential{Token: "RMTOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"./config.sh", "remove"}, rm.Args); diff != "" {
		t.Errorf("config.sh remove args (-want +got):\n%s", diff)
	}
	if got := envOf(rm, envToken); got != "RMTOKEN" {
		t.Errorf("config.sh remove %s = %q, want the removal token", envToken, got)
	}

	if _, err := a.RunCommand(t.Context()); err != ErrNotRegistered {
		t.Errorf("run.sh before registration: err = %v, want ErrNotRegistered", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".runner"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := a.RunCommand(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"./run.sh"}, run.Args); diff != "" {
		t.Errorf("run.sh args (-want +got):\n%s", diff)
	}
	if got := envOf(run, envJITConfig); got != "" {
		t.Errorf("run.sh of a configured runner has %s = %q", envJITConfig, got)
	}

	// A JIT credential needs no config.sh: run.sh gets the configuration.
	jit := store.Credential{Kind: store.CredentialRegistration, RunID: "1", Token: "eyJqaXQiOnRydWV9", JIT: true}
	if cmd, err := a.RegisterCommand(t.Context(), jit, "n"); err != nil || cmd != nil {
		t.Errorf("JIT RegisterCommand = %v, %v; want nil, nil", cmd, err)
	}
	if err := a.Register(t.Context(), jit, "n"); err != nil {
		t.Fatal(err)
	}
	run, err = a.RunCommand(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"./run.sh"}, run.Args); diff != "" {
		t.Errorf("JIT run.sh args (-want +got):\n%s", diff)
	}
	if got := envOf(run, envJITConfig); got != "eyJqaXQiOnRydWV9" {
		t.Errorf("JIT run.sh %s = %q, want the JIT configuration", envJITConfig, got)
	}
	if fi, err := os.Stat(filepath.Join(dir, jitFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("JIT configuration file: %v, %v; want mode 0600", fi, err)
	}
}

func TestActionsRejects(t *testing.T) {
	t.Parallel()
	if _, err := NewActions(ActionsOptions{Dir: "relative"}); err == nil {
		t.Errorf("relative directory accepted")
	}
	if _, err := NewActions(ActionsOptions{Dir: "/opt/actions-runner", User: "root"}); err == nil {
		t.Errorf("root runner user accepted")
	}
	a, err := NewActions(ActionsOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	base := store.Credential{URL: "https://github.com/acme", Token: "T", Labels: []string{"run"}}
	tests := []struct {
		name string
		mod  func(*store.Credential, *string)
		want string
	}{
		{"comma in label", func(c *store.Credential, _ *string) { c.Labels = []string{"a,b"} }, "comma"},
		{"newline in url", func(c *store.Credential, _ *string) { c.URL = "https://x\n--foo" }, "control"},
		{"no labels", func(c *store.Credential, _ *string) { c.Labels = nil }, "labels"},
		{"empty name", func(_ *store.Credential, n *string) { *n = "" }, "name"},
		{"empty token", func(c *store.Credential, _ *string) { c.Token = "" }, "token"},
		{"newline in token", func(c *store.Credential, _ *string) { c.Token = "T\nX=1" }, "control"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, name := base, "runnerpool-i-1"
			c.Labels = append([]string(nil), base.Labels...)
			tt.mod(&c, &name)
			_, err := a.RegisterCommand(t.Context(), c, name)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// TestActionsLifecycleWithScripts runs a stand-in run.sh and checks that Run interrupts it when ctx ends, and that
// Register and Remove run config.sh as built.
func TestActionsLifecycleWithScripts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("config.sh", `echo "config.sh $* token=$ACTIONS_RUNNER_INPUT_TOKEN" >> `+log+`
if [ "$1" = remove ]; then rm -f .runner; else echo '{}' > .runner; fi
`)
	write("run.sh", `echo "run.sh $*" >> `+log+`
trap 'echo interrupted >> `+log+`; exit 0' INT
while :; do sleep 0.05; done
`)
	a, err := NewActions(ActionsOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cred := store.Credential{URL: "https://github.com/acme/api", Token: "REG", Labels: []string{"42"}}
	if err := a.Register(t.Context(), cred, "runnerpool-i-1"); err != nil {
		t.Fatalf("Register: %v", err)
	}
	runUntilStopped(t, a, log)
	if err := a.Remove(t.Context(), store.Credential{Token: "RM"}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := a.Remove(t.Context(), store.Credential{Token: "RM"}); err != nil {
		t.Errorf("second Remove (nothing configured): %v", err)
	}
	b, _ := os.ReadFile(log)
	want := "config.sh --unattended --url https://github.com/acme/api --name runnerpool-i-1 --labels 42 --work _work --replace --disableupdate token=REG\n" +
		"run.sh \ninterrupted\nconfig.sh remove token=RM\n"
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestActionsJITSpentOnExit runs a stand-in run.sh that, like the real ephemeral runner after its
// one job, exits 0 by itself: Run reports ErrSpent and forgets the JIT configuration, so the next
// Run has nothing to run. A run.sh stopped by the agent keeps it (the runner exists at GitHub until
// it ran its job).
func TestActionsJITSpentOnExit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	// Exits by itself unless told to wait for an interrupt.
	script := `if [ -f hold ]; then trap 'echo interrupted >> ` + log + `; exit 0' INT; fi
echo "run.sh jit=$ACTIONS_RUNNER_INPUT_JITCONFIG" >> ` + log + `
if [ -f hold ]; then while :; do sleep 0.05; done; fi
exit 0
`
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := NewActions(ActionsOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	jit := store.Credential{Kind: store.CredentialRegistration, RunID: "1", Token: "eyJqaXQiOnRydWV9", JIT: true}
	if err := a.Register(t.Context(), jit, "n"); err != nil {
		t.Fatal(err)
	}

	// Stopped by the agent before the runner exited: the configuration is kept.
	if err := os.WriteFile(filepath.Join(dir, "hold"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	runUntilStopped(t, a, log)
	if _, err := os.Stat(filepath.Join(dir, jitFile)); err != nil {
		t.Errorf("JIT configuration gone after the agent stopped the runner: %v", err)
	}

	// Exited by itself: spent and forgotten.
	if err := os.Remove(filepath.Join(dir, "hold")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a run.sh that hangs fails, not hangs, the test
	defer cancel()
	if err := a.Run(ctx); !errors.Is(err, ErrSpent) {
		t.Errorf("Run of a runner that exited by itself: %v, want ErrSpent", err)
	}
	if _, err := os.Stat(filepath.Join(dir, jitFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("JIT configuration kept after run.sh exited: %v", err)
	}
	if err := a.Run(ctx); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Run after the configuration was spent: %v, want ErrNotRegistered", err)
	}
	b, _ := os.ReadFile(log)
	want := "run.sh jit=eyJqaXQiOnRydWV9\ninterrupted\nrun.sh jit=eyJqaXQiOnRydWV9\n"
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
