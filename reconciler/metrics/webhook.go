// Webhook jobs left alone: queued workflow jobs whose labels look like a warm pool's but are not
// this deployment's to judge (internal/webhook: a bare dependabot label without a Dependabot pool
// here, another product's pool label naming a pool this deployment lacks).
package metrics

import "github.com/prometheus/client_golang/prometheus"

func newWebhookLeftAlone() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "webhook_jobs_left_alone_total",
		Help: "Queued workflow jobs the webhook left to other runners, neither served nor cancelled, by why: dependabot (a bare dependabot label, no Dependabot pool here) or foreign_pool (another product's label names a pool this deployment lacks).",
	}, []string{"why"})
}

// WebhookJobLeftAlone counts a queued job the webhook left alone (webhook.Config.OnLeftAlone).
func (m *Metrics) WebhookJobLeftAlone(why string) {
	if m == nil {
		return
	}
	m.webhookLeftAlone.WithLabelValues(why).Inc()
}
