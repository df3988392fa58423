package clientcmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// status shows each autoscaled pool's forecast, target against actual, window, measured queue time
// against the goal (said when above it) and reasons, and nothing for a pool without a decision.
func TestPrintPoolsAutoscaled(t *testing.T) {
	at := time.Date(2026, 11, 23, 9, 0, 30, 0, time.UTC)
	p := apiv1.PoolsResponse{At: at, Totals: map[string]int{}, Pools: []apiv1.PoolCount{
		{RunnerClass: "linux", Pool: "busy", States: map[string]int{"ready": 2, "stopped": 1}, Total: 3, Autoscale: &apiv1.PoolAutoscale{
			DecidedAt: at.Add(-20 * time.Second), Forecast: 6, TargetHot: 3, TargetStopped: 0, WindowHot: 3, WindowStopped: 2,
			Reasons: []string{"holding 3 hot"}, Conflict: "the goal needs 6 hot; the schedule's max is 3", GoalMS: 5000, QueueP95MS: 7500, QueueJobs: 42}},
		{RunnerClass: "linux", Pool: "calm", States: map[string]int{"ready": 1}, Total: 1, Autoscale: &apiv1.PoolAutoscale{
			DecidedAt: at.Add(-5 * time.Second), TargetHot: 1, WindowHot: 3, GoalMS: 5000}},
		{RunnerClass: "linux", Pool: "plain", States: map[string]int{"ready": 1}, Total: 1},
	}}
	var out bytes.Buffer
	printPools(&out, p)
	s := out.String()
	for _, want := range []string{
		"Autoscaled pools", "busy  6.0",
		"3 / 2", "0 / 1", "20s ago",
		"busy: goal not met: the goal needs 6 hot; the schedule's max is 3", "busy: holding 3 hot",
		"QUEUE P95 / GOAL", "7.5s / 5s (42 jobs)", "busy: queue time p95 7.5s over the last hour's 42 jobs is above the goal 5s",
		"- / 5s",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("status lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "plain:") || strings.Contains(s, "calm: queue time") {
		t.Errorf("status shows a decision for a pool without one:\n%s", s)
	}
}
