// Package metrics is the reconciler's Prometheus instrumentation, on a registry of its own (no
// global state, so several replicas can run in one test process): provision latency by source, job
// start-up time, pool sizes by state, AWS calls by service and operation (a smithy middleware added
// to every client), GitHub calls by route (an http.RoundTripper), claim collisions, cron runs,
// leadership, HTTP requests and errors by kind.
//
// The domain packages in internal/ know nothing of it: AWS and GitHub calls are counted at the
// client level, and everything else is observed by the reconciler around the domain calls.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "runnerpool"

// Error kinds of ErrorsTotal.
const (
	ErrAuth        = "auth"        // a 401: missing, invalid or expired token
	ErrForbidden   = "forbidden"   // a 403: valid token, not allowed
	ErrBadRequest  = "bad_request" // a 4xx other than 401/403
	ErrProvision   = "provision"   // a failed provision (unsuccessful or dumped)
	ErrRelease     = "release"     // a release with a control-plane error
	ErrRefresh     = "refresh"     // a refresh pass with errors
	ErrConverge    = "converge"    // a convergence pass with errors
	ErrLease       = "lease"       // acquiring or renewing the leader lease failed (not: lost to another)
	ErrInternal    = "internal"    // a 5xx not covered above
	ErrPanic       = "panic"       // a recovered panic
	ErrUnavailable = "unavailable" // throttled, issuer unreachable
)

// PoolSample is the number of live instances of a runner class (and warm pool) in one state.
type PoolSample struct {
	RunnerClass, Pool, State string
	Count                    int
}

// Options configure the metrics.
type Options struct {
	// PoolCounts reads the live instance counts when /metrics is scraped (cached for PoolCacheTTL).
	// Nil: no pool gauges.
	PoolCounts func(ctx context.Context) ([]PoolSample, error)
	// PoolCacheTTL bounds how often a scrape reads the table (default 15 s).
	PoolCacheTTL time.Duration
	// Replica is added as a constant label "replica" to every metric when set.
	Replica string
	Logger  *slog.Logger
}

// Metrics holds the collectors. Its methods are safe for concurrent use; a nil *Metrics is a no-op.
type Metrics struct {
	reg        *prometheus.Registry
	registerer prometheus.Registerer // reg with the replica label (extra collectors: cost.go)
	log        *slog.Logger

	provisionDuration *prometheus.HistogramVec
	provisionedTotal  *prometheus.CounterVec
	jobStartup        *prometheus.HistogramVec
	releaseDuration   *prometheus.HistogramVec
	awsCalls          *prometheus.CounterVec
	awsDuration       *prometheus.HistogramVec
	githubCalls       *prometheus.CounterVec
	collisions        *prometheus.CounterVec
	errors            *prometheus.CounterVec
	cronRuns          *prometheus.CounterVec
	cronDuration      *prometheus.HistogramVec
	leader            prometheus.Gauge
	httpRequests      *prometheus.CounterVec
	httpDuration      *prometheus.HistogramVec
	inflight          *prometheus.GaugeVec
	poolDropped       *prometheus.CounterVec
	foreignItems      *prometheus.CounterVec
	spotInterruptions prometheus.Counter
	quotaRefusals     *prometheus.CounterVec // quota.go
	webhookLeftAlone  *prometheus.CounterVec // webhook.go
	inferred          *prometheus.CounterVec // webhook.go
	githubBudget      githubBudget           // github_budget.go
	runner            *runnerVersionMetrics  // runner_version.go
	autoscale         *autoscaleMetrics      // autoscale.go
	cache             *cacheMetrics          // cache.go
}

// Buckets of durations that span a pool reuse (a second) to a cold start with registration (minutes).
var provisionBuckets = []float64{0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377}

