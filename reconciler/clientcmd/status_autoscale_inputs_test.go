package clientcmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// status shows an autoscaled pool's inputs: live signals, start times and prices with their sources.
func TestPrintPoolsAutoscaleInputs(t *testing.T) {
	at := time.Date(2026, 11, 23, 9, 0, 30, 0, time.UTC)
	p := apiv1.PoolsResponse{At: at, Totals: map[string]int{}, Pools: []apiv1.PoolCount{
		{RunnerClass: "linux", Pool: "busy", States: map[string]int{"ready": 2}, Total: 2, Autoscale: &apiv1.PoolAutoscale{
			DecidedAt: at.Add(-20 * time.Second), TargetHot: 7, WindowHot: 10,
			Inputs: &apiv1.PoolAutoscaleInputs{Waiting: 7, Queued: 2, ScaleSetWaiting: 7, InFlight: 1, Runs: 3, Fanouts: 2, Prewarm: 40,
				HotStart: 3, StoppedStart: 14, ColdStart: 60.25, StartsFrom: "hot median of 5, stopped default (0 samples), cold median of 6",
				HotPerHour: 0.5, StoppedPerHour: 0.0033, PricesFrom: "price book: c6i.large, the runner class's cheapest"}}},
	}}
	var out bytes.Buffer
	printPools(&out, p)
	s := out.String()
	for _, want := range []string{
		"busy: live: 7 waiting (2 queued, 7 by the scale sets' statistics), 1 in flight",
		"busy: runs: 3 in progress, fan-outs of 2 workflows learned, 40 hot for them",
		"busy: starts: hot 3s, stopped 14s, cold 1m0.3s (hot median of 5, stopped default (0 samples), cold median of 6)",
		"busy: prices: hot $0.5000/h, stopped $0.0033/h (price book: c6i.large, the runner class's cheapest)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("status lacks %q:\n%s", want, s)
		}
	}
}
