// Completed pool jobs: the instance that ran the job is ephemeral and is terminated, unless its pool
// allows recycling for the same repository. The instance is found by the runner name the webhook
// reports (RunnerName's form), and any other instance picked for the job is ended too, unless its
// runner is busy with another job that carries the same labels (its own completion ends it then).
// "Not busy" is never a listing's word alone: a runner the listing does not show busy is read by its
// id before its instance is ended (runner.go, MayBeBusy).
package pooljob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func (w *Worker) handleCompleted(ctx context.Context, m message, o *outcomes) {
	err := w.complete(ctx, m.job)
	o.lock(func() {
		if err != nil {
			o.errors = append(o.errors, err)
			o.retry = append(o.retry, m)
			o.rep.Requeued = append(o.rep.Requeued, m.job.JobID)
			return
		}
		o.del = append(o.del, m)
		o.rep.Completed = append(o.rep.Completed, m.job.JobID)
	})
}

// complete ends the instances of a completed job: the one that ran it, and the others picked for
// it whose runner does not run another job, less the one that goes back to its pool (recycled).
// It is idempotent.
func (w *Worker) complete(ctx context.Context, j warmpool.Job) error {
	ran, err := w.ranIt(ctx, j)
	if err != nil {
		return err
	}
	var targets []store.Instance
	if ran.ID != "" {
		targets = append(targets, ran)
	}
	others, err := w.unusedPicked(ctx, j, ran)
	if err != nil {
		return fmt.Errorf("completed job %d: %w", j.JobID, err)
	}
	targets = w.recycleRan(ctx, j, append(targets, others...), ran.ID)
	w.withdrawUnused(ctx, j, targets)
	if err := w.endInstances(ctx, j, targets, ran.ID); err != nil {
		return fmt.Errorf("completed job %d: %w", j.JobID, err)
	}
	if err := w.ledger.end(ctx, j); err != nil {
		w.log.Warn("completed job not recorded in the ledger", "job", j.JobID, "err", err)
	}
	return nil
}

// ranIt returns the live pool-job instance whose runner the completion names (zero when none): it
// ran this job, whichever job it was picked for, and its ephemeral runner is done. A scale set
// job's runner GitHub still lists as busy refuses the completion for now (stillRunning); a job
// EC2 reclaimed the runner of has its run re-run (rerunReclaimed).
func (w *Worker) ranIt(ctx context.Context, j warmpool.Job) (store.Instance, error) {
	id, ok := warmpool.InstanceOfRunner(j.RunnerName)
	if !ok {
		return store.Instance{}, nil
	}
	in, err := w.cfg.Store.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Instance{}, nil
	case err != nil:
		return store.Instance{}, fmt.Errorf("completed job %d: %w", j.JobID, err)
	case !poolJobLive(in):
		return store.Instance{}, nil
	}
	if err := w.stillRunning(ctx, j, in); err != nil {
		return store.Instance{}, err
	}
	w.rerunReclaimed(ctx, j, in)
	return in, nil
}

// unusedPicked returns the instances picked for the job other than ran (the one that ran it, zero
// when none), less those whose runner runs another job: picked for this job but not running it, a
// runner may have taken another queued job with the same labels, so GitHub is asked before it is
// ended. One listing of the scope answers for all of them; a runner it does not show busy is read by
// its id (the listing may have skipped it), and its instance is ended only when that read says idle
// or gone, or finds no recorded id (MayBeBusy). A read that fails keeps the instance, with a log
// line: its max runtime, or the backstop once its runner is gone, ends it.
func (w *Worker) unusedPicked(ctx context.Context, j warmpool.Job, ran store.Instance) ([]store.Instance, error) {
	others, err := w.picked(ctx, j, map[string]bool{ran.ID: ran.ID != ""})
	if err != nil || len(others) == 0 {
		return nil, err
	}
	scope := j.Repository
	if j.ScaleSetScope != "" {
		scope = j.ScaleSetScope // a scale set's runners live in its scope (often the organisation)
	}
	busy, err := w.busyRunners(ctx, scope)
	if err != nil {
		return nil, err
	}
	// The ledgers that may record these runners' ids: the job's, and those of the jobs the
	// instances involved were brought up for (Bind swaps runners between those).
	runs := []string{j.RunKey()}
	for _, in := range append([]store.Instance{ran}, others...) {
		if in.RunID != "" {
			runs = append(runs, in.RunID)
		}
	}
	var out []store.Instance
	for _, in := range others {
		listed := busy[strings.ToLower(warmpool.RunnerName(in.ID))]
		var r runnerRead
		var rerr error
		if !listed {
			r, rerr = w.runners().read(ctx, scope, in, runs)
		}
		switch {
		case !MayBeBusy(listed, r.State, rerr):
			out = append(out, in)
		case rerr != nil:
			w.log.Warn("instance picked for a completed job kept: its runner, not listed busy, could not be read by its id", "job", j.JobID, "instance", in.ID, "err", rerr)
		default:
			w.log.Info("instance picked for a completed job runs another job: left to that job's completion", "job", j.JobID, "instance", in.ID, "runner", r.ID, "listed_busy", listed)
		}
	}
	return out, nil
}

