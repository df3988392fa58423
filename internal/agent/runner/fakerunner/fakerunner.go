// Package fakerunner is the runner driver for tests and the demo: it behaves like the actions runner
// against the GitHub fake (test/stack/githubfake), speaking its runner protocol. Register is config.sh
// (registration token or JIT configuration), Run is run.sh (open a session, long-poll for jobs whose
// labels match, "run" each one, complete it), Remove is `config.sh remove --token`. Like the real runner
// it keeps its registration in a file in its directory, so a restarted agent can run or remove it.
//
// A job "runs" by writing a file under the work directory (so tests can see that the agent's cleanup
// removed what a job left behind) and sleeping for the configured job duration.
package fakerunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// Options configures a fake runner.
type Options struct {
	// BaseURL is where the GitHub fake is mounted. Required.
	BaseURL string
	// Dir keeps the registration (.runner.json). Required.
	Dir string
	// WorkDir is the job workspace (the real runner's _work). Required.
	WorkDir string
	// JobDuration is how long each job takes.
	JobDuration time.Duration
	// PollWait is the long-poll wait for the next job; 30 s when zero.
	PollWait time.Duration
	// Arch is the runner's architecture label (X64 when empty).
	Arch string
	// Version is the runner's version, which the fake checks as GitHub does (the fake's current
	// release when empty).
	Version string
	// HTTPClient talks to the fake; http.DefaultClient when nil.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Runner is a fake actions runner.
type Runner struct {
	o   Options
	log *slog.Logger

	mu   sync.Mutex
	jobs []int64 // jobs run, in order
}

var _ runner.Runner = (*Runner)(nil)

// New returns a fake runner.
func New(o Options) (*Runner, error) {
	if o.BaseURL == "" || o.Dir == "" || o.WorkDir == "" {
		return nil, errors.New("fake runner: base URL, directory and work directory are required")
	}
	if o.PollWait <= 0 {
		o.PollWait = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Runner{o: o, log: o.Logger}, nil
}

func (r *Runner) regFile() string { return filepath.Join(r.o.Dir, ".runner.json") }

func (r *Runner) client() *githubfake.RunnerClient {
	return githubfake.NewRunnerClient(r.o.BaseURL, r.o.HTTPClient)
}

// loadRegistration reads the saved registration; ok is false when there is none.
func (r *Runner) loadRegistration() (reg githubfake.Registration, ok bool, err error) {
	b, err := os.ReadFile(r.regFile())
	if errors.Is(err, os.ErrNotExist) {
		return reg, false, nil
	}
	if err != nil {
		return reg, false, fmt.Errorf("fake runner: reading registration: %w", err)
	}
	if err := json.Unmarshal(b, &reg); err != nil {
		return reg, false, fmt.Errorf("fake runner: registration file %s: %w", r.regFile(), err)
	}
	return reg, reg.Credential != "", nil
}

// Register registers with the fake and saves the registration.
func (r *Runner) Register(ctx context.Context, cred store.Credential, name string) error {
	o := githubfake.RegisterOptions{URL: cred.URL, Token: cred.Token, Name: name, Labels: cred.Labels,
		Replace: true, Arch: r.o.Arch, WorkFolder: r.o.WorkDir, Version: r.o.Version}
	if cred.JIT {
		o = githubfake.RegisterOptions{JITConfig: cred.Token, Arch: r.o.Arch, Version: r.o.Version}
	}
	reg, err := r.client().Register(ctx, o)
	if err != nil {
		return fmt.Errorf("fake runner: %w", versionRefused(err))
	}
	b, err := json.Marshal(reg)
	if err != nil {
		return fmt.Errorf("fake runner: encoding registration: %w", err)
	}
	if err := os.MkdirAll(r.o.Dir, 0o700); err != nil {
		return fmt.Errorf("fake runner: %w", err)
	}
	tmp := r.regFile() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("fake runner: saving registration: %w", err)
	}
	if err := os.Rename(tmp, r.regFile()); err != nil {
		return fmt.Errorf("fake runner: saving registration: %w", err)
	}
	return nil
}

// Run connects and runs jobs until ctx is done (then it disconnects and returns nil) or the fake says
// the registration is gone. An ephemeral (JIT) runner returns runner.ErrSpent after its one job, or
// when its registration is gone, as the real one exits then (runner.ErrSpent).
func (r *Runner) Run(ctx context.Context) error {
	reg, ok, err := r.loadRegistration()
	if err != nil {
		return err
	}
	if !ok {
		return runner.ErrNotRegistered
	}
	c := r.client()
	c.SetRegistration(reg)
	if err := c.Connect(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("fake runner: %w", spent(reg, versionRefused(err)))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := c.Disconnect(dctx); err != nil {
			r.log.Warn("fake runner: disconnecting", "err", err)
		}
	}()
	for {
		job, err := c.NextJob(ctx, r.o.PollWait)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			// The runner exits 7 when the broker refuses it as too old (actions/runner#4285).
			return fmt.Errorf("fake runner: %w", spent(reg, versionRefused(err)))
		}
		if job == nil {
			continue
		}
		if err := r.runJob(ctx, c, job); err != nil {
			return err
		}
		if reg.Ephemeral && ctx.Err() == nil {
			// The real ephemeral runner stops listening once its one job completed, deletes its
			// local configuration and exits with ReturnCode.Success (actions/runner
			// src/Runner.Listener/Runner.cs RunAsync: runOnceJobCompleted, DeleteLocalRunnerConfig).
			if err := os.Remove(r.regFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
				r.log.Warn("fake runner: forgetting the spent registration", "err", err)
			}
			return fmt.Errorf("fake runner: job %d done: %w", job.ID, runner.ErrSpent)
		}
	}
}

