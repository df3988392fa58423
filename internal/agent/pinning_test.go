// Tests of what the agent signs and when (issue #28 item 6): the registration report is written
// before the runner starts, so no job can write a report in its place before the control plane reads
// (and pins) the agent's own; and the agent never signs a run id it read back from its partition of
// the table, which a job holding the instance role can write.
package agent_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
)

// recordingStore is the agent's store, recording every signal it writes and, for a registration
// report, whether the runner had started by the time it was written.
type recordingStore struct {
	agent.Store
	started *atomic.Bool
	mu      sync.Mutex
	signals []store.SignalRecord
	late    []string // registration reports written after the runner started
	gets    atomic.Int32
}

func (s *recordingStore) Get(ctx context.Context, id string) (store.Instance, error) {
	defer s.gets.Add(1)
	return s.Store.Get(ctx, id)
}

func (s *recordingStore) PutSignal(ctx context.Context, id string, sig store.SignalRecord) error {
	if sig.Signal == store.SignalRegistered {
		// A runner started just before the report has surely called Run after this pause.
		time.Sleep(200 * time.Millisecond)
		if s.started.Load() {
			s.mu.Lock()
			s.late = append(s.late, sig.RunID)
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.signals = append(s.signals, sig)
	s.mu.Unlock()
	return s.Store.PutSignal(ctx, id, sig)
}

// startedRunner marks when the agent starts its runner.
type startedRunner struct {
	runner.Runner
	started *atomic.Bool
}

func (r startedRunner) Run(ctx context.Context) error {
	r.started.Store(true)
	return r.Runner.Run(ctx)
}

// recordingAgent starts an agent for instance id on a recording store; stop ends it.
func (e *env) recordingAgent(t *testing.T, id string) (rec *recordingStore, stop func()) {
	t.Helper()
	return e.recordingAgentWith(t, id, nil)
}

// recordingAgentWith is recordingAgent with tune applied to its configuration.
func (e *env) recordingAgentWith(t *testing.T, id string, tune func(*agent.Config)) (rec *recordingStore, stop func()) {
	t.Helper()
	started := &atomic.Bool{}
	rec = &recordingStore{Store: e.agentStore, started: started}
	dirs := agenttest.InstanceDirs(e.root, id)
	cfg := e.agentConfig(envOptions{})
	if tune != nil {
		tune(&cfg)
	}
	cfg.Store = rec
	cfg.StateDir, cfg.WorkDir = dirs.State, dirs.Work
	cfg.IMDS = imds.New(imds.Options{Endpoint: e.imdsEndpoint(id)})
	cfg.NewRunner = func(string) (runner.Runner, error) {
		r, err := fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: dirs.Runner, WorkDir: dirs.Work, PollWait: time.Second})
		return startedRunner{Runner: r, started: started}, err
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	return rec, func() { cancel(); <-done }
}

// TestRegistrationReportedBeforeTheRunnerStarts: on a cold start the agent registers, reports the
// registration (signed) and only then starts the runner. The old agent started the runner first.
func TestRegistrationReportedBeforeTheRunnerStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{manual: true})
	id := e.launchFor("run-1")
	rec, stop := e.recordingAgent(t, id)
	defer stop()
	sig := e.waitSignal(id, store.SignalRegistered, "run-1")
	if !sig.SelfSigned(id) {
		t.Errorf("registration report %+v is not signed", sig)
	}
	e.waitRunner(id, "run-1")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.late) != 0 {
		t.Errorf("registration of %v reported after the runner started: a job could report in its place first", rec.late)
	}
}

// TestNeverSignsARunReadFromTheTable: a job that held the instance role wrote a report for another
// run in the agent's partition before the agent restarted on its idle instance. The old agent took
// it for an unconfirmed release and signed "released" for that run; the agent confirms only the
// release its own marker names.
func TestNeverSignsARunReadFromTheTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{manual: true})
	id := e.launch()
	ctx := t.Context()
	if _, err := e.store.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: "run-0",
		Threshold: time.Now().Add(10 * time.Minute), InstanceType: "c6i.large", UsageClass: "on-demand"}); err != nil {
		t.Fatal(err)
	}
	e.toRunning(id, "run-0")
	none := ""
	if _, err := e.store.Transition(ctx, id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle,
		RunID: "run-0", SetRunID: &none, Threshold: time.Now().Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// The forged report: a registration for another repository's run.
	if err := e.agentStore.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: "victim-run", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rec, stop := e.recordingAgent(t, id)
	defer stop()
	// Its first step (which resumes what a crashed agent left) is over once it reads its record again.
	if !eventually(func() bool { return rec.gets.Load() >= 2 }) {
		t.Fatal("the agent did not read its record twice")
	}
	// The agent is up and serving: a claim for run-2 is registered.
	e.putCredential(id, "run-2", store.CredentialRegistration, e.runnerToken("registration"))
	claimed, err := e.store.Claim(ctx, id, "run-2", time.Now().Add(10*time.Minute), store.StateIdle)
	if err != nil {
		t.Fatal(err)
	}
	e.notify(claimed)
	e.waitSignal(id, store.SignalRegistered, "run-2")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range rec.signals {
		if s.RunID == "victim-run" {
			t.Errorf("the agent signed %s for run %q, read back from its partition", s.Signal, s.RunID)
		}
	}
}
