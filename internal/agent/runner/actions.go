// The Actions driver: the real GitHub Actions runner (github.com/actions/runner) installed by the user
// data in Dir. It runs config.sh and run.sh as the unprivileged runner user, the way GitHub documents a
// self-hosted runner install, with --disableupdate because the version is pinned by the image/user data
// (a runner that updates itself would change under a warm pool) and --replace because a reused instance
// registers under the same name for every run.
//
// No credential is ever on a command line (/proc/PID/cmdline is readable by every user on the machine,
// containers included): the registration and removal tokens and the JIT configuration reach the runner
// through its documented input variables (ACTIONS_RUNNER_INPUT_TOKEN, ACTIONS_RUNNER_INPUT_JITCONFIG),
// which Runner.Listener reads and then clears from its own environment, so its jobs do not inherit them.
// A process's environment is readable only by its own user and root.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// ActionsOptions configures the Actions driver.
type ActionsOptions struct {
	// Dir is where the runner is unpacked (config.sh, run.sh; config.sh writes .runner and
	// .credentials there). Required.
	Dir string
	// User runs config.sh and run.sh (config.sh refuses to run as root). Empty runs them as the
	// agent's own user, which is only right in tests.
	User string
	// WorkDir is config.sh's --work, relative to Dir; "_work" when empty.
	WorkDir string
	// StopTimeout is how long run.sh gets to finish after SIGINT before the process group is killed;
	// 30 s when zero. The runner cancels a job it is running when interrupted.
	StopTimeout time.Duration
	// Output receives config.sh's and run.sh's output; discarded when nil.
	Output io.Writer
	// Env is added to the environment of config.sh and run.sh, and so of every job (DOCKER_HOST of
	// a "docker" class's daemon). No credential belongs here.
	Env []string
}

// Actions drives the real actions runner.
type Actions struct {
	o ActionsOptions
	// start runs a prepared command (replaced in tests).
	start func(cmd *exec.Cmd) error
	mu    sync.Mutex
}

var _ Runner = (*Actions)(nil)

// NewActions returns the Actions driver; it checks the options but touches nothing.
func NewActions(o ActionsOptions) (*Actions, error) {
	if o.Dir == "" || !filepath.IsAbs(o.Dir) {
		return nil, fmt.Errorf("actions runner: directory %q must be an absolute path", o.Dir)
	}
	if o.WorkDir == "" {
		o.WorkDir = "_work"
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 30 * time.Second
	}
	if o.Output == nil {
		o.Output = io.Discard
	}
	if o.User == "root" {
		return nil, errors.New("actions runner: refusing to run the runner as root")
	}
	return &Actions{o: o, start: (*exec.Cmd).Start}, nil
}

// The runner's input variables (actions/runner CommandSettings: ACTIONS_RUNNER_INPUT_ + the argument's
// name): every argument of config.sh and run.sh may be given this way instead of on the command line.
const (
	envToken     = "ACTIONS_RUNNER_INPUT_TOKEN"
	envJITConfig = "ACTIONS_RUNNER_INPUT_JITCONFIG"
)

// jitFile keeps a JIT runner configuration between Register and Run (root-only: the runner user's
// jobs must not read it). A JIT configuration registers exactly one runner and is spent once used.
const jitFile = ".runnerpool-jitconfig"

