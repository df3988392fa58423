// Quota refusals: provisions answered 429 and warm-pool creations held back, by the limit that
// refused them (internal/quota's limit kinds).
package metrics

import "github.com/prometheus/client_golang/prometheus"

func newQuotaRefusals() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "quota_refusals_total",
		Help: "Provisions refused (429 quota_exceeded) and warm-pool creations held back by a limit: repository_runners, deployment_instances or runner_class_instances.",
	}, []string{"limit"})
}

// QuotaRefused counts one refusal by a limit.
func (m *Metrics) QuotaRefused(limit string) {
	if m == nil {
		return
	}
	m.quotaRefusals.WithLabelValues(limit).Inc()
}
