// Autoscaled warm pools: the targets the policy decided, the demand it forecast, whether the goal
// was in conflict with the bounds or the budget, and the queue time measured against the goal, as
// of the leader's last pass.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type autoscaleMetrics struct {
	target   *prometheus.GaugeVec
	forecast *prometheus.GaugeVec
	conflict *prometheus.GaugeVec
	queueP95 *prometheus.GaugeVec
	goal     *prometheus.GaugeVec
	measured *prometheus.GaugeVec
}

func newAutoscaleMetrics(r prometheus.Registerer) *autoscaleMetrics {
	a := &autoscaleMetrics{
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "autoscale_target",
			Help: "Instances the autoscaler decided an autoscaled warm pool keeps, by kind (hot, stopped; window_hot and window_stopped: the schedule window's maxima), as of this replica's last convergence pass as leader.",
		}, []string{"pool", "kind"}),
		forecast: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "autoscale_forecast_jobs_per_minute",
			Help: "Jobs per minute the autoscaler expects for an autoscaled warm pool in the current quarter-hour of the week (its recorded demand).",
		}, []string{"pool"}),
		conflict: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "autoscale_goal_conflict",
			Help: "1 when an autoscaled warm pool's queue-time goal needs more than its schedule window's maxima or its budget allow (the reason is in runnerpool status), else 0.",
		}, []string{"pool"}),
		queueP95: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "autoscale_queue_time_p95_seconds",
			Help: "The 95th percentile of an autoscaled warm pool's jobs' measured queue times (created at GitHub to the runner's registration) over the last hour, as the leader kept them; absent while none was measured.",
		}, []string{"pool"}),
		goal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "autoscale_queue_time_goal_seconds",
			Help: "An autoscaled warm pool's queue-time goal (its autoscale block's queue_time_p95).",
		}, []string{"pool"}),
		measured: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "autoscale_queue_time_jobs",
			Help: "How many jobs' queue times runnerpool_autoscale_queue_time_p95_seconds is the p95 of.",
		}, []string{"pool"}),
	}
	r.MustRegister(a.target, a.forecast, a.conflict, a.queueP95, a.goal, a.measured)
	return a
}

// Autoscale sets an autoscaled pool's last decision.
func (m *Metrics) Autoscale(pool string, hot, stopped, windowHot, windowStopped int, forecast float64, conflict bool) {
	if m == nil {
		return
	}
	for kind, v := range map[string]int{"hot": hot, "stopped": stopped, "window_hot": windowHot, "window_stopped": windowStopped} {
		m.autoscale.target.WithLabelValues(pool, kind).Set(float64(v))
	}
	m.autoscale.forecast.WithLabelValues(pool).Set(forecast)
	c := 0.0
	if conflict {
		c = 1
	}
	m.autoscale.conflict.WithLabelValues(pool).Set(c)
}

// AutoscaleQueue sets an autoscaled pool's measured queue time (p95 of jobs measured) and its goal.
func (m *Metrics) AutoscaleQueue(pool string, p95 time.Duration, jobs int, goal time.Duration) {
	if m == nil {
		return
	}
	m.autoscale.goal.WithLabelValues(pool).Set(goal.Seconds())
	m.autoscale.measured.WithLabelValues(pool).Set(float64(jobs))
	if jobs == 0 {
		m.autoscale.queueP95.DeleteLabelValues(pool)
		return
	}
	m.autoscale.queueP95.WithLabelValues(pool).Set(p95.Seconds())
}
