// Re-runs: a re-run's jobs that ask for a run label nobody serves any more get runners from the
// same provision again.
//
// GitHub re-runs a workflow as a new attempt of the same run. "Re-run all jobs" re-runs the
// provision job too, and its jobs ask for the new attempt's label. "Re-run failed jobs" and
// "re-run a job" re-run only those jobs and the jobs that depend on them; "jobs that aren't
// included keep their outputs from the previous attempt, which the newly run jobs can use"
// (docs.github.com, actions/managing-workflow-runs/re-running-workflows-and-jobs). So a provision
// job that succeeded is not re-run, and the re-run's jobs ask for the earlier attempt's label
// (`needs.provision.outputs.label`), whose runners that attempt's release handed back; a job that
// names `${{ github.run_id }}-${{ github.run_attempt }}` asks for the new attempt's label, which
// no provision made. Either way nothing would serve them before GitHub's 24-hour queue limit.
//
// The workflow_job webhook of such a job (signed by GitHub, with the job's repository, run id and
// run attempt) is the request: ServeRerun provisions again what the earlier provision of the same
// repository and run asked for, through Provision, the one way to get runners:
//   - a label of an earlier attempt k whose record holds no runners: record k is provisioned again
//     under its own key and label (a try after a rollback, as a repeated request of a rolled-back
//     run does), once per re-run attempt (Run.ServedAttempt); the re-run's release names attempt
//     k's run key (needs.provision.outputs.run-key) and ends them;
//   - the job's own attempt's label, when that attempt has no provision: a provision of that
//     attempt with the latest earlier attempt's request (idempotent by its run key, so a provision
//     job of the same attempt gets the same runners), marked as the re-run's (ServedAttempt), so
//     that the re-run's release of the earlier attempt's run key ends it too (reconciler/api).
//
// A label is text the workflow chose: it selects a record only among those of the webhook's own
// repository id and run id (the run key holds both), never another run's.
package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Rerun is a queued job of a re-run attempt, as its workflow_job webhook says.
type Rerun struct {
	RepositoryID string   // the webhook's repository id
	RunID        string   // the job's run id
	Attempt      int      // the job's run attempt
	Labels       []string // its runs-on labels: a label of its own run (store.RunLabel) is served
}

// Provisions provisions runners: the API's provisioner (with its quota checks), so that a re-run
// is held to what a provision request is.
type Provisions interface {
	Provision(ctx context.Context, req Request) (Result, error)
}

// RerunStore is what ServeRerun reads and writes; *store.Store satisfies it.
type RerunStore interface {
	GetRun(ctx context.Context, key string) (store.Run, error)
	UpdateRun(ctx context.Context, r store.Run, expectVersion int64) (store.Run, error)
	ByRun(ctx context.Context, runID string) ([]store.Instance, error)
}

// Outcomes of ServeRerun.
const (
	RerunProvisioned = "provisioned"  // the run's provision ran again for the re-run
	RerunServed      = "served"       // the label's runners are there, or on their way
	RerunNotOurs     = "not-provided" // no provision of the run made or could make that label
)

// ServeRerun gets runners for a re-run's job that asks for a label of its own run, unless they
// are there already. It is idempotent: every job of the same re-run asks it, and a repeated or late
// request provisions nothing twice. An error is worth retrying.
func ServeRerun(ctx context.Context, st RerunStore, prov Provisions, r Rerun) (string, error) {
	if r.Attempt < 2 {
		return RerunNotOurs, nil
	}
	for _, l := range r.Labels {
		k := store.AttemptOfLabel(strings.TrimSpace(l), r.RunID)
		switch {
		case k < 1 || k > r.Attempt:
			continue
		case k == r.Attempt:
			return rerunOwnAttempt(ctx, st, prov, r)
		}
		return rerunEarlierAttempt(ctx, st, prov, r, k)
	}
	return RerunNotOurs, nil
}

