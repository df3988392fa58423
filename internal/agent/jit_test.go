package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// TestSpentJITRunnerNotRestarted runs a pool job's instance: its runner registered with a
// just-in-time configuration runs its one job and exits, as the real ephemeral runner does. The
// agent does not start it again, not once its restart back-off passed by its clock nor after an
// agent restart; it waits for the control plane, whose release (a recycled instance) still goes
// through.
func TestSpentJITRunnerNotRestarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{notice: agent.NoticeIMDSTags, manual: true})
	id := e.launch()
	endpoint := e.imdsEndpoint(id)
	e.putJITCredential(id, "run-1")
	e.create(id, "run-1")

	dirs := agenttest.InstanceDirs(e.root, id)
	cfg := e.agentConfig(envOptions{notice: agent.NoticeIMDSTags})
	cfg.StateDir, cfg.WorkDir = dirs.State, dirs.Work
	cfg.IMDS = imds.New(imds.Options{Endpoint: endpoint})
	var skew atomic.Int64 // the agent's clock runs ahead by this
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	var reads atomic.Int64
	cfg.OnRecord = func(store.Instance) { reads.Add(1) }
	runs := &countingRunner{}
	cfg.NewRunner = func(string) (runner.Runner, error) {
		r, err := fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: dirs.Runner, WorkDir: dirs.Work,
			JobDuration: 50 * time.Millisecond, PollWait: 5 * time.Second, Logger: cfg.Logger})
		runs.Runner = r
		return runs, err
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
	defer func() { stop() }()

	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.waitRunner(id, "run-1")
	e.toRunning(id, "run-1")
	e.waitJob(e.gh.QueueJob(owner, repo, 1, []string{"run-1"}))
	if !eventually(func() bool { return runs.exits.Load() > 0 }) {
		t.Fatalf("the ephemeral runner did not exit after its job")
	}
	if _, ok := e.runnerOf(id); ok {
		t.Errorf("the JIT runner is still registered after its job")
	}

	// Past the longest restart back-off (30 s) by the agent's clock, the agent reads its record.
	skew.Store(int64(time.Minute))
	before := reads.Load()
	in, err := e.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	e.notify(in)
	if !eventually(func() bool { return reads.Load() > before }) {
		t.Fatalf("the agent did not read its record after the notice")
	}
	// A restarted agent does not start it either (its marker says the runner is spent).
	stop()
	before = reads.Load()
	stop = start()
	if !eventually(func() bool { return reads.Load() > before }) {
		t.Fatalf("the restarted agent did not read its record")
	}

	// The control plane hands the instance back (a recycled pool job): the release stops a runner
	// started meanwhile, so by its confirmation every start is counted.
	e.release(id, "run-1")
	e.waitSignal(id, store.SignalReleased, "run-1")
	if n := runs.starts.Load(); n != 1 {
		t.Errorf("the runner was started %d times, want 1: a spent JIT runner was restarted", n)
	}
}

// countingRunner counts the runner's Run calls (run.sh starts) and their returns.
type countingRunner struct {
	runner.Runner
	starts, exits atomic.Int64
}

func (c *countingRunner) Run(ctx context.Context) error {
	c.starts.Add(1)
	defer c.exits.Add(1)
	return c.Runner.Run(ctx)
}

// putJITCredential writes run's registration credential as a JIT configuration for the instance's
// runner, generated at the GitHub fake as the control plane does for a pool job.
func (e *env) putJITCredential(id, run string) {
	e.t.Helper()
	body := fmt.Sprintf(`{"name":%q,"runner_group_id":1,"labels":[%q]}`, agent.RunnerName(id), run)
	req, _ := http.NewRequestWithContext(e.t.Context(), http.MethodPost,
		fmt.Sprintf("%s/repos/%s/%s/actions/runners/generate-jitconfig", e.ghURL, owner, repo), strings.NewReader(body))
	req.Header.Set("Authorization", "token "+e.gh.PAT())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("generate-jitconfig: %v", err)
	}
	defer resp.Body.Close()
	var out struct {
		Config string `json:"encoded_jit_config"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil || out.Config == "" {
		e.t.Fatalf("generate-jitconfig: %d %s", resp.StatusCode, b)
	}
	err = e.store.PutCredential(e.t.Context(), id, store.Credential{
		Kind: store.CredentialRegistration, RunID: run, Token: out.Config, JIT: true, ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		e.t.Fatalf("writing the JIT credential: %v", err)
	}
}
