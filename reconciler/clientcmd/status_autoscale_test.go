package clientcmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// status shows each autoscaled pool's forecast, target against actual, window and reasons, and
// nothing for a pool without a decision.
func TestPrintPoolsAutoscaled(t *testing.T) {
	at := time.Date(2026, 11, 23, 9, 0, 30, 0, time.UTC)
	p := apiv1.PoolsResponse{At: at, Totals: map[string]int{}, Pools: []apiv1.PoolCount{
		{RunnerClass: "linux", Pool: "busy", States: map[string]int{"ready": 2, "stopped": 1}, Total: 3, Autoscale: &apiv1.PoolAutoscale{
			DecidedAt: at.Add(-20 * time.Second), Forecast: 6, TargetHot: 3, TargetStopped: 0, WindowHot: 3, WindowStopped: 2,
			Reasons: []string{"holding 3 hot"}, Conflict: "the goal needs 6 hot; the schedule's max is 3"}},
		{RunnerClass: "linux", Pool: "plain", States: map[string]int{"ready": 1}, Total: 1},
	}}
	var out bytes.Buffer
	printPools(&out, p)
	s := out.String()
	for _, want := range []string{
		"Autoscaled pools", "busy  6.0",
		"3 / 2", "0 / 1", "20s ago",
		"busy: goal not met: the goal needs 6 hot; the schedule's max is 3", "busy: holding 3 hot",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("status lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "plain:") {
		t.Errorf("status shows a decision for a pool without one:\n%s", s)
	}
}
