package metrics_test

import (
	"strings"
	"testing"

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
