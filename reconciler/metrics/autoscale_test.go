package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// An autoscaled pool's last decision is exported: targets beside the window's maxima, the
// forecast, and whether the goal was in conflict.
func TestAutoscaleGauges(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.Autoscale("busy", 3, 0, 3, 2, 6.5, true)
	m.Autoscale("quiet", 1, 0, 3, 2, 0, false)
	var nilMetrics *metrics.Metrics
	nilMetrics.Autoscale("busy", 1, 1, 1, 1, 1, false) // a nil *Metrics is a no-op
	out := scrape(t, m)
	for _, want := range []string{
		`runnerpool_autoscale_target{kind="hot",pool="busy"} 3`,
		`runnerpool_autoscale_target{kind="stopped",pool="busy"} 0`,
		`runnerpool_autoscale_target{kind="window_stopped",pool="busy"} 2`,
		`runnerpool_autoscale_forecast_jobs_per_minute{pool="busy"} 6.5`,
		`runnerpool_autoscale_goal_conflict{pool="busy"} 1`,
		`runnerpool_autoscale_goal_conflict{pool="quiet"} 0`,
		`runnerpool_autoscale_target{kind="hot",pool="quiet"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// An autoscaled pool's measured queue-time p95 is exported beside its goal and how many jobs it is
// the p95 of; a pool with no job measured in the window has no p95 series (not a p95 of 0 s).
func TestAutoscaleQueueTimeGauges(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.AutoscaleQueue("busy", 7500*time.Millisecond, 42, 5*time.Second)
	m.AutoscaleQueue("quiet", time.Second, 3, 5*time.Second)
	m.AutoscaleQueue("quiet", 0, 0, 5*time.Second) // the window emptied
	var nilMetrics *metrics.Metrics
	nilMetrics.AutoscaleQueue("busy", time.Second, 1, time.Second) // a nil *Metrics is a no-op
	out := scrape(t, m)
	for _, want := range []string{
		`runnerpool_autoscale_queue_time_p95_seconds{pool="busy"} 7.5`,
		`runnerpool_autoscale_queue_time_goal_seconds{pool="busy"} 5`,
		`runnerpool_autoscale_queue_time_jobs{pool="busy"} 42`,
		`runnerpool_autoscale_queue_time_goal_seconds{pool="quiet"} 5`,
		`runnerpool_autoscale_queue_time_jobs{pool="quiet"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(out, `runnerpool_autoscale_queue_time_p95_seconds{pool="quiet"}`) {
		t.Errorf("a pool without measured jobs has a p95 series:\n%s", out)
	}
}