// runners reads the worker's instances' runners by their ids (runner.go).
func (w *Worker) runners() runnerByID { return runnerByID{ledger: w.cfg.Store, gh: w.cfg.GitHub} }

// recycleRan returns targets less the instance that ran the job when it goes back to its pool: the
// pool recycles, the job is trusted (its run is not a pull request's), and the instance runs,
// scoped to the job's repository. The recycle runs in the background.
func (w *Worker) recycleRan(ctx context.Context, j warmpool.Job, targets []store.Instance, ranIt string) []store.Instance {
	spec, ok, err := w.cfg.Pools.Lookup(ctx, j.Pool)
	if err != nil || !ok || spec.Err != nil {
		return targets
	}
	if spec.Recycle && !j.Trusted() {
		w.log.Info("instance of a completed job not recycled: its run may be a pull request's (or its event is unknown)", "job", j.JobID, "event", j.Event)
	}
	if !spec.Recycle || w.cfg.Recycle == nil || !j.Trusted() {
		return targets
	}
	i := slices.IndexFunc(targets, func(in store.Instance) bool {
		return in.ID == ranIt && in.State == store.StateRunning && strings.EqualFold(in.Scope, j.Repository)
	})
	if i < 0 {
		return targets
	}
	in := targets[i]
	idle := spec.DanglingAfter()
	if idle <= 0 {
		idle = warmpool.DefaultDanglingAfter
	}
	w.bg.Go(func() {
		// The release waits for the agent's deregistration, so it does not hold up the batch. If
		// it fails the instance is expired by the release, or runs out its running deadline.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*idle)
		defer cancel()
		if err := w.cfg.Recycle(bctx, in.RunID, idle); err != nil {
			w.log.Warn("instance of a completed job not recycled", "job", j.JobID, "instance", in.ID, "err", err)
		}
	})
	return slices.Delete(targets, i, i+1)
}

// endInstances terminates a completed job's instances.
func (w *Worker) endInstances(ctx context.Context, j warmpool.Job, targets []store.Instance, ranIt string) error {
	victims := make([]warmpool.Victim, len(targets))
	from := map[string][]store.State{}
	for i, in := range targets {
		victims[i] = warmpool.Victim{Rec: in, Reason: fmt.Sprintf("job %d completed (%s)", j.JobID, j.Conclusion)}
		if in.ID == ranIt {
			// Its ephemeral runner is done whatever the record became since it was read: a job
			// shorter than a convergence pass completes while its record is still claimed, and the
			// pass may promote it to running in between (same run). Conditional on the read state
			// alone, the completion lost that race and the instance ran out its max runtime.
			from[in.ID] = jobStates(in.State)
		}
	}
	_, _, err := w.term.TerminateFrom(ctx, victims, from)
	return err
}

