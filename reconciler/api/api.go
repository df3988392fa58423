// Package api is the reconciler's HTTP API, version 1 (JSON bodies in package apiv1):
//
//	POST /v1/provision   runners for the caller's run (repository, run and attempt from its token)
//	POST /v1/release     return the caller's run's runners to the pool
//	GET  /v1/runs/{run}  what a provision of the caller's run did (run id, or run key)
//	GET  /v1/pools       live instance counts by runner class and state, and the caller's active runs
//	POST /v1/webhooks/github  GitHub's workflow_job webhooks, when warm pools are enabled (signed
//	                     with the webhook secret instead of an OIDC token)
//	GET  /healthz        liveness
//	GET  /readyz         readiness, with leader and lease details
//	GET  /metrics        Prometheus
//
// Every /v1 request is authenticated with the caller's GitHub Actions OIDC token before anything
// else happens: a rejected request (401, 403) reads and writes nothing. Provisions and releases run
// on a context of their own, detached from the client connection (a dropped connection must not
// roll back a provision that a retry would then find failed) and bounded by their time limit and
// the service's lifetime: on shutdown they get the drain timeout to finish, then their context is
// cancelled and the provisioner rolls back.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// Provisioner provisions runners for a run; *provision.Provisioner satisfies it.
type Provisioner interface {
	Provision(ctx context.Context, req provision.Request) (provision.Result, error)
}

// Releaser releases a run's runners; *release.Releaser satisfies it. runKey is the provision's
// store.RunKey: the records of a provision belong to it.
type Releaser interface {
	Release(ctx context.Context, runKey string, idleTime time.Duration) (release.Report, error)
}

// Runs waits for a run's provision to settle before a release: *provision.Provisioner satisfies
// it (Settled), taking over a provision left in progress past its deadline by a replica that
// stopped. A run still in progress when ctx ends is a *provision.InProgressError.
type Runs interface {
	Settled(ctx context.Context, runKey string) (store.Run, error)
}

// Store is the part of *store.Store the API reads and writes directly.
type Store interface {
	GetRun(ctx context.Context, key string) (store.Run, error)
	UpdateRun(ctx context.Context, r store.Run, expectVersion int64) (store.Run, error)
	Get(ctx context.Context, id string) (store.Instance, error)
	// LiveBrief lists the live records with the attributes store.BriefAttributes names (the pools
	// endpoint counts class, pool, state and run).
	LiveBrief(ctx context.Context) ([]store.Instance, error)
	LastSignal(ctx context.Context, id string) (store.SignalRecord, error)
}

// Authenticator verifies a request's token; *auth.Verifier satisfies it. Its errors are
// *auth.Error.
type Authenticator interface {
	Authenticate(r *http.Request) (auth.Identity, error)
}

// Options configure the API.
type Options struct {
	Provisioner Provisioner
	Releaser    Releaser
	Runs        Runs
	Store       Store
	Auth        Authenticator
	Metrics     *metrics.Metrics // nil: no metrics
	Logger      *slog.Logger

	// Work bounds every provision and release: when it is cancelled (after the drain timeout on
	// shutdown), they are cancelled and roll back. Default: never cancelled.
	Work context.Context

	MaxBodyBytes int64 // default 64 KiB
	// TrustedProxies, when set, are the only peers whose X-Request-Id is adopted (a well-formed
	// one); empty: a well-formed X-Request-Id is adopted from any caller.
	TrustedProxies   []netip.Prefix
	RequestTimeout   time.Duration // reads; default 30 s
	ProvisionTimeout time.Duration // default 10 min
	// RunnerClassProvisionTimeout, when set, is the time limit of a provision of a runner class
	// ("" the default): longer than ProvisionTimeout for a class whose boot takes longer.
	RunnerClassProvisionTimeout func(ctx context.Context, runnerClass string) time.Duration
	ReleaseTimeout              time.Duration // default 5 min

	// IdleTime is the default idle time of a release; MaxIdleTime the largest a caller may ask.
	IdleTime, MaxIdleTime time.Duration
	// RunnerClassIdleTime returns a runner class's idle time (0: none configured); may be nil.
	RunnerClassIdleTime func(runnerClass string) time.Duration
	DefaultRunnerClass  string

	// Webhook, when set, serves GitHub's webhooks at apiv1.PathWebhookGitHub (warm pools). It
	// authenticates deliveries itself (X-Hub-Signature-256) and bounds their size and time. Drain
	// does not refuse them: a delivery is a quick enqueue, and GitHub does not redeliver a failed
	// delivery by itself.
	Webhook http.Handler

	// Cache, when set, presigns the runner cache's S3 requests for the instances' agents at
	// cache.PathPresign (cache.go); nil: the deployment has no cache, and the path answers 404.
	Cache *cache.Authority
	// CacheRequests, when set, counts each presigned request by repository and kind (get, put,
	// list): the cost report's requests (*history.CacheMeter satisfies it).
	CacheRequests interface{ Count(repository, kind string) }
	// CacheUses, when set, records each presigned GET (a restore from the bucket) as a use of its
	// object, off the request's path, so the eviction pass evicts the least recently used
	// (*cachebucket.Uses: at most one write per object per hour).
	CacheUses interface {
		Used(ctx context.Context, object string) (bool, error)
	}
	// CacheLimits, when set, gives a runner class's cache limits (its cache block's
	// repository_limit_gib in bytes and max_age; 0: the defaults), which go with the scope.
	CacheLimits func(runnerClass string) (repositoryLimit int64, maxAge time.Duration)
	// DefaultBranches, when set, answers a repository's default branch for the cache scope of a
	// run that recorded none (a provisioned run: the OIDC token has no claim for it);
	// *ghaccess.Client satisfies it, keeping each answer for a bounded time. Unanswered, the scope
	// has no default branch: narrower, never wider.
	DefaultBranches interface {
		DefaultBranch(ctx context.Context, repository string) (string, error)
	}

	// Ready reports readiness details for /readyz (nil: ready unless draining).
	Ready func(ctx context.Context) apiv1.ReadyResponse

	Now func() time.Time
}

