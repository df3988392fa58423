// Taking over a provision its replica abandoned: a run record left provisioning past the provision
// deadline (Config.InProgressWait) by a replica that crashed or hung would answer every repeated
// request with ErrInProgress and keep the run's release waiting, while its instances sit claimed or
// created, or run (billed until their max runtime). The next request of the run, or refresh
// (TakeOverAbandoned), takes it over with one conditional write on the record's version, undoes
// what was not finished and adopts what was.
package provision

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// SourceAdopted is the source of a runner an abandoned provision promoted before its replica
// stopped, adopted into the result by the takeover.
const SourceAdopted = "adopted"

// OutcomeTakenOver is the Outcome of a provision finished by a takeover.
const OutcomeTakenOver = "taken-over"

// takeoverIdleTime is the idle threshold of an instance a takeover hands back when its runner
// class sets no idle time.
const takeoverIdleTime = 10 * time.Minute

// abandoned says whether run is provisioning for longer than any live provision takes.
func (p *Provisioner) abandoned(run store.Run) bool {
	return run.Status == StatusProvisioning && p.opts.Now().After(p.takeOverAt(run))
}

// takeOverAt is the provision deadline of run's current try: past it, the try counts as abandoned.
// UpdatedAt: a provisioning record is written when its try starts (or is taken over), and not again
// until it ends. A class whose boot takes longer (BootExtra) may hold its provision that much
// longer: the longest of the classes is waited out, never cut short.
func (p *Provisioner) takeOverAt(run store.Run) time.Time {
	return run.UpdatedAt.Add(p.cfg.InProgressWait + p.cfg.maxBootExtra())
}

// InProgressError says a run's provision is still in progress (errors.Is ErrInProgress), and from
// when it may be taken over: by then it has finished, or the next request (or refresh) finishes it.
type InProgressError struct {
	RunKey     string
	Since      time.Time // the current try's start
	TakeOverAt time.Time // its provision deadline
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("run %s: %v since %s; unfinished at %s, it is taken over", e.RunKey, ErrInProgress,
		e.Since.UTC().Format(time.RFC3339), e.TakeOverAt.UTC().Format(time.RFC3339))
}

func (e *InProgressError) Unwrap() error { return ErrInProgress }

func (p *Provisioner) inProgress(run store.Run) error {
	return &InProgressError{RunKey: run.Key, Since: run.UpdatedAt, TakeOverAt: p.takeOverAt(run)}
}

// Settled returns the run record once no provision of it is in progress: at once when its result
// is stored; otherwise it re-reads the record while ctx lasts, and takes the provision over once it
// is past the provision deadline (the same takeover as a repeated request's and refresh's). A run
// still in progress when ctx ends is an *InProgressError; a run never provisioned is
// store.ErrNotFound. Release waits with it before it releases what the run holds.
func (p *Provisioner) Settled(ctx context.Context, key string) (store.Run, error) {
	run, err := p.st.GetRun(ctx, key)
	if err != nil {
		return store.Run{}, fmt.Errorf("reading run %s: %w", key, err)
	}
	return p.awaitSettled(ctx, run)
}

// awaitSettled is Settled from the record run as read.
func (p *Provisioner) awaitSettled(ctx context.Context, run store.Run) (store.Run, error) {
	tick := time.NewTicker(p.opts.PollInterval)
	defer tick.Stop()
	for run.Status == StatusProvisioning {
		if p.abandoned(run) {
			taken, err := p.takeOver(ctx, run)
			if err != nil && ctx.Err() != nil {
				return run, p.inProgress(run) // the wait ended before the takeover's write
			}
			if err != nil {
				return store.Run{}, err
			}
			if run = taken; run.Status != StatusProvisioning {
				break
			}
			// Another takeover holds the record now, under its own deadline.
		}
		select {
		case <-ctx.Done():
			return run, p.inProgress(run)
		case <-tick.C:
		}
		r, err := p.st.GetRun(ctx, run.Key)
		if err != nil {
			if ctx.Err() != nil {
				return run, p.inProgress(run)
			}
			return store.Run{}, fmt.Errorf("reading run %s: %w", run.Key, err)
		}
		run = r
	}
	return run, nil
}

// TakeOverAbandoned takes over the provision of the run key when its record is provisioning past
// the provision deadline (refresh asks, for the runs its live records name). settled reports
// whether no provision of the run is in progress any more: it has no run record (a pool job's
// instances), or its result is stored (by this call or before).
func (p *Provisioner) TakeOverAbandoned(ctx context.Context, key string) (settled bool, err error) {
	run, err := p.st.GetRun(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading run %s: %w", key, err)
	case run.Status != StatusProvisioning:
		return true, nil
	case !p.abandoned(run):
		return false, nil
	}
	if run, err = p.takeOver(ctx, run); err != nil {
		return false, err
	}
	return run.Status != StatusProvisioning, nil
}

