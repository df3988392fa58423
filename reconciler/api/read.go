// GET /v1/runs/{run} and GET /v1/pools.
//
// {run} is a run id (the token's attempt unless ?attempt=N) or a run key
// "<repository id>:<run id>:<attempt>" as a provision answered it. Only a token of the same
// repository and run may read it: another run is 403 other_run, another repository's key 403
// other_repository, both decided from the token before anything is read.
package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/logging"
	"golang.org/x/sync/errgroup"
)

func (a *API) run(w http.ResponseWriter, r *http.Request) {
	id, r, ok := a.authenticate(w, r)
	if !ok {
		return
	}
	key, err := a.runKeyOf(id, r)
	if err != nil {
		var ae *auth.Error
		if errors.As(err, &ae) {
			a.writeAuthError(w, r, err)
			return
		}
		a.writeError(w, r, http.StatusBadRequest, apiv1.CodeInvalidRequest, err.Error(), false)
		return
	}
	r = annotate(r, slog.String(logging.KeyRunID, key))
	run, err := a.o.Store.GetRun(r.Context(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.writeError(w, r, http.StatusNotFound, apiv1.CodeRunNotFound, "run "+key+" has no provision", false)
		return
	case err != nil:
		a.writeStoreError(w, r, err)
		return
	}
	if err := id.CheckRun(run.RepositoryID, run.RunID); err != nil {
		a.writeAuthError(w, r, err)
		return
	}
	resp, err := a.runResponse(r.Context(), run)
	if err != nil {
		a.writeStoreError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// runKeyOf resolves {run} and ?attempt against the token: the binding check happens here, before
// anything is read.
func (a *API) runKeyOf(id auth.Identity, r *http.Request) (string, error) {
	ref := r.PathValue("run")
	if strings.Contains(ref, ":") {
		repoID, runID, attempt, err := apiv1.ParseRunKey(ref)
		if err != nil {
			return "", err
		}
		if err := id.CheckRun(repoID, runID); err != nil {
			return "", err
		}
		if r.URL.Query().Has("attempt") {
			return "", errors.New("give the attempt in the run key or as ?attempt=, not both")
		}
		return store.RunKey(repoID, runID, attempt), nil
	}
	if ref == "" || len(ref) > 20 || strings.ContainsFunc(ref, func(c rune) bool { return c < '0' || c > '9' }) {
		return "", fmt.Errorf("run %q: want a run id (digits) or a run key", ref)
	}
	if err := id.CheckRun(id.RepositoryID, ref); err != nil {
		return "", err
	}
	attempt := id.RunAttempt
	if v := r.URL.Query().Get("attempt"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return "", fmt.Errorf("attempt %q: want a positive number", v)
		}
		attempt = n
	}
	return store.RunKey(id.RepositoryID, ref, attempt), nil
}

// runResponse renders a run record, with the current record of every instance it names.
func (a *API) runResponse(ctx context.Context, run store.Run) (apiv1.RunResponse, error) {
	resp := apiv1.RunResponse{
		RunKey: run.Key, RepositoryID: run.RepositoryID, Repository: run.Repository, RunID: run.RunID,
		Attempt: run.Attempt, Status: run.Status, CreatedAt: run.CreatedAt, UpdatedAt: run.UpdatedAt,
	}
	var req provision.Request
	if len(run.Request) > 0 && json.Unmarshal(run.Request, &req) == nil {
		pr := fromProvisionRequest(req)
		resp.Request = &pr
	}
	sr, err := parseStoredResult(run.Result)
	if err != nil {
		return resp, err
	}
	var ids []string
	if run.Status != provision.StatusProvisioning && len(run.Result) > 0 {
		res, err := sr.provision()
		if err != nil {
			return resp, fmt.Errorf("run %s: stored result: %w", run.Key, err)
		}
		pr := toProvisionResponse(res)
		resp.Provision = &pr
		for _, rn := range res.Runners {
			ids = append(ids, rn.InstanceID)
		}
		for _, u := range res.Undone {
			ids = append(ids, u.InstanceID)
		}
	}
	resp.Releases = publicReleases(sr.releases())
	slices.Sort(ids)
	ids = slices.Compact(ids)
	resp.Instances = make([]apiv1.InstanceStatus, len(ids))
	errs := make([]error, len(ids))
	var g errgroup.Group // every instance is read: errors are joined, none cancels the others
	g.SetLimit(8)
	for i, iid := range ids {
		g.Go(func() error {
			resp.Instances[i], errs[i] = a.instanceStatus(ctx, iid, run.Key)
			return nil
		})
	}
	_ = g.Wait()
	return resp, errors.Join(errs...)
}

// instanceStatus is an instance's current record as the run may see it: its state and reason
// while the record is the run's or nobody's, "reassigned" (without the other run's name) once
// another run owns it.
func (a *API) instanceStatus(ctx context.Context, id, runKey string) (apiv1.InstanceStatus, error) {
	in, err := a.o.Store.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return apiv1.InstanceStatus{InstanceID: id, State: "no record", Reason: "terminated before a record was written, or expired from the table"}, nil
	case err != nil:
		return apiv1.InstanceStatus{}, err
	}
	if in.RunID != "" && in.RunID != runKey {
		return apiv1.InstanceStatus{InstanceID: id, State: apiv1.StateReassigned}, nil
	}
	st := apiv1.InstanceStatus{InstanceID: id, State: string(in.State), Reason: redact(in.Reason), Threshold: in.Threshold, UpdatedAt: in.UpdatedAt}
	if in.RunID == runKey && in.State.Live() && in.AgentKey != "" {
		// A spot interruption its agent reported (signed by its pinned key) shows while the run
		// still holds the instance, not only once the release finds it.
		sig, err := a.o.Store.LastSignal(ctx, id)
		switch {
		case err == nil && in.SpotReclaimed(sig):
			st.Interrupted, st.Reason = true, redact(release.SpotReason(id, sig.Detail))
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return apiv1.InstanceStatus{}, err
		}
	}
	return st, nil
}

func (a *API) pools(w http.ResponseWriter, r *http.Request) {
	id, r, ok := a.authenticate(w, r)
	if !ok {
		return
	}
	live, err := a.o.Store.LiveBrief(r.Context())
	if err != nil {
		a.writeStoreError(w, r, err)
		return
	}
	resp := Pools(live, id.RepositoryID, a.now())
	a.autoscaled(r.Context(), resp.Pools)
	writeJSON(w, http.StatusOK, resp)
}

// autoscaled adds each warm pool's last autoscale decision, when the store keeps them. A decision
// that cannot be read is left out (and logged): the counts are answered all the same.
func (a *API) autoscaled(ctx context.Context, pools []apiv1.PoolCount) {
	as, ok := a.o.Store.(interface {
		GetAutoscale(ctx context.Context, pool string) (store.AutoscaleState, error)
	})
	if !ok {
		return
	}
	for i, p := range pools {
		if p.Pool == "" {
			continue
		}
		st, err := as.GetAutoscale(ctx, p.Pool)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			a.log.Warn("pools: autoscale decision not read", "pool", p.Pool, "err", err)
			continue
		}
		d := st.Decision
		pools[i].Autoscale = &apiv1.PoolAutoscale{
			DecidedAt: st.DecidedAt, Forecast: d.Forecast, TargetHot: st.Hot, TargetStopped: st.Stopped,
			WindowHot: d.WindowHot, WindowStopped: d.WindowStopped, Reasons: d.Reasons, Conflict: d.Conflict,
			Inputs: autoscaleInputs(d),
			GoalMS: d.GoalMS, QueueP95MS: d.QueueP95MS, QueueJobs: d.QueueJobs,
		}
	}
}

