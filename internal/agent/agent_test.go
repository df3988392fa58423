// Integration tests of the agent: whole instance lifecycles against the real store, the EC2 double and
// the GitHub fake.
package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/smithy-go/middleware"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
)

// TestLifecycle follows one instance through boot, a run, a release, a second claim and its own
// termination, for both notice modes.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	for _, mode := range []agent.NoticeMode{agent.NoticeIMDSTags, agent.NoticePoll} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			marker := filepath.Join(t.TempDir(), "pre-runner-ran")
			e := newEnv(t, envOptions{notice: mode, preRunner: "#!/bin/sh\necho warming up\ntouch " + marker + "\n"})
			id := e.launch()
			e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
			e.create(id, "run-1")

			// Boot: pre-runner, then registration for the run of the created record.
			e.waitSignal(id, store.SignalRegistered, "run-1")
			if _, err := os.Stat(marker); err != nil {
				t.Errorf("pre-runner script did not run: %v", err)
			}
			if _, err := e.store.Heartbeat(t.Context(), id); err != nil {
				t.Errorf("no heartbeat: %v", err)
			}
			r1 := e.waitRunner(id, "run-1")
			e.toRunning(id, "run-1")

			// A job of the run lands on the instance's runner.
			job := e.waitJob(e.gh.QueueJob(owner, repo, 1, []string{"run-1"}))
			if job.RunnerID != r1.ID || job.Conclusion != "success" {
				t.Errorf("job = %+v, want success on runner %d", job, r1.ID)
			}
			if files := e.workFiles(id); len(files) == 0 {
				t.Errorf("job left no file in the workspace")
			}

			// Release: deregistered, clean, confirmed with the old run id.
			e.release(id, "run-1")
			e.waitSignal(id, store.SignalReleased, "run-1")
			if r, ok := e.runnerOf(id); ok {
				t.Errorf("runner still registered after release: %+v", r)
			}
			if files := e.workFiles(id); len(files) != 0 {
				t.Errorf("workspace not clean after release: %v", files)
			}

			// Claimed again from the pool: registers with the new run's label.
			e.putCredential(id, "run-2", store.CredentialRegistration, e.runnerToken("registration"))
			in, err := e.store.Claim(t.Context(), id, "run-2", time.Now().Add(10*time.Minute))
			if err != nil {
				t.Fatalf("claim: %v", err)
			}
			e.notify(in)
			e.waitSignal(id, store.SignalRegistered, "run-2")
			r2 := e.waitRunner(id, "run-2")
			if containsFold(r2.Labels, "run-1") {
				t.Errorf("runner of run-2 still has run-1's label: %v", r2.Labels)
			}

			// Past its threshold (plus grace) the instance terminates itself.
			if _, err := e.store.Expire(t.Context(), id, "run-2", "test"); err != nil {
				t.Fatalf("expire: %v", err)
			}
			e.waitEC2State(id, "shutting-down", "terminated")
		})
	}
}

// TestRestartResumes stops the agent in the middle of a run and starts it again: the runner comes back
// with its registration (no new credential), serves the run, and a release that happened while the agent
// was down is carried out at the next start.
func TestRestartResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{notice: agent.NoticeIMDSTags, manual: true})
	id := e.launch()
	endpoint := e.imdsEndpoint(id)
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")

	dirs := agenttest.InstanceDirs(e.root, id)
	cfg := e.agentConfig(envOptions{notice: agent.NoticeIMDSTags})
	cfg.StateDir, cfg.WorkDir = dirs.State, dirs.Work
	cfg.IMDS = imds.New(imds.Options{Endpoint: endpoint})
	cfg.NewRunner = func(string) (runner.Runner, error) {
		return fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: dirs.Runner, WorkDir: dirs.Work,
			JobDuration: 50 * time.Millisecond, PollWait: 5 * time.Second, Logger: cfg.Logger})
	}
	start := func() (stop func()) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- agent.Run(ctx, cfg) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent.Run: %v", err)
			}
		}
	}

	stop := start()
	e.waitSignal(id, store.SignalRegistered, "run-1")
	before := e.waitRunner(id, "run-1")
	e.toRunning(id, "run-1")
	e.waitJob(e.gh.QueueJob(owner, repo, 1, []string{"run-1"}))

	stop() // the agent goes away mid-run
	if r, _ := e.runnerOf(id); r.Status != "offline" {
		t.Errorf("runner after agent stop: %+v, want offline", r)
	}
	stop = start() // no registration credential exists any more: it must resume, not re-register
	after := e.waitRunner(id, "run-1")
	if after.ID != before.ID {
		t.Errorf("runner re-registered on restart: id %d -> %d", before.ID, after.ID)
	}
	if j := e.waitJob(e.gh.QueueJob(owner, repo, 1, []string{"run-1"})); j.RunnerID != before.ID {
		t.Errorf("job after restart ran on %d, want %d", j.RunnerID, before.ID)
	}
	stop()

	// Released while the agent is down: the next start deregisters, cleans and confirms.
	e.release(id, "run-1")
	stop = start()
	defer stop()
	e.waitSignal(id, store.SignalReleased, "run-1")
	if r, ok := e.runnerOf(id); ok {
		t.Errorf("runner still registered: %+v", r)
	}
	if files := e.workFiles(id); len(files) != 0 {
		t.Errorf("workspace not clean: %v", files)
	}
}