// RegisterCommand is config.sh's command for a registration-token credential (nil for a JIT credential,
// which needs no configuration step). The token is in its environment, not on its command line.
func (a *Actions) RegisterCommand(ctx context.Context, cred store.Credential, name string) (*exec.Cmd, error) {
	if cred.JIT {
		return nil, nil
	}
	if err := checkArg("url", cred.URL); err != nil {
		return nil, err
	}
	if err := checkArg("name", name); err != nil {
		return nil, err
	}
	for _, l := range cred.Labels {
		if err := checkArg("label", l); err != nil {
			return nil, err
		}
		if strings.Contains(l, ",") {
			return nil, fmt.Errorf("actions runner: label %q contains a comma", l)
		}
	}
	if len(cred.Labels) == 0 {
		return nil, errors.New("actions runner: the credential names no labels")
	}
	if err := checkArg("registration token", cred.Token); err != nil {
		return nil, err
	}
	args := []string{"--unattended", "--url", cred.URL, "--name", name,
		"--labels", strings.Join(cred.Labels, ","), "--work", a.o.WorkDir, "--replace", "--disableupdate"}
	cmd, err := a.command(ctx, "./config.sh", args...)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, envToken+"="+cred.Token)
	return cmd, nil
}

// RunCommand is run.sh's command (with the JIT configuration in its environment for a JIT registration).
func (a *Actions) RunCommand(ctx context.Context) (*exec.Cmd, error) {
	cmd, _, err := a.runCommand(ctx)
	return cmd, err
}

// runCommand is RunCommand; jit reports that the command runs a JIT configuration.
func (a *Actions) runCommand(ctx context.Context) (cmd *exec.Cmd, jit bool, err error) {
	config, err := os.ReadFile(filepath.Join(a.o.Dir, jitFile))
	switch {
	case err == nil:
		cmd, err := a.command(ctx, "./run.sh")
		if err != nil {
			return nil, false, err
		}
		cmd.Env = append(cmd.Env, envJITConfig+"="+strings.TrimSpace(string(config)))
		return cmd, true, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, false, fmt.Errorf("actions runner: reading JIT configuration: %w", err)
	}
	if !a.configured() {
		return nil, false, ErrNotRegistered
	}
	cmd, err = a.command(ctx, "./run.sh")
	return cmd, false, err
}

// RemoveCommand is `config.sh remove`'s command, the removal token in its environment.
func (a *Actions) RemoveCommand(ctx context.Context, cred store.Credential) (*exec.Cmd, error) {
	if err := checkArg("removal token", cred.Token); err != nil {
		return nil, err
	}
	cmd, err := a.command(ctx, "./config.sh", "remove")
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, envToken+"="+cred.Token)
	return cmd, nil
}

// configured reports whether config.sh has registered a runner here (it writes .runner).
func (a *Actions) configured() bool {
	_, err := os.Stat(filepath.Join(a.o.Dir, ".runner"))
	return err == nil
}

// Register runs config.sh, or keeps a JIT configuration for run.sh.
func (a *Actions) Register(ctx context.Context, cred store.Credential, name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cred.Token == "" {
		return errors.New("actions runner: empty registration credential")
	}
	if cred.JIT {
		if err := checkArg("JIT configuration", cred.Token); err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(a.o.Dir, jitFile), []byte(cred.Token), 0o600); err != nil {
			return fmt.Errorf("actions runner: keeping JIT configuration: %w", err)
		}
		return nil
	}
	cmd, err := a.RegisterCommand(ctx, cred, name)
	if err != nil {
		return err
	}
	if err := a.runToEnd(cmd); err != nil {
		return fmt.Errorf("actions runner: config.sh: %w", versionExit(err))
	}
	return nil
}

// The runner exits with RunnerVersionDeprecated (7) when GitHub refuses it for its version (the
// broker's RunnerVersionTooOld), if envVersionExitCode is set; otherwise with the same code as any
// terminating error. actions/runner src/Runner.Listener/Program.cs and src/Runner.Common/Constants.cs.
const (
	envVersionExitCode    = "ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE"
	exitVersionDeprecated = 7
)

// versionExit marks the runner's RunnerVersionDeprecated exit as ErrVersionRefused.
func versionExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == exitVersionDeprecated {
		return fmt.Errorf("%w: %w", ErrVersionRefused, err)
	}
	return err
}

