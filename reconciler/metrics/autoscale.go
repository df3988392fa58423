// Autoscaled warm pools: the targets the policy decided, the demand it forecast, and whether the
// goal was in conflict with the bounds or the budget, as of the leader's last pass.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

type autoscaleMetrics struct {
	target   *prometheus.GaugeVec
	forecast *prometheus.GaugeVec
	conflict *prometheus.GaugeVec
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
	}
	r.MustRegister(a.target, a.forecast, a.conflict)
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
