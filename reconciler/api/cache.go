// POST /v1/cache/presign: the runner cache's authority (docs/cache.md). An instance's cache server
// asks for its run's scope or for a presigned S3 URL; the instance role has no bucket access. The
// request is signed by the agent's key that the control plane pinned in the instance record
// (cache.SignedRequest), and the scope is decided from the control plane's own records alone: the
// run the instance record says the instance serves, and that run's repository, event, ref and base
// ref as the provision's verified OIDC token gave them (store.Run), or for a pool job's instance as
// GitHub's signed webhook or the scale set's job message gave them (the job's ledger record,
// warmpool.LedgerKey). Nothing the request says about the run widens it.
//
// Answers:
//
//	200  cache.Answer: the scope, or the URL
//	400  the body is malformed
//	403  not the instance's agent (no pinned key, a bad or stale signature), the instance serves
//	     no such run, the run has no cache scope (no ref recorded), or the request is outside the
//	     run's scope or over the entry limit (the agent's server then serves from GitHub's cache
//	     or its disk)
//	404  the deployment has no cache
//	503  the state table or the signer failed (retryable)
package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// CodeCacheDenied answers a cache request the control plane refuses (403).
const CodeCacheDenied = "cache_denied"

func (a *API) cachePresign(w http.ResponseWriter, r *http.Request) {
	start := a.now()
	var req cache.SignedRequest
	if err := decodeJSON(r, &req, false); err != nil {
		a.metrics.CachePresign("unknown", metrics.CacheBadRequest, a.now().Sub(start))
		a.writeDecodeError(w, r, err)
		return
	}
	kind := string(req.Op)
	switch req.Op {
	case cache.OpScope, cache.OpGet, cache.OpPut, cache.OpList, cache.OpUse:
	default:
		kind = "unknown"
	}
	done := func(outcome string) { a.metrics.CachePresign(kind, outcome, a.now().Sub(start)) }
	deny := func(outcome, msg string) {
		done(outcome)
		a.writeError(w, r, http.StatusForbidden, CodeCacheDenied, msg, false)
	}
	if kind == "unknown" {
		done(metrics.CacheBadRequest)
		a.writeError(w, r, http.StatusBadRequest, apiv1.CodeBadRequest, "op: want scope, get, put, list or use", false)
		return
	}
	ctx := r.Context()
	rec, err := a.o.Store.Get(ctx, req.Instance)
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid):
		deny(metrics.CacheNotAgent, "no such instance")
		return
	case err != nil:
		done(metrics.CacheUnavailable)
		a.writeError(w, r, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "reading the instance record failed", true)
		return
	}
	if rec.AgentKey == "" || !req.Verify(rec.AgentKey, a.now()) {
		deny(metrics.CacheNotAgent, "not signed by the instance's agent")
		return
	}
	if !rec.State.Live() || rec.RunID == "" || rec.RunID != req.Run {
		deny(metrics.CacheNoRun, "the instance serves no such run")
		return
	}
	runKey := rec.RunID
	if k, ok := warmpool.LedgerKey(rec.RunID); ok {
		runKey = k // a pool job's instance: its job's ledger record holds what GitHub said of the run
	}
	run, err := a.o.Store.GetRun(ctx, runKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		deny(metrics.CacheNoRun, "the instance's run has no record")
		return
	case err != nil:
		done(metrics.CacheUnavailable)
		a.writeError(w, r, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "reading the run record failed", true)
		return
	}
	scope := cache.ScopeOf(run.Repository, run.Event, run.Ref, run.BaseRef, a.defaultBranch(ctx, run))
	scope.Run = run.RunID
	if a.o.CacheLimits != nil {
		scope.RepositoryLimit, scope.MaxAge = a.o.CacheLimits(rec.RunnerClass)
	}
	if scope.Validate() != nil {
		deny(metrics.CacheNoRun, "the run has no cache scope (no ref recorded)")
		return
	}
	if req.Op == cache.OpScope {
		done(metrics.CacheOK)
		writeJSON(w, http.StatusOK, cache.Answer{Scope: &scope})
		return
	}
	if req.Op == cache.OpUse { // a restore from the instance's disk: recorded, nothing presigned
		if !scope.Covers(cache.OpUse, req.Object) {
			deny(metrics.CacheDenied, "outside the run's cache scope")
			return
		}
		if a.o.CacheUses != nil {
			go a.recordUse(context.WithoutCancel(ctx), req.Object)
		}
		done(metrics.CacheOK)
		writeJSON(w, http.StatusOK, cache.Answer{})
		return
	}
	url, err := a.o.Cache.Presign(ctx, scope, cache.Request{Op: req.Op, Object: req.Object, Size: req.Size})
	switch {
	case errors.Is(err, cache.ErrDenied) || errors.Is(err, cache.ErrInvalid):
		deny(metrics.CacheDenied, err.Error())
		return
	case err != nil:
		done(metrics.CacheUnavailable)
		a.writeError(w, r, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "presigning failed", true)
		return
	}
	done(metrics.CacheOK)
	if req.Op == cache.OpGet && a.o.CacheUses != nil {
		go a.recordUse(context.WithoutCancel(ctx), req.Object)
	}
	if a.o.CacheRequests != nil {
		a.o.CacheRequests.Count(scope.Repository, string(req.Op))
	}
	writeJSON(w, http.StatusOK, cache.Answer{URL: url})
}

// defaultBranch is the run's recorded default branch (a pool job's webhook carries it), else the
// repository's as GitHub answers it (Options.DefaultBranches, kept for a bounded time); "" when
// neither says, and the scope then reads no default branch.
func (a *API) defaultBranch(ctx context.Context, run store.Run) string {
	if run.DefaultBranch != "" || a.o.DefaultBranches == nil || run.Ref == "" {
		return run.DefaultBranch
	}
	ctx, cancel := context.WithTimeout(ctx, defaultBranchWait)
	defer cancel()
	b, err := a.o.DefaultBranches.DefaultBranch(ctx, run.Repository)
	if err != nil {
		a.log.WarnContext(ctx, "cache scope: the repository's default branch is unknown; the run reads its own ref and base only",
			"repository", run.Repository, "err", err)
		return ""
	}
	return b
}

// recordUse records a restore of object (off the request's path: a slow bucket never slows a
// presign; a failed record only makes the entry look older to the eviction pass).
func (a *API) recordUse(ctx context.Context, object string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := a.o.CacheUses.Used(ctx, object); err != nil {
		a.log.WarnContext(ctx, "cache: recording a restore failed", "err", err)
	}
}

// defaultBranchWait bounds the lookup, so that the agent's 5 s wait for the control plane holds.
const defaultBranchWait = 2 * time.Second
