// Binding scale set jobs to the runners that took them. On github.com the Actions service assigns a
// scale set's job to any idle runner of the set, not necessarily the one brought up for it: the
// runner brought up for job X may run job Y while X's own runner stays idle. JobStarted names the
// runner that took the job (actions/scaleset types.go: JobStarted and JobCompleted carry runnerId
// and runnerName), and Bind swaps the two jobs' instances in the ledger, so each job's ledger names
// the instance that serves it: the idle one left over now serves the job whose runner was taken,
// and is ended only by that job's completion, never by the completion of the job it was brought up
// for while demand for it remains.
package pooljob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// Bind records that scale set job j started on the runner runnerName. When that runner's instance
// was brought up for another job Y, and both jobs are served, j's ledger takes that instance and
// runner, and Y's ledger takes the instance and runner brought up for j. It reports whether it
// rebound anything; a runner that is not one of ours, or a job not served yet, is left as it is.
// It is idempotent: a redelivered JobStarted finds j already bound.
func (q *JobQueue) Bind(ctx context.Context, j warmpool.Job, runnerName string) (bool, error) {
	id, ok := warmpool.InstanceOfRunner(runnerName)
	if !ok || j.ScaleSetID == 0 {
		return false, nil
	}
	rx, sx, ok, err := q.servedRecord(ctx, j.LedgerKey())
	if err != nil || !ok || sx.InstanceID == id {
		return false, err
	}
	in, err := q.st.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("binding job %d to runner %s: %w", j.JobID, runnerName, err)
	}
	if !poolJobLive(in) {
		return false, nil
	}
	mine, runner := sx.InstanceID, sx.RunnerID
	sx.InstanceID, sx.Handed = id, ""
	// Y first: a crash between the two writes leaves j unbound, and the redelivered JobStarted
	// binds again. Only an instance handed to Y is spared by j's completion.
	yKey := "pooljob:" + strings.TrimPrefix(in.RunID, warmpool.JobRunPrefix)
	if yKey != j.LedgerKey() {
		ry, sy, ok, err := q.servedRecord(ctx, yKey)
		if err != nil {
			return false, err
		}
		if ok && sy.InstanceID == id {
			sx.RunnerID, sx.Handed = sy.RunnerID, mine
			sy.InstanceID, sy.RunnerID, sy.Handed = mine, runner, ""
			ry.Result = mustJSON(sy)
			if _, err := q.st.UpdateRun(ctx, ry, ry.Version); err != nil {
				return false, fmt.Errorf("binding job %d: handing instance %s to %s: %w", j.JobID, mine, yKey, err)
			}
		}
	}
	rx.Result = mustJSON(sx)
	if _, err := q.st.UpdateRun(ctx, rx, rx.Version); err != nil {
		return false, fmt.Errorf("binding job %d to runner %s: %w", j.JobID, runnerName, err)
	}
	return true, nil
}

// servedRecord reads a ledger record and its result; ok is false unless the job is served.
func (q *JobQueue) servedRecord(ctx context.Context, key string) (store.Run, warmpool.JobResult, bool, error) {
	r, s, err := readLedger(ctx, q.st, key)
	return r, s, err == nil && r.Status == warmpool.JobServed && s.InstanceID != "", err
}

// readLedger reads a ledger record and its result (zero when the ledger does not know the job).
func readLedger(ctx context.Context, st warmpool.Store, key string) (store.Run, warmpool.JobResult, error) {
	r, err := st.GetRun(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return store.Run{}, warmpool.JobResult{}, nil
	}
	if err != nil {
		return store.Run{}, warmpool.JobResult{}, fmt.Errorf("reading the ledger of %s: %w", key, err)
	}
	var s warmpool.JobResult
	_ = json.Unmarshal(r.Result, &s)
	return r, s, nil
}

// bound returns the instances a completed scale set job's ledger binds (a completion retried after
// the ledger says completed reads the same): the one serving it (Bind may have moved it from the
// one brought up for it) and the one it handed to another job.
func (w *Worker) bound(ctx context.Context, j warmpool.Job) (serving, handed string, err error) {
	if j.ScaleSetID == 0 {
		return "", "", nil
	}
	_, s, err := readLedger(ctx, w.cfg.Store, j.LedgerKey())
	return s.InstanceID, s.Handed, err
}