// rerunEarlierAttempt serves a job asking for attempt k's label: attempt k's provision again,
// unless its runners are still there.
func rerunEarlierAttempt(ctx context.Context, st RerunStore, prov Provisions, r Rerun, k int) (string, error) {
	key := store.RunKey(r.RepositoryID, r.RunID, k)
	run, err := st.GetRun(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return RerunNotOurs, nil
	case err != nil:
		return "", fmt.Errorf("re-run %d of run %s: %w", r.Attempt, key, err)
	case run.RepositoryID != r.RepositoryID || run.RunID != r.RunID:
		return RerunNotOurs, nil // the key holds both; checked anyway, it is the line between runs
	case run.ServedAttempt > r.Attempt, run.ServedAttempt == r.Attempt && run.Status != StatusRolledBack:
		return RerunServed, nil // provisioned for this re-run (or a later one) already
	case run.Status == StatusProvisioning:
		return "", fmt.Errorf("re-run %d of run %s: its provision is in progress: %w", r.Attempt, key, ErrInProgress)
	}
	holding, err := holdsRunners(ctx, st, key)
	if err != nil || holding {
		return RerunServed, err // the earlier attempt's release never ran: its runners serve the label
	}
	req, err := storedRequest(run)
	if err != nil {
		return "", err
	}
	if run.ServedAttempt != r.Attempt || run.Status != StatusRolledBack {
		// The record's next try is this re-run's: one conditional write, so of the re-run's jobs
		// exactly one moves it; Provision then takes the rolled-back record over and provisions.
		run.ServedAttempt, run.Status = r.Attempt, StatusRolledBack
		if _, err := st.UpdateRun(ctx, run, run.Version); errors.Is(err, store.ErrConflict) {
			return "", fmt.Errorf("re-run %d of run %s: the record changed meanwhile: %w", r.Attempt, key, err)
		} else if err != nil {
			return "", fmt.Errorf("re-run %d of run %s: %w", r.Attempt, key, err)
		}
	}
	if _, err := prov.Provision(ctx, req); err != nil {
		return "", fmt.Errorf("re-run %d of run %s: %w", r.Attempt, key, err)
	}
	return RerunProvisioned, nil
}

// rerunOwnAttempt serves a job asking for its own attempt's label, when the attempt has no
// provision: the latest earlier attempt's request, for this attempt.
func rerunOwnAttempt(ctx context.Context, st RerunStore, prov Provisions, r Rerun) (string, error) {
	own := store.RunKey(r.RepositoryID, r.RunID, r.Attempt)
	if _, err := st.GetRun(ctx, own); err == nil {
		return RerunServed, nil // the attempt's own provision ran, or runs
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("re-run %s: %w", own, err)
	}
	for k := r.Attempt - 1; k >= 1; k-- {
		run, err := st.GetRun(ctx, store.RunKey(r.RepositoryID, r.RunID, k))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("re-run %s: %w", own, err)
		}
		req, err := storedRequest(run)
		if err != nil {
			return "", err
		}
		req.Attempt = r.Attempt
		// Marked as the re-run's, so that the re-run's release, which names the earlier attempt's
		// run key (its provision job's outputs were carried), ends these runners too: the record is
		// created marked (ServesRerun), because a job may run on the runners, and the re-run's
		// release come, before Provision returns here. markServed marks a record a provision job of
		// the same attempt created meanwhile.
		req.ServesRerun = true
		if _, err := prov.Provision(ctx, req); err != nil {
			return "", fmt.Errorf("re-run %s: %w", own, err)
		}
		return RerunProvisioned, markServed(ctx, st, own, r.Attempt)
	}
	return RerunNotOurs, nil
}

// RerunOwn returns the run key a re-run attempt's jobs were provisioned under for that attempt's
// own label (rerunOwnAttempt), if any: what the attempt's release must end besides the earlier
// attempt's run key its carried outputs name. An attempt whose own provision job made its record
// is not a re-run's: ok is false.
func RerunOwn(ctx context.Context, st interface {
	GetRun(ctx context.Context, key string) (store.Run, error)
}, repositoryID, runID string, attempt int) (key string, ok bool, _ error) {
	key = store.RunKey(repositoryID, runID, attempt)
	run, err := st.GetRun(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("run %s: %w", key, err)
	}
	return key, run.ServedAttempt == run.Attempt, nil
}

// markServed records on a run record that it serves attempt's re-run (Run.ServedAttempt).
func markServed(ctx context.Context, st RerunStore, key string, attempt int) error {
	for range 3 {
		run, err := st.GetRun(ctx, key)
		if err != nil || run.ServedAttempt == attempt {
			return err
		}
		run.ServedAttempt = attempt
		if _, err = st.UpdateRun(ctx, run, run.Version); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("marking run %s as attempt %d's re-run: too many concurrent updates", key, attempt)
}

// holdsRunners says whether instances of the run key are still being provisioned or serve it.
func holdsRunners(ctx context.Context, st RerunStore, key string) (bool, error) {
	recs, err := st.ByRun(ctx, key)
	if err != nil {
		return false, fmt.Errorf("instances of run %s: %w", key, err)
	}
	for _, in := range recs {
		if in.RunID == key && (in.State == store.StateCreated || in.State == store.StateClaimed || in.State == store.StateRunning) {
			return true, nil
		}
	}
	return false, nil
}

// storedRequest is the provision request a run record keeps.
func storedRequest(run store.Run) (Request, error) {
	var req Request
	if err := json.Unmarshal(run.Request, &req); err != nil || req.RunID != run.RunID || req.RepositoryID != run.RepositoryID {
		return Request{}, fmt.Errorf("run %s: its stored request is not a provision's (%v)", run.Key, err)
	}
	return req, nil
}
