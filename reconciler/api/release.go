// POST /v1/release.
//
// The run released is always the caller's: the repository id and run id of its token, and the
// token's attempt unless the body names an earlier one. A body naming another repository's or
// another run's provision (run_key) is refused with 403 before anything is read. A release waits
// for a provision of the run that is still in progress (at most half its time limit, so the release
// itself keeps the other half); a provision still in progress past the provision deadline was left
// by a replica that stopped, and the release takes it over first (Runs.Settled: the same takeover
// as a repeated provision request's and refresh's). Then it hands every running instance of the run
// back to the pool and records what it did on the run record (GET /v1/runs shows it).
//
// Answers: 200 with what happened to each instance (also when there was nothing left to release);
// 404 run_not_found when the run never provisioned; 409 (retryable) when its provision is still in
// progress, before its deadline, when the wait ends, with Retry-After the time left to that
// deadline (by then it has finished or the retry takes it over; an earlier retry waits again); 500
// release_incomplete (retryable) when a control-plane call failed for some instance (a retry picks
// those up); 400, 401, 403, 413, 415, 503 as for provision.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/logging"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

func (a *API) release(w http.ResponseWriter, r *http.Request) {
	id, r, ok := a.authenticate(w, r)
	if !ok {
		return
	}
	attempt, idle, ok := a.releaseRequest(w, r, id)
	if !ok {
		return
	}
	key := store.RunKey(id.RepositoryID, id.RunID, attempt)
	r = annotate(r, slog.String(logging.KeyRunID, key))

	if !a.ops.begin() {
		a.writeError(w, r, http.StatusServiceUnavailable, apiv1.CodeShuttingDown, "this replica is shutting down; retry", true)
		return
	}
	defer a.ops.end()
	a.metrics.Inflight("release", 1)
	defer a.metrics.Inflight("release", -1)
	ctx, cancel := a.workContext(r, a.o.ReleaseTimeout)
	defer cancel()
	start := a.now()

	run, ok := a.settledRun(ctx, w, r, key)
	if !ok {
		return
	}
	// The key is built from the token, so the record is the caller's; checked anyway, since this
	// is the line between one repository's runners and another's.
	if err := id.CheckRun(run.RepositoryID, run.RunID); err != nil {
		a.writeAuthError(w, r, err)
		return
	}
	if idle == 0 {
		idle = a.idleTimeOf(run)
	}

	rep, err := a.o.Releaser.Release(ctx, key, idle)
	if err == nil && attempt < id.RunAttempt {
		rep, err = a.releaseRerun(ctx, id.RepositoryID, id.RunID, id.RunAttempt, idle, rep)
	}
	resp := toReleaseResponse(key, rep, a.now())
	for _, in := range rep.Instances {
		a.log.InfoContext(ctx, "instance released", logging.KeyInstanceID, in.ID, "outcome", in.Outcome, "reason", in.Reason)
	}
	if err != nil && errors.Is(err, release.ErrInvalid) {
		a.writeError(w, r, http.StatusBadRequest, apiv1.CodeInvalidRequest, err.Error(), false)
		return
	}
	if len(rep.Instances) > 0 {
		// What the release did is recorded even when part of it failed; a failure to record is
		// logged, not answered: the instances are where the report says.
		rec := apiv1.ReleaseRecord{At: resp.ReleasedAt, IdleTimeSeconds: int(idle / time.Second), Message: resp.Message, Instances: resp.Instances}
		if rerr := a.recordRelease(ctx, key, rec); rerr != nil {
			a.log.WarnContext(ctx, "release not recorded on the run", "error", rerr)
		}
	}
	a.answerRelease(w, r, rep, resp, err, start)
}