// takeOver finishes the abandoned provision of run and returns the record as it is then: with the
// takeover's result, or as another writer left it when that one won the record (the provision
// finished after all, or another takeover runs).
func (p *Provisioner) takeOver(ctx context.Context, run store.Run) (store.Run, error) {
	// The takeover's own try: a new version (and updated_at). Of concurrent takeovers exactly one
	// wins, and the abandoned provision, should its replica still be alive, cannot store its result.
	taken, err := p.st.UpdateRun(ctx, run, run.Version)
	if errors.Is(err, store.ErrConflict) {
		cur, gerr := p.st.GetRun(ctx, run.Key)
		if gerr != nil {
			return store.Run{}, fmt.Errorf("reading run %s: %w", run.Key, gerr)
		}
		return cur, nil
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("taking over run %s: %w", run.Key, err)
	}
	log := p.log.With("run", run.Key, "try_version", taken.Version)
	log.Warn("taking over an abandoned provision", "provisioning_since", run.UpdatedAt)
	var req Request
	if err := json.Unmarshal(run.Request, &req); err != nil {
		log.Warn("the abandoned provision's request is unreadable; its instances go back through the default runner class", "err", err)
	}
	res, err := p.undoAbandoned(ctx, run.Key, req, log)
	if err != nil {
		// Left provisioning under the takeover's version: the next takeover, past the deadline
		// again, tries once more.
		return store.Run{}, fmt.Errorf("taking over run %s: %w", run.Key, err)
	}
	res.RunKey, res.Label, res.StartedAt = run.Key, req.Label(), run.CreatedAt.Truncate(time.Millisecond)
	if err := p.storeResult(ctx, taken, res); err != nil {
		return store.Run{}, err
	}
	// Read back even when the caller's wait ended meanwhile (a release waits on a context of its
	// own): the takeover is done, and its caller acts on it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return p.st.GetRun(rctx, run.Key)
}

// undoAbandoned ends the run's instances as the abandoned provision would have: running ones (it
// promoted them) are adopted into the result, so the answer lists them and the workflow's release
// ends them; claimed ones are handed back (a release of those whose agent took the run's
// credential, claim.Claimer.Unclaim) or discarded; created ones are discarded. The result succeeds
// when every runner asked for is running and nothing else was left; it is retryable (rolled
// back) when nothing runs for the run.
func (p *Provisioner) undoAbandoned(ctx context.Context, key string, req Request, log *slog.Logger) (Result, error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.RollbackTimeout)
	defer cancel()
	listed, err := p.st.ByRun(dctx, key)
	if err != nil {
		return Result{}, fmt.Errorf("listing its instances: %w", err)
	}
	slices.SortFunc(listed, func(a, b store.Instance) int { return strings.Compare(a.ID, b.ID) })
	rc := p.cfg.RunnerClasses[req.runnerClass(p.cfg)]
	idleUntil := p.opts.Now().Add(cmp.Or(rc.IdleTime.Std(), takeoverIdleTime))
	reason := "provision abandoned by its replica, taken over"
	// The run index is eventually consistent: act on the records as they are.
	recs := make([]store.Instance, len(listed))
	_ = p.each(len(listed), func(i int) error {
		if rec, err := p.st.Get(dctx, listed[i].ID); err == nil && rec.RunID == key {
			recs[i] = rec
		}
		return nil
	})
	// The hand-backs share their GitHub checks: one runner listing per scope.
	claimed := len(slices.DeleteFunc(slices.Clone(recs), func(in store.Instance) bool { return in.State != store.StateClaimed }))
	dctx = p.claimer.ShareListings(dctx, min(claimed, p.opts.Concurrency))
	var mu sync.Mutex
	var res Result
	_ = p.each(len(recs), func(i int) error {
		rec := recs[i]
		var u *Undone
		switch rec.State {
		case store.StateRunning:
			mu.Lock()
			res.Runners = append(res.Runners, Runner{InstanceID: rec.ID, InstanceType: rec.InstanceType, UsageClass: rec.UsageClass, Zone: rec.Zone, Source: SourceAdopted})
			mu.Unlock()
		case store.StateClaimed:
			u = p.handBackAbandoned(dctx, rec, req.Repository, idleUntil, rc, reason)
		case store.StateCreated:
			derr := p.reg.Discard(dctx, rec.ID, key, reason)
			u = &Undone{InstanceID: rec.ID, Action: discarded(derr), Reason: reason, Error: errString(derr)}
		}
		if u != nil {
			mu.Lock()
			res.Undone = append(res.Undone, *u)
			mu.Unlock()
		}
		return nil
	})
	slices.SortFunc(res.Runners, func(a, b Runner) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	slices.SortFunc(res.Undone, func(a, b Undone) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	switch {
	case len(res.Runners) >= req.Count && req.Count > 0 && len(res.Undone) == 0:
		res.Status = StatusSucceeded
	default:
		res.Status, res.Outcome = StatusFailed, OutcomeTakenOver
		res.Error = fmt.Sprintf("the provision's replica stopped before it finished; taken over with %d of %d runners running", len(res.Runners), req.Count)
		res.Retryable = len(res.Runners) == 0
	}
	log.Info("abandoned provision taken over", "status", res.Status, "adopted", len(res.Runners), "undone", len(res.Undone))
	return res, nil
}

// handBackAbandoned gives back a claimed instance of an abandoned provision (discarding it when
// that fails) and says what was done.
func (p *Provisioner) handBackAbandoned(ctx context.Context, rec store.Instance, scope string, idleUntil time.Time, rc runnerclass.Resolved, reason string) *Undone {
	if rc.Queue == nil {
		derr := p.reg.Discard(ctx, rec.ID, rec.RunID, reason+"; no pool for its runner class")
		return &Undone{InstanceID: rec.ID, Action: discarded(derr), Reason: reason, Error: errString(derr)}
	}
	uerr := p.claimer.Unclaim(ctx, claim.Claimed{Instance: rec, Scope: scope}, idleUntil, rc.Queue)
	switch {
	case uerr == nil:
		return &Undone{InstanceID: rec.ID, Action: ActionReturned, Reason: reason}
	case errors.Is(uerr, store.ErrConflict):
		return nil // moved on since it was read
	}
	derr := p.reg.Discard(ctx, rec.ID, "", reason)
	return &Undone{InstanceID: rec.ID, Action: discarded(derr), Reason: reason + "; could not go back to the pool: " + uerr.Error(), Error: errString(derr)}
}
