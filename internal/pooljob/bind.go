// Binding scale set jobs to the runners that took them. On github.com the Actions service assigns a
// scale set's job to any idle runner of the set, not necessarily the one brought up for it: the
// runner brought up for job X may run job Y while X's own runner stays idle. JobStarted names the
// runner that took the job, by id and name (actions/scaleset types.go: JobStarted and JobCompleted
// carry runnerId and runnerName), and Bind swaps instances between two jobs' ledgers, so each job's
// ledger names the instance that serves it: the idle one left over now serves the job whose runner
// was taken, and is ended only by that job's completion, never by the completion of the job it was
// brought up for while demand for it remains.
//
// Each pool job instance registers one just-in-time runner, so a runner id belongs to an instance
// and moves with it: every ledger names an instance together with that instance's own runner id
// (JobResult.RunnerID), which the backstop and the pool worker read at GitHub before they end an
// instance (runner.go). Runners take one another's jobs in chains (X's runner takes Y, Y's takes Z,
// Z's takes X), in any order of JobStarted deliveries, so the ledger that names a runner's instance
// is not always the one of the job the instance was brought up for: Bind follows the chain to it.
package pooljob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// maxChain bounds the ledgers Bind reads to find the one naming an instance: the length of a chain
// of jobs whose runners took one another's jobs that it follows. A longer chain is left as a
// broken one is (see holder).
const maxChain = 16

// Bind records that scale set job j started on the runner runnerName, whose id GitHub gives as
// runnerID (JobStarted's runnerId). When that runner's instance is named by another served job's
// ledger (Y's: the job it was brought up for, or the one it was handed to since), j's ledger takes
// that instance with runnerID, and Y's takes the instance j's ledger named, with the runner id j's
// ledger recorded for it. It reports whether it rebound anything; a runner that is not one of ours,
// or a job not served yet, is left as it is. It is idempotent: a redelivered JobStarted finds j
// already bound (and only corrects the runner id j's ledger records, should it not be runnerID).
// A runnerID that is not positive is not recorded: j's ledger takes the id Y's ledger recorded for
// the instance, or none when no ledger names it.
func (q *JobQueue) Bind(ctx context.Context, j warmpool.Job, runnerName string, runnerID int64) (bool, error) {
	id, ok := warmpool.InstanceOfRunner(runnerName)
	if !ok || j.ScaleSetID == 0 {
		return false, nil
	}
	runnerID = max(runnerID, 0)
	rx, sx, ok, err := q.servedRecord(ctx, j.LedgerKey())
	if err != nil || !ok {
		return false, err
	}
	if sx.InstanceID == id {
		if runnerID == 0 || sx.RunnerID == runnerID {
			return false, nil
		}
		sx.RunnerID = runnerID
		rx.Result = mustJSON(sx)
		if _, err := q.st.UpdateRun(ctx, rx, rx.Version); err != nil {
			return false, fmt.Errorf("binding job %d: recording runner %d: %w", j.JobID, runnerID, err)
		}
		return false, nil
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
	h, err := q.holder(ctx, j.LedgerKey(), in, mine)
	if err != nil {
		return false, fmt.Errorf("binding job %d to runner %s: %w", j.JobID, runnerName, err)
	}
	if runnerID == 0 {
		runnerID = h.res.RunnerID // the id recorded for in where a ledger names it, else none
	}
	// The holder first: a crash between the two writes leaves j unbound, with the holder's ledger
	// naming mine already; the redelivered JobStarted finds that (h.mineHeld) and binds j alone.
	if h.found {
		move(&h.res, mine, runner)
		h.run.Result = mustJSON(h.res)
		if _, err := q.st.UpdateRun(ctx, h.run, h.run.Version); err != nil {
			return false, fmt.Errorf("binding job %d: handing instance %s to %s: %w", j.JobID, mine, h.run.Key, err)
		}
	}
	move(&sx, id, runnerID)
	if !h.found && !h.mineHeld {
		// No ledger names mine any more: j's completion is the one left to end it, once its runner
		// is done (picked, unusedPicked).
		sx.Handed = ""
	}
	rx.Result = mustJSON(sx)
	if _, err := q.st.UpdateRun(ctx, rx, rx.Version); err != nil {
		return false, fmt.Errorf("binding job %d to runner %s: %w", j.JobID, runnerName, err)
	}
	return true, nil
}

// move has a ledger result name instance, whose runner is runner. Handed keeps the instance brought
// up for the job while another job's ledger names it, so the job's completion leaves that one to
// the other job's: the ledger names it until Bind first moves the result on, Handed after.
func move(s *warmpool.JobResult, instance string, runner int64) {
	own := s.Handed
	if own == "" {
		own = s.InstanceID
	}
	s.InstanceID, s.RunnerID, s.Handed = instance, runner, ""
	if own != instance {
		s.Handed = own
	}
}

// holding is what holder found: the served ledger that names an instance, if any.
type holding struct {
	run   store.Run
	res   warmpool.JobResult
	found bool
	// mineHeld: a ledger other than the binding job's names the instance that job's ledger names.
	mineHeld bool
}

// holder finds the served ledger, other than skip's, that names in: the ledger of the job in was
// brought up for (in.RunID), unless Bind moved in on. Each swap keeps every instance named by one
// ledger, so the chain is followed without a scan: a ledger that names another instance leads to
// the ledger of the job that instance was brought up for (its record's RunID), and the ledger that
// names in is the one that leads back to in's own. The walk stops, found false, at a job not served
// (completed: its completion reads its ledger as it is), an instance no longer recorded, a ledger
// read twice or after maxChain ledgers: then no ledger takes mine, unless one names it already
// (mineHeld: the binding was interrupted after its first write).
func (q *JobQueue) holder(ctx context.Context, skip string, in store.Instance, mine string) (holding, error) {
	var h holding
	key, ok := warmpool.LedgerKey(in.RunID)
	seen := map[string]bool{}
	for range maxChain {
		if !ok || seen[key] {
			return h, nil
		}
		seen[key] = true
		r, s, served, err := q.servedRecord(ctx, key)
		if err != nil || !served {
			return h, err
		}
		if key != skip && s.InstanceID == mine {
			h.mineHeld = true
		}
		if s.InstanceID == in.ID {
			if key == skip {
				return h, nil
			}
			h.run, h.res, h.found = r, s, true
			return h, nil
		}
		next, err := q.st.Get(ctx, s.InstanceID)
		if errors.Is(err, store.ErrNotFound) {
			return h, nil
		}
		if err != nil {
			return h, fmt.Errorf("following the ledgers to instance %s: %w", in.ID, err)
		}
		key, ok = warmpool.LedgerKey(next.RunID)
	}
	return h, nil
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
