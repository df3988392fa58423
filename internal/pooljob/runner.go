// Whether a pool job instance's just-in-time runner is still at GitHub, and busy, read by its id:
// the one place the pool worker and the backstop ask it. A runner listing is paginated and not a
// snapshot (see the backstop's file comment): when runners are removed between the requests of two
// of its pages, a runner at a page boundary is in neither page. So a listing's word that a runner is
// missing, or not busy, is never enough to end an instance: whoever would end one on that word
// reads the one runner by its id first (runnerByID.read), and decides with the listing's word and
// that answer together (Gone for the backstop, MayBeBusy for the pool worker). Only the runners the
// listing would have ended are read, one request each, so a listing's cost is not multiplied.
//
// The id is the one the job's ledger records for the instance (JobResult.RunnerID): the worker
// writes it when it mints the just-in-time runner, from GitHub's answer, and Bind moves it with the
// instance between scale set jobs. Nothing the instance writes is read. A webhook job's runner comes
// from the REST API's generate-jitconfig, whose answer is the runner as the REST API knows it. A scale
// set job's runner comes from the Actions service's generatejitconfig (actions/scaleset client.go,
// GenerateJitRunnerConfig: RunnerScaleSetJitRunnerConfig.Runner, a RunnerReference), and it is read
// over the REST API by that id. Why the two ids are the same:
//   - actions/scaleset (client.go) reads and removes a runner by its RunnerReference.ID at the
//     Actions service's agents resource, `_apis/distributedtask/pools/0/agents/{id}`; actions-runner-
//     controller removes a scale set's ephemeral runner by the id the JIT config gave it
//     (controllers/actions.github.com/ephemeralrunner_controller.go: Status.RunnerID from
//     jitConfig.Runner.ID, then RemoveRunner). So the JIT runner's id is an agent id of that resource.
//   - actions/runner removes itself by the one agent id its `.runner` file keeps (RunnerSettings.AgentId):
//     at that same agents resource, pool 0 ("agentPool is ignored server side", Runner.Common
//     RunnerServer.cs DeleteAgentAsync), or, in its runner-admin flow, with GitHub's REST API,
//     DELETE {api}/repos/{owner}/{repo}/actions/runners/{id} or /orgs/{org}/actions/runners/{id}
//     (Runner.Common RunnerDotcomServer.cs DeleteRunnerAsync, called from Runner.Listener
//     ConfigurationManager.cs with settings.AgentId). Its REST listing's `id` becomes a TaskAgent's Id
//     (DTWebApi ListRunnersResponse.ToTaskAgents), and the REST registration's answer becomes the
//     AgentId it keeps. GitHub's own runner uses one id for a runner on both APIs.
//
// No page of GitHub's documentation says it in so many words (the scale set APIs are not in the REST
// reference). Were the ids different, a read by id would be a 404 or another runner: the backstop
// would decide as its two listings did before the read was added, and the worker as its listing did;
// never worse than the listing alone.
package pooljob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// RunnerGetter reads one runner of a scope by its id (ghaccess.ErrRunnerNotFound when the scope
// does not have it); *ghaccess.Client satisfies it.
type RunnerGetter interface {
	GetRunner(ctx context.Context, scope string, id int64) (ghaccess.Runner, error)
}

// RunnerState is what a read of an instance's runner by its id found.
type RunnerState int

const (
	// RunnerNotRead: no ledger records a runner id for the instance, so nothing was read; the
	// listing's word stands, as before reads by id.
	RunnerNotRead RunnerState = iota
	// RunnerGone: GitHub answered 404, it has no runner of that id in the scope (an ephemeral
	// runner is removed after its job).
	RunnerGone
	// RunnerIdle: GitHub has the runner, not running a job (online or offline).
	RunnerIdle
	// RunnerBusy: GitHub has the runner, running a job.
	RunnerBusy
)

func (s RunnerState) String() string {
	return [...]string{"not read", "gone", "idle", "busy"}[s]
}

// Gone is the backstop's decision for a runner two listings in a row did not show: its job's
// completion is handed on only when the read by id says GitHub has no such runner, or when there
// was no id to read (the listings decide alone). Found, in any status, it is kept.
func Gone(read RunnerState) bool {
	return read == RunnerNotRead || read == RunnerGone
}

// MayBeBusy is the pool worker's decision before it ends an instance on a listing's word that its
// runner runs no job: the completion of a scale set job the runner ran (JobCompleted can come while
// the job still runs, actions/runner#4492), or an instance picked for a completed job whose runner
// may have taken another job. listedBusy is the listing's word; read and readErr are the read by
// id, made only when the listing does not show the runner busy. It reports true (keep the instance,
// or refuse the completion for now) when either says busy or the read failed; false when the
// listing says not busy and the read confirms it (idle or gone) or had no id to read.
func MayBeBusy(listedBusy bool, read RunnerState, readErr error) bool {
	return listedBusy || readErr != nil || read == RunnerBusy
}

// runnerByID reads instances' just-in-time runners at GitHub by the ids their jobs' ledgers record.
type runnerByID struct {
	ledger Ledger
	gh     RunnerGetter
}

// runnerRead is the answer of one read: the id read (0: none recorded), when found GitHub's
// runner, and the run key (RunKey's form) of the job whose ledger names the instance: the job it
// serves now, which Bind may have moved it to ("" when no ledger of the runs read names it).
type runnerRead struct {
	State  RunnerState
	ID     int64
	Runner ghaccess.Runner
	Run    string
}

// read reads the runner of in in scope by the id the ledgers of runs (instance run ids, RunKey's
// form; in's own is read first) record for in. An error is a ledger that could not be read, or a
// GitHub answer other than the runner or a 404: the caller decides nothing on it.
func (r runnerByID) read(ctx context.Context, scope string, in store.Instance, runs []string) (runnerRead, error) {
	run, id, err := r.recordedID(ctx, in, runs)
	if err != nil || id == 0 {
		return runnerRead{Run: run}, err
	}
	rn, err := r.gh.GetRunner(ctx, scope, id)
	switch {
	case errors.Is(err, ghaccess.ErrRunnerNotFound):
		return runnerRead{State: RunnerGone, ID: id, Run: run}, nil
	case err != nil:
		return runnerRead{ID: id, Run: run}, fmt.Errorf("reading runner %d of %s: %w", id, scope, err)
	case rn.Busy:
		return runnerRead{State: RunnerBusy, ID: id, Runner: rn, Run: run}, nil
	}
	return runnerRead{State: RunnerIdle, ID: id, Runner: rn, Run: run}, nil
}

// recordedID returns the run of the job whose ledger names in, among runs and in's own, and the id
// of in's just-in-time runner as that ledger records it at this moment ("" and 0: none names in).
// The ledger of in's own job names it unless Bind (bind.go) moved in, with its runner, to the scale
// set job that started on it; then the ledger of another job names it, and the ledgers of runs are
// read, in's own first, until one does. Read at each call, never kept: Bind may move it between two.
func (r runnerByID) recordedID(ctx context.Context, in store.Instance, runs []string) (string, int64, error) {
	keys := []string{in.RunID}
	for _, run := range runs {
		if !slices.Contains(keys, run) {
			keys = append(keys, run)
		}
	}
	for _, run := range keys {
		key, ok := warmpool.LedgerKey(run)
		if !ok {
			continue
		}
		rec, err := r.ledger.GetRun(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("the ledger record %s: %w", key, err)
		}
		var res warmpool.JobResult
		if json.Unmarshal(rec.Result, &res) == nil && res.InstanceID == in.ID {
			return run, res.RunnerID, nil
		}
	}
	return "", 0, nil
}