// picked returns the live instances picked for a completed job other than those in seen (the one
// that ran it): those brought up for it, less the one Bind handed to another scale set job, plus
// the one Bind bound it to.
func (w *Worker) picked(ctx context.Context, j warmpool.Job, seen map[string]bool) ([]store.Instance, error) {
	serving, handed, err := w.bound(ctx, j)
	if err != nil {
		return nil, err
	}
	recs, err := w.cfg.Store.ByRun(ctx, j.RunKey())
	if err != nil {
		return nil, err
	}
	if serving != "" && !seen[serving] && !slices.ContainsFunc(recs, func(in store.Instance) bool { return in.ID == serving }) {
		in, err := w.cfg.Store.Get(ctx, serving)
		switch {
		case err == nil:
			recs = append(recs, in)
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	var others []store.Instance
	for _, in := range recs {
		if !seen[in.ID] && in.ID != handed && poolJobLive(in) {
			others = append(others, in)
		}
	}
	return others, nil
}

// withdrawUnused removes at GitHub the just-in-time runner of a scale set job that ended without
// running (its assignment cancelled for good, or its run cancelled) when the instance that got the
// runner is among those ended: no late boot can then take a job with it. A failure is logged: the
// runner only goes offline with its instance.
func (w *Worker) withdrawUnused(ctx context.Context, j warmpool.Job, ending []store.Instance) {
	if j.ScaleSetID == 0 || j.RunnerName != "" || w.cfg.Jobs.withdraw == nil {
		return
	}
	r, err := w.cfg.Store.GetRun(ctx, j.LedgerKey())
	if err != nil {
		return
	}
	var s warmpool.JobResult
	if json.Unmarshal(r.Result, &s) != nil || s.RunnerID == 0 ||
		!slices.ContainsFunc(ending, func(in store.Instance) bool { return in.ID == s.InstanceID }) {
		return
	}
	if err := w.cfg.Jobs.withdraw.RemoveRunner(ctx, j.ScaleSetScope, s.RunnerID); err != nil {
		w.log.Warn("runner of a scale set job that never ran not withdrawn", "job", j.JobID, "runner", s.RunnerID, "err", err)
	}
}

// stillRunning refuses, for now, the completion of a scale set job whose runner is still busy: the
// Actions service can send JobCompleted while the job still runs (actions/runner#4492), and ending
// the instance then would kill the job. The completion is retried; once the runner is done (an
// ephemeral runner is removed after its job) it goes through. Busy is the listing's word, and a
// runner the listing does not show busy is read by its id (the listing may have skipped it): busy,
// or a read that fails, refuses the completion for now too; idle, gone (404), or no recorded id lets
// it through (MayBeBusy).
func (w *Worker) stillRunning(ctx context.Context, j warmpool.Job, in store.Instance) error {
	if j.ScaleSetID == 0 {
		return nil
	}
	busy, err := w.busyRunners(ctx, j.ScaleSetScope)
	if err != nil {
		return fmt.Errorf("completed job %d: %w", j.JobID, err)
	}
	name := warmpool.RunnerName(in.ID)
	listed := busy[strings.ToLower(name)]
	var r runnerRead
	if !listed {
		// Bind has moved in's runner id to j's ledger when j started on it; otherwise in's own
		// job's ledger has it.
		r, err = w.runners().read(ctx, j.ScaleSetScope, in, []string{j.RunKey()})
	}
	switch {
	case !MayBeBusy(listed, r.State, err):
		return nil
	case err != nil:
		return fmt.Errorf("completed job %d: runner %s not listed busy but not read by its id, completion retried later: %w", j.JobID, name, err)
	}
	return fmt.Errorf("completed job %d: runner %s still busy: the job still runs, completion retried later", j.JobID, name)
}

// jobStates are the states an instance serving a pool job passes through before its job ends
// (launched, claimed, registered), with the one it was read in.
func jobStates(read store.State) []store.State {
	states := []store.State{store.StateCreated, store.StateClaimed, store.StateRunning}
	if !slices.Contains(states, read) {
		states = append(states, read)
	}
	return states
}

// poolJobLive reports whether a record is a live instance serving a pool job (never a
// step-driven run's instance, whatever a webhook says).
func poolJobLive(in store.Instance) bool {
	return in.State.Live() && in.State != store.StateTerminating && strings.HasPrefix(in.RunID, warmpool.JobRunPrefix)
}

// busyRunners lists the runners of the scope that are running a job, by lower-case name.
func (w *Worker) busyRunners(ctx context.Context, scope string) (map[string]bool, error) {
	runners, err := w.cfg.GitHub.ListRunners(ctx, scope)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range runners {
		if r.Busy {
			out[strings.ToLower(r.Name)] = true
		}
	}
	return out, nil
}

// rerunTTL is how long a run's re-run marker lives: longer than GitHub keeps a run re-runnable.
const rerunTTL = 60 * 24 * time.Hour

// rerunReclaimed re-runs, once per workflow run, the failed jobs of a run whose job failed because
// EC2 reclaimed its runner (a spot interruption its agent signed). Every pool instance and cold
// start is on-demand capacity (fleet.OnDemand), so the re-run job is served on-demand. A second
// reclaim of the same run is not re-run. The marker is written before GitHub is asked: a re-run
// lost to an error is logged and not retried, never made twice.
func (w *Worker) rerunReclaimed(ctx context.Context, j warmpool.Job, in store.Instance) {
	if j.Conclusion != "failure" {
		return
	}
	sig, err := w.cfg.Store.LastSignal(ctx, in.ID)
	if err != nil || !in.SpotReclaimed(sig) {
		return
	}
	first, err := w.cfg.Store.MarkOnce(ctx, fmt.Sprintf("rerun:%s:%d", strings.ToLower(j.Repository), j.RunID), rerunTTL)
	switch {
	case err != nil:
		w.log.Warn("reclaimed job not re-run: the re-run marker was not written", "job", j.JobID, "run", j.RunID, "instance", in.ID, "err", err)
		return
	case !first:
		w.log.Warn("reclaimed job not re-run: its run was re-run once already", "job", j.JobID, "run", j.RunID, "instance", in.ID)
		return
	}
	if err := w.cfg.GitHub.RerunFailedJobs(ctx, j.Repository, j.RunID); err != nil {
		w.log.Error("reclaimed job not re-run: GitHub refused the re-run", "job", j.JobID, "run", j.RunID, "instance", in.ID, "err", err)
		return
	}
	w.log.Warn("job's runner was reclaimed by EC2 (spot interruption): failed jobs of its run re-run", "job", j.JobID, "run", j.RunID, "instance", in.ID)
}