// Run runs run.sh until it exits or ctx is done; then it interrupts the runner's process group and
// kills it after StopTimeout.
//
// A run.sh that exited by itself with a JIT configuration has spent it (ErrSpent), and Run forgets
// the configuration: an ephemeral runner exits after its one job, and a runner whose registration
// GitHub removed exits when it cannot open a session (runner.go). Its exit status cannot tell the
// two apart, nor either from a crash: run-helper.sh turns the listener's Success (0),
// TerminatedError (1), SessionConflict (5) and any unknown code into exit 0, and run.sh restarts
// the listener itself on RetryableError (2) and after an update (3, 4) (actions/runner
// src/Misc/layoutroot/run-helper.sh.template, run.sh; codes in src/Runner.Common/Constants.cs
// ReturnCode). A runner stopped through ctx keeps its configuration: interrupted before a job, the
// runner still exists at GitHub and the next Run resumes it.
func (a *Actions) Run(ctx context.Context) error {
	cmd, jit, err := a.runCommand(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	if err := a.start(cmd); err != nil {
		return fmt.Errorf("actions runner: starting run.sh: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if jit {
			err = a.forgetJIT(err)
		}
		if err == nil {
			return errors.New("actions runner: run.sh exited")
		}
		return fmt.Errorf("actions runner: run.sh exited: %w", versionExit(err))
	case <-ctx.Done():
	}
	// The runner finishes or cancels its job on SIGINT and deletes its session with GitHub.
	signalGroup(cmd, sigInterrupt)
	select {
	case <-done: //nolint:errcheck // stopped on request: its exit status says nothing
	case <-time.After(a.o.StopTimeout):
		signalGroup(cmd, sigKill)
		<-done //nolint:errcheck // killed: its exit status says nothing
	}
	return nil
}

// forgetJIT removes the JIT configuration run.sh ran with and exited: it is spent. It returns the
// exit, marked ErrSpent.
func (a *Actions) forgetJIT(exit error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := os.Remove(filepath.Join(a.o.Dir, jitFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Still spent: the agent does not run it again whatever the file says.
		return errors.Join(ErrSpent, exit, fmt.Errorf("actions runner: forgetting JIT configuration: %w", err))
	}
	if exit == nil {
		return ErrSpent
	}
	return fmt.Errorf("%w: %w", ErrSpent, exit)
}

// Remove runs `config.sh remove` when a runner is configured here, and forgets a JIT configuration
// (a JIT runner is removed by GitHub after its job, or by the control plane through the API).
func (a *Actions) Remove(ctx context.Context, cred store.Credential) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := os.Remove(filepath.Join(a.o.Dir, jitFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("actions runner: forgetting JIT configuration: %w", err)
	}
	if !a.configured() {
		return nil
	}
	if cred.Token == "" {
		return errors.New("actions runner: empty remove token")
	}
	cmd, err := a.RemoveCommand(ctx, cred)
	if err != nil {
		return err
	}
	if err := a.runToEnd(cmd); err != nil {
		return fmt.Errorf("actions runner: config.sh remove: %w", err)
	}
	return nil
}

func (a *Actions) runToEnd(cmd *exec.Cmd) error {
	if err := a.start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// command prepares a command in Dir, as User, in its own process group.
func (a *Actions) command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = a.o.Dir
	cmd.Stdout, cmd.Stderr = a.o.Output, a.o.Output
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", envVersionExitCode + "=1"}, a.o.Env...)
	if err := asUser(cmd, a.o.User); err != nil {
		return nil, fmt.Errorf("actions runner: %w", err)
	}
	return cmd, nil
}

// checkArg refuses values that cannot be a single, well-formed argument.
func checkArg(what, v string) error {
	if v == "" {
		return fmt.Errorf("actions runner: empty %s", what)
	}
	if strings.ContainsAny(v, "\x00\r\n") {
		return fmt.Errorf("actions runner: %s contains a control character", what)
	}
	return nil
}

// writeFileAtomic writes a file through a temporary file and a rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