// spent marks the error of an ephemeral runner whose registration is gone as runner.ErrSpent: the
// real runner exits when it cannot open a session with a removed registration (actions/runner
// src/Runner.Listener/MessageListener.cs CreateSessionAsync: "invalid_client" is
// CreateSessionResult.Failure, which Runner.cs returns as ReturnCode.TerminatedError).
func spent(reg githubfake.Registration, err error) error {
	if reg.Ephemeral && errors.Is(err, githubfake.ErrRunnerRemoved) {
		return fmt.Errorf("%w: %w", runner.ErrSpent, err)
	}
	return err
}

// runJob leaves a file in the workspace, takes JobDuration, and completes the job (cancelled when the
// runner is stopped meanwhile, as the real runner cancels its job on SIGINT).
func (r *Runner) runJob(ctx context.Context, c *githubfake.RunnerClient, job *githubfake.AssignedJob) error {
	r.log.Info("fake runner: running job", "job", job.ID, "run", job.RunID, "labels", job.Labels)
	conclusion := "success"
	dir := filepath.Join(r.o.WorkDir, job.Repo, job.Repo)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		conclusion = "failure"
	} else if err := os.WriteFile(filepath.Join(dir, "job-"+strconv.FormatInt(job.ID, 10)+".out"),
		[]byte("job "+strconv.FormatInt(job.ID, 10)+" of run "+strconv.FormatInt(job.RunID, 10)+"\n"), 0o644); err != nil {
		conclusion = "failure"
	}
	t := time.NewTimer(r.o.JobDuration)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		conclusion = "cancelled"
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.Complete(cctx, job.ID, conclusion); err != nil {
		return fmt.Errorf("fake runner: %w", err)
	}
	r.mu.Lock()
	r.jobs = append(r.jobs, job.ID)
	r.mu.Unlock()
	return nil
}

// Remove deregisters with a remove token and deletes the saved registration.
func (r *Runner) Remove(ctx context.Context, cred store.Credential) error {
	reg, ok, err := r.loadRegistration()
	if err != nil || !ok {
		return err
	}
	c := r.client()
	c.SetRegistration(reg)
	if err := c.Deregister(ctx, cred.Token); err != nil {
		return fmt.Errorf("fake runner: %w", err)
	}
	if err := os.Remove(r.regFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("fake runner: forgetting registration: %w", err)
	}
	return nil
}

// Jobs returns the ids of the jobs this runner ran.
func (r *Runner) Jobs() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.jobs...)
}

// versionRefused marks the fake's RunnerVersionTooOld answer as runner.ErrVersionRefused.
func versionRefused(err error) error {
	var ae *githubfake.APIError
	if errors.As(err, &ae) && ae.Kind == githubfake.ErrorKindRunnerVersionTooOld {
		return fmt.Errorf("%w: %w", runner.ErrVersionRefused, err)
	}
	return err
}