// New returns the metrics registered on a new registry (with the Go and process collectors).
func New(o Options) *Metrics {
	if o.PoolCacheTTL <= 0 {
		o.PoolCacheTTL = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	var r prometheus.Registerer = reg
	if o.Replica != "" {
		r = prometheus.WrapRegistererWith(prometheus.Labels{"replica": o.Replica}, reg)
	}
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{reg: reg, log: o.Logger, registerer: r}
	m.initRequestMetrics()
	m.initCallMetrics()
	m.initControlMetrics()
	m.quotaRefusals = newQuotaRefusals()
	m.webhookLeftAlone = newWebhookLeftAlone()
	m.inferred = newCompletionsInferred()
	m.githubBudget = newGitHubBudget()
	for _, c := range m.githubBudget.collectors() {
		f(c)
	}
	m.runner = newRunnerVersionMetrics(r)
	m.autoscale = newAutoscaleMetrics(r)
	m.cache = newCacheMetrics(r)
	for _, c := range []prometheus.Collector{
		m.poolDropped, m.foreignItems, m.spotInterruptions, m.quotaRefusals, m.webhookLeftAlone, m.inferred,
		m.provisionDuration, m.provisionedTotal, m.jobStartup, m.releaseDuration, m.awsCalls, m.awsDuration,
		m.githubCalls, m.collisions, m.errors, m.cronRuns, m.cronDuration, m.leader, m.httpRequests, m.httpDuration, m.inflight,
	} {
		f(c)
	}
	if o.PoolCounts != nil {
		f(&poolCollector{read: o.PoolCounts, ttl: o.PoolCacheTTL, log: o.Logger, desc: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "", "pool_instances"),
			"Live instances by runner class, warm pool and state (read from the state table when scraped).",
			[]string{"runner_class", "pool", "state"}, nil)})
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// initRequestMetrics makes the API's metrics: provisions, releases, job startup, HTTP requests and
// operations in flight (New registers them).
func (m *Metrics) initRequestMetrics() {
	m.provisionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "provision_duration_seconds",
		Help:    "Provision latency, from the request to the answer, by outcome and by source: the slowest source used (reused < started < created).",
		Buckets: provisionBuckets,
	}, []string{"outcome", "source"})
	m.provisionedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "provisioned_runners_total", Help: "Runners handed to runs, by source (reused, started, created).",
	}, []string{"source"})
	m.jobStartup = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "job_startup_seconds",
		Help:    "Time from a provision request until a runner was registered for the run and could take its jobs (reused: end of selection; created: end of fleet validation), per runner, by source.",
		Buckets: provisionBuckets,
	}, []string{"source"})
	m.releaseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "release_duration_seconds", Help: "Release latency by result.", Buckets: provisionBuckets,
	}, []string{"result"})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "http_requests_total", Help: "API requests by route and status code.",
	}, []string{"route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "http_request_duration_seconds", Help: "API request latency by route.", Buckets: provisionBuckets,
	}, []string{"route"})
	m.inflight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "inflight_operations", Help: "Provisions and releases in progress on this replica.",
	}, []string{"operation"})
}

// initCallMetrics makes the metrics of the calls to AWS and GitHub, of lost conditional writes and
// of errors (New registers them).
func (m *Metrics) initCallMetrics() {
	m.awsCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "aws_calls_total",
		Help: "AWS API operations (after the SDK's retries) by service, operation and result (ok, throttled, condition_failed, error).",
	}, []string{"service", "operation", "result"})
	m.awsDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "aws_call_duration_seconds", Help: "AWS API operation latency, retries included.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"service", "operation"})
	m.githubCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "github_calls_total", Help: "GitHub REST requests by method, route template and status class (2xx, 4xx, 5xx, error).",
	}, []string{"method", "route", "status"})
	m.collisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "claim_collisions_total",
		Help: "Conditional writes to instance records that lost to a concurrent writer: kind claim (idle/ready/stopped -> claimed) or transition (any other state change).",
	}, []string{"kind"})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "errors_total", Help: "Errors by kind.",
	}, []string{"kind"})
}

// initControlMetrics makes the control loops' metrics: cron jobs, the leader lease, dropped pool
// messages, foreign items and spot interruptions (New registers them).
func (m *Metrics) initControlMetrics() {
	m.cronRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "cron_runs_total", Help: "Cron job runs by job and result (ok, error, skipped_not_leader).",
	}, []string{"job", "result"})
	m.cronDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "cron_duration_seconds", Help: "Cron job run time by job.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{"job"})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "leader", Help: "1 while this replica holds the leader lease and runs the cron jobs.",
	})
	m.poolDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "pool_messages_dropped_total",
		Help: "Pool messages a selection deleted for good, by reason: malformed (undecodable or invalid, e.g. foreign), expired, dead (record gone or no longer idle).",
	}, []string{"reason"})
	m.foreignItems = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "foreign_items_total",
		Help: "Items a listing of the state table skipped because they are not control-plane records (e.g. an agent-partition item carrying an index key), by index.",
	}, []string{"index"})
	m.spotInterruptions = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "spot_interruptions_total",
		Help: "Instances a release found reclaimed by EC2 (a spot interruption notice signed by the agent); each is terminated, never pooled.",
	})
}