// API serves the HTTP API.
type API struct {
	o       Options
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time
	ops     tracker
}

// New checks the options and returns the API.
func New(o Options) (*API, error) {
	var missing []error
	if o.Provisioner == nil {
		missing = append(missing, errors.New("a provisioner"))
	}
	if o.Releaser == nil {
		missing = append(missing, errors.New("a releaser"))
	}
	if o.Store == nil {
		missing = append(missing, errors.New("a store"))
	}
	if o.Runs == nil {
		missing = append(missing, errors.New("runs (a provisioner's Settled)"))
	}
	if o.Auth == nil {
		missing = append(missing, errors.New("an authenticator"))
	}
	if err := errors.Join(missing...); err != nil {
		return nil, fmt.Errorf("api: missing %w", err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.RequestTimeout, 30*time.Second)
	def(&o.ProvisionTimeout, 10*time.Minute)
	def(&o.ReleaseTimeout, 5*time.Minute)
	def(&o.IdleTime, 15*time.Minute)
	def(&o.MaxIdleTime, 24*time.Hour)
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 64 << 10
	}
	if o.Work == nil {
		o.Work = context.Background()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &API{o: o, log: o.Logger, metrics: o.Metrics, now: o.Now}
	a.ops.idle = make(chan struct{})
	close(a.ops.idle)
	return a, nil
}

// Handler serves the /v1 API and, when ops is true, /healthz, /readyz and /metrics as well.
func (a *API) Handler(ops bool) http.Handler {
	mux := http.NewServeMux()
	limit := a.o.MaxBodyBytes
	mux.Handle("/v1/provision", a.wrap("provision", 0, limit, a.only(http.MethodPost, a.provision)))
	mux.Handle("/v1/release", a.wrap("release", 0, limit, a.only(http.MethodPost, a.release)))
	mux.Handle("/v1/runs/{run}", a.wrap("runs", a.o.RequestTimeout, limit, a.only(http.MethodGet, a.run)))
	mux.Handle("/v1/pools", a.wrap("pools", a.o.RequestTimeout, limit, a.only(http.MethodGet, a.pools)))
	if a.o.Cache != nil {
		mux.Handle(cache.PathPresign, a.wrap("cache_presign", a.o.RequestTimeout, limit, a.only(http.MethodPost, a.cachePresign)))
	}
	if a.o.Webhook != nil {
		// No time or size limit of the API's own: the handler has its own (GitHub gives up after
		// 10 s; payloads are larger than API bodies).
		mux.Handle(apiv1.PathWebhookGitHub, a.wrap("webhook_github", 0, 0, a.o.Webhook.ServeHTTP))
	}
	if ops {
		a.opsRoutes(mux)
	}
	mux.Handle("/", a.wrap("not_found", a.o.RequestTimeout, limit, func(w http.ResponseWriter, r *http.Request) {
		a.writeError(w, r, http.StatusNotFound, apiv1.CodeNotFound, "no such endpoint: "+r.URL.Path, false)
	}))
	return mux
}

// OpsHandler serves /healthz, /readyz and /metrics alone (for a separate listener).
func (a *API) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	a.opsRoutes(mux)
	mux.Handle("/", a.wrap("not_found", a.o.RequestTimeout, a.o.MaxBodyBytes, func(w http.ResponseWriter, r *http.Request) {
		a.writeError(w, r, http.StatusNotFound, apiv1.CodeNotFound, "no such endpoint: "+r.URL.Path, false)
	}))
	return mux
}

