// POST /v1/provision.
//
// Answers:
//
//	200  the runners (label, source of each); a repeated request of the same run answers the same
//	400  the body is malformed or the request is not acceptable (nothing was read or written)
//	401  403  see package auth (nothing was read or written)
//	409  another request of the same run is still provisioning it (retryable)
//	429  quota_exceeded: the provision would pass a limit (the repository's concurrent runners, the
//	     deployment's or the runner class's instance cap); nothing was provisioned (whatever was
//	     claimed went back to the pool), the body names the limit (apiv1.Quota). Retryable: the
//	     same run attempt may ask again once runners are released
//	413  415  body too large, not JSON
//	500  provision_dumped: an unexpected error; every instance it touched was terminated (final)
//	503  provision_unsuccessful: no capacity, or a runner that did not register in time; what was
//	     claimed went back to the pool, what was created was terminated (final for this run attempt:
//	     a retry answers the same; re-run the workflow). One exception, marked retryable: a
//	     provision rolled back because its request ended (this replica shut down); the same run
//	     attempt may ask again and is provisioned anew
//	503  shutting_down, unavailable: retryable, nothing was done
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/logging"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

func (a *API) provision(w http.ResponseWriter, r *http.Request) {
	id, r, ok := a.authenticate(w, r)
	if !ok {
		return
	}
	var body apiv1.ProvisionRequest
	if err := decodeJSON(r, &body, false); err != nil {
		a.writeDecodeError(w, r, err)
		return
	}
	req := toProvisionRequest(body)
	req.RepositoryID, req.Repository, req.RunID, req.Attempt, req.Event = id.RepositoryID, id.Repository, id.RunID, id.RunAttempt, id.Event
	req.Ref, req.BaseRef = id.Ref, id.BaseRef
	key := store.RunKey(req.RepositoryID, req.RunID, req.Attempt)
	r = annotate(r, slog.String(logging.KeyRunID, key))

	if !a.ops.begin() {
		a.writeError(w, r, http.StatusServiceUnavailable, apiv1.CodeShuttingDown, "this replica is shutting down; retry", true)
		return
	}
	defer a.ops.end()
	a.metrics.Inflight("provision", 1)
	defer a.metrics.Inflight("provision", -1)

	timeout := a.o.ProvisionTimeout
	if a.o.RunnerClassProvisionTimeout != nil {
		timeout = a.o.RunnerClassProvisionTimeout(r.Context(), req.RunnerClass)
	}
	ctx, cancel := a.workContext(r, timeout)
	defer cancel()
	start := a.now()
	res, err := a.o.Provisioner.Provision(ctx, req)
	elapsed := a.now().Sub(start)

	resp := toProvisionResponse(res)
	var refused *quota.RefusedError
	switch {
	case errors.As(err, &refused):
		a.metrics.ObserveProvision("quota_exceeded", elapsed, nil)
		a.metrics.QuotaRefused(refused.Kind)
		setCause(r, err)
		a.writeErrorBody(w, r, http.StatusTooManyRequests, apiv1.Error{
			Error: refused.Public(), Code: apiv1.CodeQuotaExceeded, Retryable: true, Quota: toQuota(refused),
		})

	case err == nil:
		a.answerProvisioned(ctx, w, res, resp, elapsed)

	case errors.Is(err, provision.ErrInvalid):
		a.metrics.ObserveProvision("invalid", elapsed, nil)
		a.writeError(w, r, http.StatusBadRequest, apiv1.CodeInvalidRequest, err.Error(), false)

	case errors.Is(err, provision.ErrInProgress):
		if busy := (*provision.InProgressError)(nil); errors.As(err, &busy) {
			a.retryInProgress(w, busy)
		}
		a.writeError(w, r, http.StatusConflict, apiv1.CodeInProgress, err.Error(), true)

	case errors.Is(err, provision.ErrFailed):
		a.answerProvisionFailed(ctx, w, r, res, resp, err, elapsed)

	default:
		// The run record could not be read or written (throttled, timed out, failed): a retry
		// finds the run as it is.
		a.metrics.ObserveProvision("error", elapsed, nil)
		a.writeStoreError(w, r, err)
	}
}

