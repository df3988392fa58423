// outdated.go: the runner exited because GitHub refused it for its version. Since actions/runner
// 2.333.0 (actions/runner#4285) the listener returns RunnerVersionDeprecated, exit code 7, when the
// broker refuses its session with RunnerVersionTooOld and ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE
// is set (src/Runner.Common/Constants.cs ReturnCode, src/Runner.Listener/Program.cs
// GetRunnerVersionDeprecatedExitCode, src/Misc/layoutroot/run.sh); internal/agent/runner sets it
// and reports the exit as runner.ErrVersionRefused. On github.com that happens 30 days after a newer
// release, or at once after a critical security release.
//
// The agent stops restarting the runner, signals UD_RUNNER_OUTDATED (signed, with its run) and, at
// the run's release, reports the release failed so the instance is never pooled again. The signal
// is evidence, not a fact (DESIGN.md "Authority"): the control plane acts on it for the whole fleet
// only as internal/runnerrelease outdated.go decides.
package agent

import (
	"context"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// runnerOutdated handles a runner GitHub refused for its version while it served run.
func (a *agent) runnerOutdated(ctx context.Context, run string, err error) {
	a.outdated = runnerversion.OutdatedDetail + ": " + err.Error()
	a.log.Error("agent: GitHub refuses the runner's version; not restarting it", "run", run, "err", err)
	a.signal(ctx, store.SignalRecord{Signal: store.SignalRunnerOutdated, RunID: run, Detail: lastBytes(a.outdated, 1024)})
}