// releaseRequest reads and checks the release body: the attempt released (the token's, or an
// earlier one named by run_key or attempt) and the idle time asked for (0: the runner class's).
// It answers 400 or 403 itself and says ok false when the request is refused.
func (a *API) releaseRequest(w http.ResponseWriter, r *http.Request, id auth.Identity) (attempt int, idle time.Duration, ok bool) {
	var body apiv1.ReleaseRequest
	if err := decodeJSON(r, &body, true); err != nil {
		a.writeDecodeError(w, r, err)
		return 0, 0, false
	}
	attempt = id.RunAttempt
	if body.RunKey != "" {
		if body.Attempt != 0 {
			a.writeError(w, r, http.StatusBadRequest, apiv1.CodeInvalidRequest, "give run_key or attempt, not both", false)
			return 0, 0, false
		}
		repoID, runID, n, err := apiv1.ParseRunKey(body.RunKey)
		if err != nil {
			a.writeError(w, r, http.StatusBadRequest, apiv1.CodeInvalidRequest, err.Error(), false)
			return 0, 0, false
		}
		if err := id.CheckRun(repoID, runID); err != nil {
			a.writeAuthError(w, r, err)
			return 0, 0, false
		}
		body.Attempt = n
	}
	if body.Attempt != 0 {
		if body.Attempt < 1 || body.Attempt > id.RunAttempt {
			a.writeError(w, r, http.StatusBadRequest, apiv1.CodeInvalidRequest,
				fmt.Sprintf("attempt %d: must be between 1 and the token's run attempt %d", body.Attempt, id.RunAttempt), false)
			return 0, 0, false
		}
		attempt = body.Attempt
	}
	if body.IdleTimeSeconds != 0 {
		// Compared in seconds before converting: seconds times time.Second overflows int64 for
		// large values, and a wrapped product could pass the check.
		if body.IdleTimeSeconds < 0 || int64(body.IdleTimeSeconds) > int64(a.o.MaxIdleTime/time.Second) {
			a.writeError(w, r, http.StatusBadRequest, apiv1.CodeInvalidRequest,
				fmt.Sprintf("idle_time_seconds %d: must be between 1 and %d", body.IdleTimeSeconds, int(a.o.MaxIdleTime/time.Second)), false)
			return 0, 0, false
		}
		idle = time.Duration(body.IdleTimeSeconds) * time.Second
	}
	return attempt, idle, true
}

// settledRun is the run record of key once its provision settled, waiting at most half the
// release's time for one in progress. It answers 404, 409 or the store's error itself and says
// ok false when there is nothing to release yet.
func (a *API) settledRun(ctx context.Context, w http.ResponseWriter, r *http.Request, key string) (store.Run, bool) {
	wctx, wcancel := context.WithTimeout(ctx, a.o.ReleaseTimeout/2)
	run, err := a.o.Runs.Settled(wctx, key)
	wcancel()
	var busy *provision.InProgressError
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.writeError(w, r, http.StatusNotFound, apiv1.CodeRunNotFound, "run "+key+" has no provision to release", false)
		return run, false
	case errors.As(err, &busy):
		a.retryInProgress(w, busy)
		a.writeError(w, r, http.StatusConflict, apiv1.CodeInProgress, fmt.Sprintf("the provision of run %s is still in progress (since %s); retry: unfinished at %s, a release takes it over",
			key, busy.Since.UTC().Format(time.RFC3339), busy.TakeOverAt.UTC().Format(time.RFC3339)), true)
		return run, false
	case err != nil:
		a.writeStoreError(w, r, err)
		return run, false
	}
	return run, true
}

// answerRelease answers a release that ran, err its error: 200, 500 release_incomplete with each
// instance's outcome when part of it failed, or the store's error; and observes it.
func (a *API) answerRelease(w http.ResponseWriter, r *http.Request, rep release.Report, resp apiv1.ReleaseResponse, err error, start time.Time) {
	result := "ok"
	defer func() { a.metrics.ObserveRelease(result, a.now().Sub(start)) }()
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, resp)
	case rep.RunID != "" && len(rep.Instances) > 0:
		result = "incomplete"
		a.metrics.Error(metrics.ErrRelease)
		setCause(r, err)
		a.writeErrorBody(w, r, http.StatusInternalServerError, apiv1.Error{
			Error: "the release of some instances failed; retry to finish it (each instance's outcome is in release)", Code: apiv1.CodeReleaseIncomplete, Retryable: true, Release: &resp})
	default:
		result = "error"
		a.metrics.Error(metrics.ErrRelease)
		a.writeStoreError(w, r, err)
	}
}