// autoscaleInputs are a decision's inputs, when it recorded them.
func autoscaleInputs(d store.AutoscaleDecision) *apiv1.PoolAutoscaleInputs {
	if d.StartsFrom == "" {
		return nil
	}
	sec := func(ms int64) float64 { return float64(ms) / 1000 }
	return &apiv1.PoolAutoscaleInputs{
		Waiting: d.Waiting, Queued: d.Queued, ScaleSetWaiting: d.ScaleSetWaiting, InFlight: d.InFlight,
		Runs: d.Runs, Fanouts: d.Fanouts, Prewarm: d.Prewarm,
		HotStart: sec(d.HotStartMS), StoppedStart: sec(d.StoppedStartMS), ColdStart: sec(d.ColdStartMS), StartsFrom: d.StartsFrom,
		HotPerHour: d.HotPerHour, StoppedPerHour: d.StoppedPerHour, PricesFrom: d.PricesFrom,
	}
}

// Pools groups live records by runner class and pool, and lists the runs of repositoryID that hold
// some ("" lists none).
func Pools(live []store.Instance, repositoryID string, at time.Time) apiv1.PoolsResponse {
	resp := apiv1.PoolsResponse{At: at.UTC(), Pools: []apiv1.PoolCount{}, Totals: map[string]int{}, Runs: []apiv1.ActiveRun{}}
	type poolKey struct{ class, pool string }
	pools := map[poolKey]*apiv1.PoolCount{}
	runs := map[string]*apiv1.ActiveRun{}
	prefix := repositoryID + ":"
	for _, in := range live {
		k := poolKey{in.RunnerClass, in.Pool}
		p := pools[k]
		if p == nil {
			p = &apiv1.PoolCount{RunnerClass: in.RunnerClass, Pool: in.Pool, States: map[string]int{}}
			pools[k] = p
		}
		p.States[string(in.State)]++
		p.Total++
		resp.Totals[string(in.State)]++
		if repositoryID != "" && strings.HasPrefix(in.RunID, prefix) {
			ar := runs[in.RunID]
			if ar == nil {
				ar = &apiv1.ActiveRun{RunKey: in.RunID, States: map[string]int{}}
				if _, runID, attempt, err := apiv1.ParseRunKey(in.RunID); err == nil {
					ar.RunID, ar.Attempt = runID, attempt
				}
				runs[in.RunID] = ar
			}
			ar.States[string(in.State)]++
			ar.Instances++
		}
	}
	for _, p := range pools {
		resp.Pools = append(resp.Pools, *p)
	}
	slices.SortFunc(resp.Pools, func(a, b apiv1.PoolCount) int {
		return cmp.Or(strings.Compare(a.RunnerClass, b.RunnerClass), strings.Compare(a.Pool, b.Pool))
	})
	for _, r := range runs {
		resp.Runs = append(resp.Runs, *r)
	}
	slices.SortFunc(resp.Runs, func(a, b apiv1.ActiveRun) int { return strings.Compare(b.RunKey, a.RunKey) })
	return resp
}
