// The backstop for a lost completion. A scale set job's instance ends when JobCompleted reaches
// the pool worker; if that message never comes (every listener replica down while it waited, lost
// in a takeover, or a job whose runner the service never reported done), nothing else ends the
// instance: its agent leaves the runner whose just-in-time registration is spent stopped and waits
// for its record, which runs out its max runtime, a bill nobody sees.
//
// GitHub's answer ends it instead. Runners of a scale set are ephemeral: each runs one job and is
// then removed by the service (actions/scaleset README.md: "each runner executes one job and is then
// removed"; its example's Scaler, examples/dockerscaleset/scaler.go, counts on the runner's exit as
// well as on HandleJobCompleted). So while this replica holds the scale set's session it lists the
// scope's runners every Resync; an instance of ours that serves a job of the set, registered and
// running by the control plane's records, whose runner GitHub listed in neither of two listings in
// a row, is done with its job. The listener hands its job's completion to the scaler, as JobCompleted
// would, from the job as the ledger recorded it: the pool worker ends the instance (or recycles it)
// after its own check that GitHub shows the runner not busy. Nothing the instance writes counts:
// its agent's signals are claims, the listing and the records are not. A runner kept busy by a
// hostile job stays listed until GitHub's own job timeout ends the job and removes the runner.
package scalesets

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// ConclusionRunnerGone is the conclusion of a completion the backstop inferred.
const ConclusionRunnerGone = "unknown: no completion received, its ephemeral runner is gone at GitHub"

// finished looks for the scale set's running job instances whose runner GitHub no longer lists and
// completes their jobs. missed holds the instances the previous listing missed; it returns those
// this one missed, to look at again next time.
func (l *listener) finished(ctx context.Context, scaleSetID int64, missed map[string]bool) (map[string]bool, error) {
	gh := l.m.cfg.GitHub
	if gh == nil {
		return nil, nil
	}
	recs, err := l.m.cfg.Store.Live(ctx)
	if err != nil {
		return missed, fmt.Errorf("reading the live instances: %w", err)
	}
	prefix := fmt.Sprintf("%sss%d-", warmpool.JobRunPrefix, scaleSetID)
	var running []store.Instance
	for _, in := range recs {
		// Running: the convergence loop promoted it on its agent's registration for the job, so
		// its just-in-time runner exists at GitHub (generatejitconfig made it before the launch).
		if in.State == store.StateRunning && strings.HasPrefix(in.RunID, prefix) {
			running = append(running, in)
		}
	}
	if len(running) == 0 {
		return nil, nil
	}
	// Listed after the records were read: a runner of a record read above is listed unless it is gone.
	runners, err := gh.ListRunners(ctx, l.set.Scope)
	if err != nil {
		return missed, fmt.Errorf("listing the runners of %s: %w", l.set.Scope, err)
	}
	listed := map[string]bool{}
	for _, r := range runners {
		listed[strings.ToLower(r.Name)] = true
	}
	now := map[string]bool{}
	for _, in := range running {
		name := warmpool.RunnerName(in.ID)
		if listed[strings.ToLower(name)] {
			continue
		}
		if !missed[in.ID] {
			now[in.ID] = true // once may be a listing behind: look again
			continue
		}
		if err := l.complete(ctx, in); err != nil {
			now[in.ID] = true
			l.log.Warn("job of an instance whose runner is gone not completed: retried", "instance", in.ID, "run", in.RunID, "err", err)
		}
	}
	return now, nil
}

// complete hands the completion of the job in's record names to the scaler, from the ledger.
func (l *listener) complete(ctx context.Context, in store.Instance) error {
	key, _ := warmpool.LedgerKey(in.RunID) // a job's: finished read it under the set's job prefix
	r, err := l.m.cfg.Store.GetRun(ctx, key)
	if err != nil {
		return fmt.Errorf("the ledger record %s: %w", key, err)
	}
	j, err := warmpool.DecodeJob(string(r.Request))
	if err != nil {
		return fmt.Errorf("the ledger record %s: %w", key, err)
	}
	j.Action, j.RunnerName, j.Conclusion = warmpool.ActionCompleted, warmpool.RunnerName(in.ID), ConclusionRunnerGone
	if err := l.m.scaler.Completed(ctx, j); err != nil {
		return err
	}
	l.m.metrics.inc(l.m.metrics.jobs, "jobs", l.set.Name, JobCompletionInferred)
	l.log.Warn("scale set job completed for want of its completion: its runner is gone at GitHub",
		"instance", in.ID, "run", in.RunID, "job", j.JobID, "scale_set_job", j.ScaleSetJob)
	return nil
}

// JobCompletionInferred is the type the job messages' counter gives the backstop's completions.
const JobCompletionInferred = "CompletionInferred"

// backstop runs finished every Resync until ctx ends (while this replica holds the session): an
// instance whose runner GitHub removed is ended within about three Resync periods, plus the pool
// worker's next batch.
func (l *listener) backstop(ctx context.Context, scaleSetID int64) {
	var missed map[string]bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.m.cfg.Resync):
		}
		var err error
		if missed, err = l.finished(ctx, scaleSetID, missed); err != nil && ctx.Err() == nil {
			l.log.Warn("looking for scale set jobs whose completion never came", "err", err)
		}
	}
}