// releaseRerun adds to a release of an earlier attempt's run key what the caller's own attempt
// holds when a re-run provisioned it (store.Run.ServedAttempt, provision.ServeRerun): a re-run that
// did not repeat the provision job releases the run key its outputs carried, and its jobs that
// asked for their own attempt's label ran on that attempt's runners. An attempt that provisioned
// for itself is never touched by the release of an earlier one.
func (a *API) releaseRerun(ctx context.Context, repositoryID, runID string, attempt int, idle time.Duration, rep release.Report) (release.Report, error) {
	key, ok, err := provision.RerunOwn(ctx, a.o.Store, repositoryID, runID, attempt)
	if err != nil || !ok {
		return rep, err
	}
	more, err := a.o.Releaser.Release(ctx, key, idle)
	switch {
	case len(more.Instances) > 0 && len(rep.Instances) == 0:
		rep.Message = more.Message
	case len(more.Instances) > 0:
		rep.Message += "; " + more.Message
	}
	rep.Instances = append(rep.Instances, more.Instances...)
	if len(more.Instances) > 0 {
		rec := apiv1.ReleaseRecord{At: a.now(), IdleTimeSeconds: int(idle / time.Second), Instances: toReleaseResponse(key, more, a.now()).Instances}
		if rerr := a.recordRelease(ctx, key, rec); rerr != nil {
			a.log.WarnContext(ctx, "release not recorded on the re-run's run", "error", rerr)
		}
	}
	return rep, err
}

// retryInProgress sets Retry-After on an answer about a run whose provision is in progress: the
// time left to its deadline, by which it has finished or the retry takes it over (an earlier retry
// only waits on the server again).
func (a *API) retryInProgress(w http.ResponseWriter, busy *provision.InProgressError) {
	setRetryAfter(w, max(busy.TakeOverAt.Sub(a.now()), time.Second))
}

// idleTimeOf is the default idle time of a run's runners: its runner class's, else the API's.
func (a *API) idleTimeOf(run store.Run) time.Duration {
	var req provision.Request
	if len(run.Request) > 0 && json.Unmarshal(run.Request, &req) == nil && a.o.RunnerClassIdleTime != nil {
		class := req.RunnerClass
		if class == "" {
			class = a.o.DefaultRunnerClass
		}
		if d := a.o.RunnerClassIdleTime(class); d > 0 {
			return min(d, a.o.MaxIdleTime)
		}
	}
	return a.o.IdleTime
}

// recordRelease appends a release to the run record's result (optimistic concurrency on the
// record's version; a concurrent release of the same run makes it re-read and retry).
func (a *API) recordRelease(ctx context.Context, key string, rec apiv1.ReleaseRecord) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var last error
	for range 4 {
		run, err := a.o.Store.GetRun(ctx, key)
		if err != nil {
			return err
		}
		sr, err := parseStoredResult(run.Result)
		if err != nil {
			return err
		}
		body, err := sr.withRelease(rec)
		if err != nil {
			return err
		}
		run.Result = body
		if _, last = a.o.Store.UpdateRun(ctx, run, run.Version); last == nil || !errors.Is(last, store.ErrConflict) {
			return last
		}
	}
	return last
}

// writeStoreError answers an error of the control plane (a store read or write, an AWS call):
// retryable, with a fixed message; the error itself goes to the log.
func (a *API) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	setCause(r, err)
	switch {
	case errors.Is(err, store.ErrThrottled):
		a.writeError(w, r, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "the control plane is throttled; retry", true)
	case isGitHubLimit(w, err):
		a.writeError(w, r, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "GitHub's rate limit is spent; retry after Retry-After", true)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		// Cancelled before anything of this request's making was done (or while waiting for
		// another request's provision of the run): retrying is safe.
		a.writeError(w, r, http.StatusGatewayTimeout, apiv1.CodeTimeout, "the request ran out of time; retry", true)
	default:
		a.writeError(w, r, http.StatusInternalServerError, apiv1.CodeInternal, "internal error; retry (the reconciler's log has the cause under this request_id)", true)
	}
}