// TestFailures covers the failure signals: a failing pre-runner script (UD_FAILED, no registration
// although a run and its credential are there) and a registration GitHub refuses (UD_REG_FAILED).
func TestFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		preRunner  string
		token      string // registration token; a fresh valid one when empty
		wantSignal store.Signal
		wantRun    string
		wantDetail string
	}{
		{"pre-runner fails", "#!/bin/sh\necho disk full >&2\nexit 3\n", "", store.SignalPreRunnerFailed, "", "disk full"},
		{"bad registration token", "", "NOT-A-TOKEN", store.SignalRegistrationFailed, "run-1", "Bad credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{preRunner: tt.preRunner})
			id := e.launch()
			token := tt.token
			if token == "" {
				token = e.runnerToken("registration")
			}
			e.putCredential(id, "run-1", store.CredentialRegistration, token)
			e.create(id, "run-1")
			sig := e.waitSignal(id, tt.wantSignal, tt.wantRun)
			if !strings.Contains(sig.Detail, tt.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", sig.Detail, tt.wantDetail)
			}
			if _, ok := e.runnerOf(id); ok {
				t.Errorf("a runner was registered")
			}
		})
	}
}

// TestLateRegistrationCredential: the control plane writes a created instance's registration
// credential only once GitHub mints the token, which a GitHub outage delays past CredentialWait (2 s
// here). The agent keeps looking while its record names the run, and registers once it comes: the
// run is not failed, nor the instance replaced, because GitHub was down.
func TestLateRegistrationCredential(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch()
	e.create(id, "run-1")
	time.Sleep(3 * time.Second) // past CredentialWait with no credential
	if sig, err := e.store.LastSignal(t.Context(), id); err == nil && sig.Signal == store.SignalRegistrationFailed {
		t.Fatalf("agent gave up before the credential came: %+v", sig)
	}
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.waitRunner(id, "run-1")
}

// TestOrphanTerminates: an instance whose record never appears terminates itself after the grace.
func TestOrphanTerminates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch()
	e.waitEC2State(id, "shutting-down", "terminated")
	if _, err := e.store.LastSignal(t.Context(), id); err != nil {
		t.Errorf("the agent did not boot (no UD_OK): %v", err)
	}
}

// TestTerminatingRecord: a record the control plane marked terminating makes the instance terminate
// itself at once (the agent does not wait for refresh).
func TestTerminatingRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{grace: time.Hour})
	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	e.waitSignal(id, store.SignalRegistered, "run-1")
	in, err := e.store.Transition(t.Context(), id, store.Change{From: []store.State{store.StateCreated},
		To: store.StateTerminating, Reason: "scale-in"})
	if err != nil {
		t.Fatal(err)
	}
	e.notify(in)
	e.waitEC2State(id, "shutting-down", "terminated")
}