// answerProvisioned answers 200 with the runners of a provision that succeeded (or of an earlier
// request of the run, repeated), logs each runner and observes the provision.
func (a *API) answerProvisioned(ctx context.Context, w http.ResponseWriter, res provision.Result, resp apiv1.ProvisionResponse, elapsed time.Duration) {
	// A repeated request of the run gets the stored answer, whose timing is the first
	// request's: longer than this call took. Only the call that ran the provision counts.
	ran := elapsed >= res.Timing.Total
	sources := make([]string, len(res.Runners))
	for i, rn := range res.Runners {
		sources[i] = rn.Source
		if ran {
			a.metrics.ObserveJobStartup(rn.Source, startup(res, rn.Source))
		}
		a.log.InfoContext(ctx, "runner provisioned", logging.KeyInstanceID, rn.InstanceID, "source", rn.Source,
			"instance_type", rn.InstanceType, "zone", rn.Zone, "repeated_request", !ran)
	}
	if ran {
		a.metrics.ObserveProvision(provision.StatusSucceeded, elapsed, sources)
	} else {
		a.metrics.ObserveProvision("repeated", elapsed, nil)
	}
	writeJSON(w, http.StatusOK, resp)
}

// answerProvisionFailed answers a provision that failed and was undone: 503 provision_unsuccessful
// or 500 provision_dumped with what it did, retryable where the same attempt may ask again. It
// logs what was undone and observes the provision.
func (a *API) answerProvisionFailed(ctx context.Context, w http.ResponseWriter, r *http.Request, res provision.Result, resp apiv1.ProvisionResponse, err error, elapsed time.Duration) {
	for _, u := range res.Undone {
		a.log.InfoContext(ctx, "provision undone", logging.KeyInstanceID, u.InstanceID, "action", u.Action, "reason", u.Reason, "error", u.Error)
	}
	a.metrics.Error(metrics.ErrProvision)
	if errors.Is(err, claim.ErrRunnerVersionRefused) {
		a.metrics.RegistrationRefused(metrics.RefusedRunnerVersion)
	}
	outcome := res.Outcome
	if outcome == "" {
		outcome = "failed"
	}
	a.metrics.ObserveProvision(outcome, elapsed, nil)
	status, code := http.StatusServiceUnavailable, apiv1.CodeUnsuccessful
	if res.Outcome == "dump" {
		status, code = http.StatusInternalServerError, apiv1.CodeDumped
	}
	// Retryable: rolled back because the request ended (a shutdown); the same attempt may ask
	// again. Also when GitHub's rate limit refused it: after the wait GitHub asked for.
	retryable := res.Retryable
	if wait, ok := githubWait(err, time.Now()); ok {
		status, code, retryable = http.StatusServiceUnavailable, apiv1.CodeUnsuccessful, true
		setRetryAfter(w, wait)
	}
	setCause(r, err)
	a.writeErrorBody(w, r, status, apiv1.Error{Error: err.Error(), Code: code, Retryable: retryable, Provision: &resp})
}

// startup is how long a runner of a source took to be available to the run's jobs: a reused
// runner is registered for the run when selection ends; a started or created one when fleet
// validation (which waits for both) ends.
func startup(res provision.Result, source string) time.Duration {
	t := res.Timing
	if source == provision.SourceReused {
		return t.Select
	}
	return t.Select + t.Start + t.Create + t.Validate
}

// toQuota is the 429 answer's account of a refusal: the limit and, for the repository's own limit
// only, its current count (an instance cap's count is every repository's usage).
func toQuota(e *quota.RefusedError) *apiv1.Quota {
	q := &apiv1.Quota{Limit: e.Kind, Max: e.Max, Asked: e.Asked}
	if e.Kind == quota.LimitRepository {
		cur := e.Current
		q.Current = &cur
	}
	return q
}