func (a *API) opsRoutes(mux *http.ServeMux) {
	mux.Handle(apiv1.PathHealth, a.wrap("healthz", a.o.RequestTimeout, a.o.MaxBodyBytes, a.only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})))
	mux.Handle(apiv1.PathReady, a.wrap("readyz", a.o.RequestTimeout, a.o.MaxBodyBytes, a.only(http.MethodGet, a.ready)))
	if a.metrics != nil {
		mh := a.metrics.Handler()
		mux.Handle(apiv1.PathMetrics, a.wrap("metrics", a.o.RequestTimeout, a.o.MaxBodyBytes, a.only(http.MethodGet, mh.ServeHTTP)))
	}
}

// only answers 405 (in JSON) to other methods. HEAD is served as GET.
func (a *API) only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			a.writeError(w, r, http.StatusMethodNotAllowed, apiv1.CodeMethodNotAllowed, fmt.Sprintf("%s %s: only %s", r.Method, r.URL.Path, method), false)
			return
		}
		h(w, r)
	}
}

func (a *API) ready(w http.ResponseWriter, r *http.Request) {
	resp := apiv1.ReadyResponse{Ready: true, Checks: map[string]string{}}
	if a.o.Ready != nil {
		resp = a.o.Ready(r.Context())
	}
	if a.ops.isDraining() {
		resp.Draining, resp.Ready = true, false
		resp.Checks["draining"] = "shutting down"
	}
	for k, v := range resp.Checks { // /readyz may be on the API's listener: no internals
		resp.Checks[k] = redact(v)
	}
	status := http.StatusOK
	if !resp.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, resp)
}

// Drain makes the API refuse new provisions and releases (503 shutting_down, retryable) and
// /readyz report not ready. Reads are still served.
func (a *API) Drain() { a.ops.drain() }

// Wait blocks until every provision and release in progress has answered, or ctx ends.
func (a *API) Wait(ctx context.Context) error { return a.ops.wait(ctx) }

// InFlight is the number of provisions and releases in progress.
func (a *API) InFlight() int { return a.ops.count() }

// workContext is the context of a provision or release: the request's values, not its
// cancellation; the time limit; and the service's work context.
func (a *API) workContext(r *http.Request, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
	stop := context.AfterFunc(a.o.Work, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// tracker counts operations in progress and refuses new ones once draining.
type tracker struct {
	mu       sync.Mutex
	n        int
	draining bool
	idle     chan struct{} // closed while n == 0
}

func (t *tracker) begin() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.draining {
		return false
	}
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	return true
}

func (t *tracker) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
}

func (t *tracker) drain() {
	t.mu.Lock()
	t.draining = true
	t.mu.Unlock()
}

func (t *tracker) isDraining() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.draining
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	idle := t.idle
	t.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// authenticate runs the authenticator and answers the rejection. ok is false when it answered.
func (a *API) authenticate(w http.ResponseWriter, r *http.Request) (auth.Identity, *http.Request, bool) {
	id, err := a.o.Auth.Authenticate(r)
	if err != nil {
		a.writeAuthError(w, r, err)
		return auth.Identity{}, r, false
	}
	r = annotate(r, slog.String("repository", id.Repository))
	return id, r, true
}

// writeAuthError answers an *auth.Error (401, 403, 503) with its status and code.
func (a *API) writeAuthError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *auth.Error
	if !errors.As(err, &ae) {
		setCause(r, err)
		a.writeError(w, r, http.StatusInternalServerError, apiv1.CodeInternal, "internal error authenticating the request", true)
		return
	}
	// The message is the rejection's own; what the verifier found (and the issuer's addresses)
	// goes to the log.
	setCause(r, ae.Err)
	a.writeError(w, r, ae.Status, ae.Code, ae.Msg, ae.Status == http.StatusServiceUnavailable)
}