// TestResumeWithoutRegistration: the agent restarts for a run whose runner registration is gone from
// the instance (a lost disk, a broken runner directory) and no registration credential is left: it
// signals UD_REG_FAILED so the control plane replaces the instance.
func TestResumeWithoutRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{manual: true})
	id := e.launch()
	endpoint := e.imdsEndpoint(id)
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	dirs := agenttest.InstanceDirs(e.root, id)
	cfg := e.agentConfig(envOptions{})
	cfg.StateDir, cfg.WorkDir = dirs.State, dirs.Work
	cfg.IMDS = imds.New(imds.Options{Endpoint: endpoint})
	cfg.NewRunner = func(string) (runner.Runner, error) {
		return fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: dirs.Runner, WorkDir: dirs.Work, PollWait: time.Second})
	}
	run := func() func() {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- agent.Run(ctx, cfg) }()
		return func() { cancel(); <-done }
	}
	stop := run()
	e.waitSignal(id, store.SignalRegistered, "run-1")
	stop()
	// The control plane withdraws the credential once it saw the registration (the agent only reads it).
	if _, err := e.store.TakeCredential(t.Context(), id, store.CredentialRegistration, "run-1"); err != nil {
		t.Fatalf("withdrawing the credential: %v", err)
	}
	if err := os.RemoveAll(dirs.Runner); err != nil {
		t.Fatal(err)
	}
	stop = run()
	defer stop()
	sig := e.waitSignal(id, store.SignalRegistrationFailed, "run-1")
	if !strings.Contains(sig.Detail, "no registration credential") {
		t.Errorf("detail = %q", sig.Detail)
	}
}

// TestFailedReleaseNeverServesAgain: an instance whose release failed (its runner could not be
// deregistered) is claimed anyway, as a forged "released" signal could get it pooled: the agent
// refuses to register for the new run and says why, so the claim discards it; the next workflow
// never runs on what the last job left.
func TestFailedReleaseNeverServesAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.toRunning(id, "run-1")

	// The release's removal token is refused at GitHub: the runner stays registered.
	e.putCredential(id, "run-1", store.CredentialRemoval, "NOT-A-TOKEN")
	none := ""
	in, err := e.store.Transition(t.Context(), id, store.Change{
		From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "run-1", SetRunID: &none,
		Threshold: time.Now().Add(10 * time.Minute), Reason: "released",
	})
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	e.notify(in)
	e.waitSignal(id, store.SignalReleaseFailed, "run-1")

	e.putCredential(id, "run-2", store.CredentialRegistration, e.runnerToken("registration"))
	in, err = e.store.Claim(t.Context(), id, "run-2", time.Now().Add(10*time.Minute))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	e.notify(in)
	sig := e.waitSignal(id, store.SignalRegistrationFailed, "run-2")
	if !strings.Contains(sig.Detail, "earlier release failed") {
		t.Errorf("detail = %q, want the failed release named", sig.Detail)
	}
	if r, ok := e.runnerOf(id); ok && containsFold(r.Labels, "run-2") {
		t.Errorf("the instance registered for run-2 after a failed release: %+v", r)
	}
}

// TestDeadlineEnforcedWhileRecordUnreadable: once the agent has read its deadline, a state table it
// can no longer read does not suspend it: past the deadline plus grace the instance terminates
// itself (DESIGN rule 4), as it would with a readable record.
func TestDeadlineEnforcedWhileRecordUnreadable(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	failGets := func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("failGets", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if broken.Load() && awsmiddleware.GetOperationName(ctx) == "GetItem" {
				return middleware.InitializeOutput{}, middleware.Metadata{}, errors.New("injected: the state table is unreachable")
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	}
	e := newEnv(t, envOptions{agentAPI: []func(*middleware.Stack) error{failGets}})
	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	in, err := e.store.Create(t.Context(), store.Instance{
		ID: id, State: store.StateCreated, RunID: "run-1", Threshold: time.Now().Add(4 * time.Second),
		InstanceType: "c6i.large", UsageClass: "on-demand",
	})
	if err != nil {
		t.Fatal(err)
	}
	e.notify(in)
	e.waitSignal(id, store.SignalRegistered, "run-1")
	broken.Store(true)
	e.waitEC2State(id, "shutting-down", "terminated")
}

// TestSpotInterruption: EC2 announces the instance's spot interruption while it serves a run. The
// agent reports the notice for the run; the release that follows is refused (the instance is never
// pooled again), and EC2 terminates the instance at the announced time.
func TestSpotInterruption(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.notify(e.create(id, "run-1"))
	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.toRunning(id, "run-1")
	if err := e.ecs.InterruptSpot(id, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	sig := e.waitSignal(id, store.SignalSpotInterrupted, "run-1")
	if !strings.Contains(sig.Detail, `"action":"terminate"`) {
		t.Errorf("notice detail %q, want the instance-action document", sig.Detail)
	}
	e.release(id, "run-1")
	failed := e.waitSignal(id, store.SignalReleaseFailed, "run-1")
	if !strings.Contains(failed.Detail, "spot interruption") {
		t.Errorf("release failed for %q, want the spot interruption named", failed.Detail)
	}
	e.waitEC2State(id, "shutting-down", "terminated")
}
