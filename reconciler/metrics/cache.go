// The runner cache (docs/cache.md): the control plane's presigns, by kind and outcome, with their
// latency, and what the agents report of their runs at release (local hits only the agent sees).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Cache presign outcomes (CachePresign).
const (
	CacheOK          = "ok"
	CacheDenied      = "denied"      // outside the run's scope, or too large
	CacheNotAgent    = "not_agent"   // not signed by the instance's pinned key, or stale
	CacheNoRun       = "no_run"      // the instance serves no such run, or the run has no ref
	CacheUnavailable = "unavailable" // the store or the signer failed
	CacheBadRequest  = "bad_request"
)

type cacheMetrics struct {
	presigns       *prometheus.CounterVec
	presignLatency *prometheus.HistogramVec
	lookups        *prometheus.CounterVec
	bytes          *prometheus.CounterVec
}

func newCacheMetrics(r prometheus.Registerer) *cacheMetrics {
	c := &cacheMetrics{
		presigns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cache_presign_requests_total",
			Help: "Requests of runner agents' cache servers to the control plane, by kind (scope, get, put, list, use) and outcome (ok, denied, not_agent, no_run, unavailable, bad_request).",
		}, []string{"kind", "outcome"}),
		presignLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "cache_presign_duration_seconds",
			Help:    "Time the control plane took to answer a cache server's request (the record and run reads and the signature), by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12),
		}, []string{"kind"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cache_lookups_total",
			Help: "Cache lookups the runners' cache servers answered, as their agents reported at each run's release: result local_hit (served from the instance's disk, no S3 request), remote_hit (from S3) or miss.",
		}, []string{"result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cache_bytes_total",
			Help: "Bytes the runners' cache servers served to jobs (direction served) and saved from jobs (saved), as their agents reported at each run's release.",
		}, []string{"direction"}),
	}
	for _, col := range []prometheus.Collector{c.presigns, c.presignLatency, c.lookups, c.bytes} {
		r.MustRegister(col)
	}
	return c
}

// CachePresign counts one request of an agent's cache server, of a kind, with its outcome.
func (m *Metrics) CachePresign(kind, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.cache.presigns.WithLabelValues(kind, outcome).Inc()
	m.cache.presignLatency.WithLabelValues(kind).Observe(d.Seconds())
}

// CacheReport adds one run's counters as its agent reported them (cache.ParseReport).
func (m *Metrics) CacheReport(localHits, remoteHits, misses, bytesServed, bytesSaved int64) {
	if m == nil {
		return
	}
	m.cache.lookups.WithLabelValues("local_hit").Add(float64(localHits))
	m.cache.lookups.WithLabelValues("remote_hit").Add(float64(remoteHits))
	m.cache.lookups.WithLabelValues("miss").Add(float64(misses))
	m.cache.bytes.WithLabelValues("served").Add(float64(bytesServed))
	m.cache.bytes.WithLabelValues("saved").Add(float64(bytesSaved))
}
