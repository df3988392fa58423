// The listeners' metrics: registered on the service's registry, and readable by tests.

package scalesets

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the listeners' counters.
type Metrics struct {
	conflicts *prometheus.CounterVec   // scale_set
	messages  *prometheus.CounterVec   // scale_set, outcome: handled, malformed, unknown, out_of_order
	jobs      *prometheus.CounterVec   // scale_set, type
	sessions  *prometheus.CounterVec   // scale_set, event: created, refreshed, taken_over, lost
	start     *prometheus.HistogramVec // scale_set: JobAvailable's queue time to JobStarted
	withdrawn *prometheus.CounterVec   // scope: JIT runners withdrawn: instance never came up, or job gone before any runner took it
	assigned  *prometheus.GaugeVec     // scale_set: statistics.totalAssignedJobs of the last message

	mu     sync.Mutex
	counts map[[3]string]int // the counters' values, for tests and status
}

func (m *Metrics) inc(c *prometheus.CounterVec, kind string, labels ...string) {
	c.WithLabelValues(labels...).Inc()
	key := [3]string{kind, labels[0]}
	if len(labels) > 1 {
		key[2] = labels[1]
	}
	m.mu.Lock()
	m.counts[key]++
	m.mu.Unlock()
}

func (m *Metrics) count(kind, set, label string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[[3]string{kind, set, label}]
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		counts: map[[3]string]int{},
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runnerpool_scale_set_session_conflicts_total",
			Help: "Message sessions refused with 409 because another process holds the scale set; the replica backs off.",
		}, []string{"scale_set"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runnerpool_scale_set_messages_total",
			Help: "Scale set messages by outcome: handled, or malformed, unknown and out_of_order (logged and deleted).",
		}, []string{"scale_set", "outcome"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runnerpool_scale_set_job_messages_total",
			Help: "Job messages received, by type (JobAvailable, JobAssigned, JobStarted, JobCompleted, refused).",
		}, []string{"scale_set", "type"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runnerpool_scale_set_session_events_total",
			Help: "Message session events: created, refreshed, taken_over (a dead holder's session deleted), lost.",
		}, []string{"scale_set", "event"}),
		withdrawn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runnerpool_scale_set_runners_withdrawn_total",
			Help: "Just-in-time runners of scale sets withdrawn because their instance never came up (their jobs left for the Actions service to offer again), or their job went away before any runner took it.",
		}, []string{"scope"}),
		assigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "runnerpool_scale_set_assigned_jobs",
			Help: "The Actions service's count of jobs assigned to the scale set, waiting or running (statistics.totalAssignedJobs of the last message): the demand it sees.",
		}, []string{"scale_set"}),
		start: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runnerpool_scale_set_job_start_seconds",
			Help:    "From a scale set job's queue time (JobAssigned or JobAvailable) to a runner taking it (JobStarted).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}, []string{"scale_set"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.conflicts, m.messages, m.jobs, m.sessions, m.start, m.withdrawn, m.assigned} {
			_ = reg.Register(c) // a second manager on one registry (tests) keeps the first's
		}
	}
	return m
}

// Conflicts is how many 409s the scale set's session creation got.
func (m *Metrics) Conflicts(scaleSet string) int {
	return m.count("conflicts", scaleSet, "")
}

// Messages is how many messages of the scale set ended with outcome.
func (m *Metrics) Messages(scaleSet, outcome string) int {
	return m.count("messages", scaleSet, outcome)
}

// Sessions is how many session events of a kind the scale set had.
func (m *Metrics) Sessions(scaleSet, event string) int {
	return m.count("sessions", scaleSet, event)
}

// Jobs is how many job messages of a type the scale set received.
func (m *Metrics) Jobs(scaleSet, typ string) int { return m.count("jobs", scaleSet, typ) }

// Withdrawn is how many just-in-time runners of scale sets in scope were withdrawn.
func (m *Metrics) Withdrawn(scope string) int { return m.count("withdrawn", scope, "") }