// Registry is the registry holding every collector (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slogPrintf{m.log}})
}

type slogPrintf struct{ l *slog.Logger }

func (s slogPrintf) Println(v ...any) { s.l.Error("metrics: serving /metrics", "error", v) }

// ObserveProvision records one provision: its latency, outcome ("succeeded", "unsuccessful",
// "dump", "invalid", "error") and the sources of its runners.
func (m *Metrics) ObserveProvision(outcome string, d time.Duration, sources []string) {
	if m == nil {
		return
	}
	slowest := "none"
	for _, s := range sources {
		m.provisionedTotal.WithLabelValues(s).Inc()
		if sourceRank(s) > sourceRank(slowest) {
			slowest = s
		}
	}
	m.provisionDuration.WithLabelValues(outcome, slowest).Observe(d.Seconds())
}

func sourceRank(s string) int {
	switch s {
	case "reused":
		return 1
	case "started":
		return 2
	case "created":
		return 3
	case "none":
		return 0
	}
	return 4
}

// ObserveJobStartup records how long a runner of a source took to become available to its run.
func (m *Metrics) ObserveJobStartup(source string, d time.Duration) {
	if m == nil {
		return
	}
	m.jobStartup.WithLabelValues(source).Observe(d.Seconds())
}

// ObserveRelease records one release.
func (m *Metrics) ObserveRelease(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.releaseDuration.WithLabelValues(result).Observe(d.Seconds())
}

// PoolMessageDropped counts a pool message a selection dropped (pool.PickupOptions.OnDrop).
func (m *Metrics) PoolMessageDropped(reason string) {
	if m == nil {
		return
	}
	m.poolDropped.WithLabelValues(reason).Inc()
}

// ForeignItems counts items a listing of index skipped (store.WithForeignItems).
func (m *Metrics) ForeignItems(index string, n int) {
	if m == nil {
		return
	}
	m.foreignItems.WithLabelValues(index).Add(float64(n))
}

// SpotInterruption counts an instance EC2 reclaims (release.Options.OnSpotInterruption).
func (m *Metrics) SpotInterruption(string) {
	if m == nil {
		return
	}
	m.spotInterruptions.Inc()
}

// Error counts an error of a kind.
func (m *Metrics) Error(kind string) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(kind).Inc()
}

// SetLeader records whether this replica leads.
func (m *Metrics) SetLeader(leading bool) {
	if m == nil {
		return
	}
	if leading {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// CronRun records one cron job run ("ok", "error" or "skipped_not_leader").
func (m *Metrics) CronRun(job, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.cronRuns.WithLabelValues(job, result).Inc()
	if result != "skipped_not_leader" {
		m.cronDuration.WithLabelValues(job).Observe(d.Seconds())
	}
}

// HTTPRequest records one API request.
func (m *Metrics) HTTPRequest(route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
}

// Inflight adds delta to the operations in progress.
func (m *Metrics) Inflight(op string, delta float64) {
	if m == nil {
		return
	}
	m.inflight.WithLabelValues(op).Add(delta)
}

// poolCollector reads the pool counts on scrape, at most once per ttl.
type poolCollector struct {
	read func(ctx context.Context) ([]PoolSample, error)
	ttl  time.Duration
	log  *slog.Logger
	desc *prometheus.Desc

	mu      sync.Mutex
	at      time.Time
	samples []PoolSample
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.at) >= p.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		samples, err := p.read(ctx)
		cancel()
		if err != nil {
			// Keep the last good counts: a failed read must not look like empty pools.
			p.log.Warn("metrics: reading pool counts", "error", err)
		} else {
			p.samples, p.at = samples, time.Now()
		}
	}
	for _, s := range p.samples {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(s.Count), s.RunnerClass, s.Pool, s.State)
	}
}
