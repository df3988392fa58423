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
	kind := cacheOpKind(req.Op)
	done := func(outcome string) { a.metrics.CachePresign(kind, outcome, a.now().Sub(start)) }
	refuse := func(f *cacheRefusal) {
		done(f.outcome)
		a.writeError(w, r, f.status, f.code, f.msg, f.retry)
	}
	if kind == "unknown" {
		refuse(&cacheRefusal{metrics.CacheBadRequest, http.StatusBadRequest, apiv1.CodeBadRequest, "op: want scope, get, put, list or use", false})
		return
	}
	scope, f := a.cacheScopeOf(r.Context(), req)
	if f != nil {
		refuse(f)
		return
	}
	answer, f := a.cacheAnswer(r.Context(), req, scope)
	if f != nil {
		refuse(f)
		return
	}
	done(metrics.CacheOK)
	writeJSON(w, http.StatusOK, answer)
}

// cacheOpKind is the op as the metrics name it ("unknown" for none the API serves).
func cacheOpKind(op cache.Op) string {
	switch op {
	case cache.OpScope, cache.OpGet, cache.OpPut, cache.OpList, cache.OpUse:
		return string(op)
	}
	return "unknown"
}

// cacheRefusal is why a cache request is not served: its metrics outcome and its answer.
type cacheRefusal struct {
	outcome string
	status  int
	code    string
	msg     string
	retry   bool
}

func cacheDenied(outcome, msg string) *cacheRefusal {
	return &cacheRefusal{outcome, http.StatusForbidden, CodeCacheDenied, msg, false}
}

func cacheUnavailable(msg string) *cacheRefusal {
	return &cacheRefusal{metrics.CacheUnavailable, http.StatusServiceUnavailable, apiv1.CodeUnavailable, msg, true}
}

// cacheScopeOf is the cache scope of the run the signing instance serves, worked out from the
// control plane's own records (the instance's, and its run's or pool job's), never from the request.
func (a *API) cacheScopeOf(ctx context.Context, req cache.SignedRequest) (cache.Scope, *cacheRefusal) {
	rec, err := a.o.Store.Get(ctx, req.Instance)
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid):
		return cache.Scope{}, cacheDenied(metrics.CacheNotAgent, "no such instance")
	case err != nil:
		return cache.Scope{}, cacheUnavailable("reading the instance record failed")
	}
	if rec.AgentKey == "" || !req.Verify(rec.AgentKey, a.now()) {
		return cache.Scope{}, cacheDenied(metrics.CacheNotAgent, "not signed by the instance's agent")
	}
	if !rec.State.Live() || rec.RunID == "" || rec.RunID != req.Run {
		return cache.Scope{}, cacheDenied(metrics.CacheNoRun, "the instance serves no such run")
	}
	runKey := rec.RunID
	if k, ok := warmpool.LedgerKey(rec.RunID); ok {
		runKey = k // a pool job's instance: its job's ledger record holds what GitHub said of the run
	}
	run, err := a.o.Store.GetRun(ctx, runKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return cache.Scope{}, cacheDenied(metrics.CacheNoRun, "the instance's run has no record")
	case err != nil:
		return cache.Scope{}, cacheUnavailable("reading the run record failed")
	}
	scope := cache.ScopeOf(run.Repository, run.Event, run.Ref, run.BaseRef, a.defaultBranch(ctx, run))
	scope.Run = run.RunID
	if a.o.CacheLimits != nil {
		scope.RepositoryLimit, scope.MaxAge = a.o.CacheLimits(rec.RunnerClass)
	}
	if scope.Validate() != nil {
		return cache.Scope{}, cacheDenied(metrics.CacheNoRun, "the run has no cache scope (no ref recorded)")
	}
	return scope, nil
}

// cacheAnswer serves req within scope: the scope itself, a restore from the instance's disk
// recorded as a use (nothing presigned), or a presigned URL.
func (a *API) cacheAnswer(ctx context.Context, req cache.SignedRequest, scope cache.Scope) (cache.Answer, *cacheRefusal) {
	switch req.Op {
	case cache.OpScope:
		return cache.Answer{Scope: &scope}, nil
	case cache.OpUse:
		if !scope.Covers(cache.OpUse, req.Object) {
			return cache.Answer{}, cacheDenied(metrics.CacheDenied, "outside the run's cache scope")
		}
		if a.o.CacheUses != nil {
			go a.recordUse(context.WithoutCancel(ctx), req.Object)
		}
		return cache.Answer{}, nil
	}
	url, err := a.o.Cache.Presign(ctx, scope, cache.Request{Op: req.Op, Object: req.Object, Size: req.Size})
	switch {
	case errors.Is(err, cache.ErrDenied) || errors.Is(err, cache.ErrInvalid):
		return cache.Answer{}, cacheDenied(metrics.CacheDenied, err.Error())
	case err != nil:
		return cache.Answer{}, cacheUnavailable("presigning failed")
	}
	if req.Op == cache.OpGet && a.o.CacheUses != nil {
		go a.recordUse(context.WithoutCancel(ctx), req.Object)
	}
	if a.o.CacheRequests != nil {
		a.o.CacheRequests.Count(scope.Repository, string(req.Op))
	}
	return cache.Answer{URL: url}, nil
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
