// Webhook jobs left alone: queued workflow jobs whose labels look like a warm pool's but are not
// this deployment's to judge (internal/webhook: a bare dependabot label without a Dependabot pool
// here, another product's pool label naming a pool this deployment lacks). And the pool jobs whose
// completion never came, webhook or scale set, made up for by the backstop (pooljob/backstop.go).
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

func newCompletionsInferred() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "pool_job_completions_inferred_total",
		Help: "Pool jobs whose completion (a workflow_job completed webhook, a scale set's JobCompleted) never came, completed by the backstop because GitHub no longer lists the job's ephemeral runner, by source (webhook, scale_set) and name (the warm pool's, the scale set's).",
	}, []string{"source", "name"})
}

// PoolJobCompletionInferred counts a completion the backstop handed on
// (pooljob.BackstopConfig.OnInferred).
func (m *Metrics) PoolJobCompletionInferred(source, name string) {
	if m == nil {
		return
	}
	m.inferred.WithLabelValues(source, name).Inc()
}
