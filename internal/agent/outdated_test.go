package agent_test

import (
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// A security release published while the runner serves a run: GitHub refuses the runner (the real
// one exits 7, actions/runner#4285; the fake runner's poll gets RunnerVersionTooOld). The agent
// reports UD_RUNNER_OUTDATED for the run, signed, does not restart the runner, and at the run's
// release reports the release failed, so the instance is never pooled again. Fails on the code
// before, which restarted the runner with backoff and pooled the instance.
func TestOutdatedRunnerIsReportedAndNeverPooled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.waitRunner(id, "run-1")
	e.toRunning(id, "run-1")

	e.gh.PublishRunnerRelease(runnerversion.Release{Version: "2.400.0", Security: true})
	sig := e.waitSignal(id, store.SignalRunnerOutdated, "run-1")
	rec, err := e.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sig.Detail, runnerversion.OutdatedDetail) || !sig.SignedBy(id, rec.AgentKey) {
		t.Errorf("signal = %+v; want the outdated detail, signed by the pinned key", sig)
	}
	e.release(id, "run-1")
	rel := e.waitSignal(id, store.SignalReleaseFailed, "run-1")
	if !strings.HasPrefix(rel.Detail, runnerversion.OutdatedDetail) {
		t.Errorf("release failure detail = %q, want the outdated runner named", rel.Detail)
	}
}
