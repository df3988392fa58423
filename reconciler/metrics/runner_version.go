// Runner versions: registrations GitHub refused for the runner's version, the current runner
// release the reconciler read from GitHub, the live instances by the runner version they run, and
// how far the oldest of them is behind (GitHub stops assigning jobs to a runner 30 days after a newer
// release, at once after a security release).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RefusedRunnerVersion is the reason label of a registration refused for the runner's version.
const RefusedRunnerVersion = "runner_version"

type runnerVersionMetrics struct {
	refused      *prometheus.CounterVec
	release      *prometheus.GaugeVec
	published    prometheus.Gauge
	instances    *prometheus.GaugeVec
	oldestBehind prometheus.Gauge
	pinDeadline  *prometheus.GaugeVec
}

func newRunnerVersionMetrics(r prometheus.Registerer) *runnerVersionMetrics {
	v := &runnerVersionMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "registrations_refused_total",
			Help: "Runner registrations an agent reported refused by GitHub, by reason (runner_version: below the registration floor or too far behind the current release).",
		}, []string{"reason"}),
		release: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "runner_release_info",
			Help: "1 for the current Actions runner release the reconciler last read from GitHub's downloads endpoints.",
		}, []string{"version"}),
		published: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "runner_release_published_timestamp_seconds",
			Help: "When the current runner release was published (GitHub's published_at; when the public releases cannot be read, first seen by the reconciler), Unix seconds.",
		}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "instances_by_runner_version",
			Help: "Live instances by the Actions runner version they run.",
		}, []string{"version"}),
		oldestBehind: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "runner_oldest_behind_seconds",
			Help: "How long ago the first release newer than the oldest live instance's runner was published (0: every live runner is current). GitHub stops assigning jobs past 30 days.",
		}),
	}
	v.pinDeadline = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "runner_pin_deadline_timestamp_seconds",
		Help: "For a runner class that launches an older runner than the current release (a runner_version pin): when GitHub stops assigning its runners jobs, Unix seconds.",
	}, []string{"class", "version"})
	r.MustRegister(v.refused, v.release, v.published, v.instances, v.oldestBehind, v.pinDeadline)
	return v
}

// RegistrationRefused counts one registration GitHub refused, by reason (RefusedRunnerVersion).
func (m *Metrics) RegistrationRefused(reason string) {
	if m == nil {
		return
	}
	m.runner.refused.WithLabelValues(reason).Inc()
}

// RunnerRelease sets the current runner release and its publication time (zero: unknown).
func (m *Metrics) RunnerRelease(version string, published time.Time) {
	if m == nil {
		return
	}
	m.runner.release.Reset()
	m.runner.release.WithLabelValues(version).Set(1)
	if !published.IsZero() {
		m.runner.published.Set(float64(published.Unix()))
	}
}

// RunnerVersions sets the live instances by runner version, and how long the oldest has been behind.
func (m *Metrics) RunnerVersions(counts map[string]int, oldestBehind time.Duration) {
	if m == nil {
		return
	}
	m.runner.instances.Reset()
	for v, n := range counts {
		m.runner.instances.WithLabelValues(v).Set(float64(n))
	}
	m.runner.oldestBehind.Set(oldestBehind.Seconds())
}

// RunnerPins sets, per pinned runner class and the version it launches, when GitHub stops
// assigning its runners jobs.
func (m *Metrics) RunnerPins(deadlines map[[2]string]time.Time) {
	if m == nil {
		return
	}
	m.runner.pinDeadline.Reset()
	for k, d := range deadlines {
		m.runner.pinDeadline.WithLabelValues(k[0], k[1]).Set(float64(d.Unix()))
	}
}
