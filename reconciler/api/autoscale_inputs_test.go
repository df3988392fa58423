package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// The pools answer carries what an autoscale decision read besides the recorded demand: its live
// signals, start times and prices, and where they came from.
func TestPoolsAutoscaleInputs(t *testing.T) {
	t.Parallel()
	decided := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	var as autoscaleStore
	f := newFixtureWith(t, func(o *api.Options) {
		as = autoscaleStore{fakeStore: o.Store.(*fakeStore), items: map[string]store.AutoscaleState{"busy": {
			Pool: "busy", Hot: 7, DecidedAt: decided,
			Decision: store.AutoscaleDecision{WindowHot: 10, Waiting: 7, Queued: 2, ScaleSetWaiting: 7, InFlight: 1, Runs: 3, Fanouts: 2, Prewarm: 40,
				HotStartMS: 3000, StoppedStartMS: 14000, ColdStartMS: 60250, StartsFrom: "hot median of 5, stopped default (0 samples), cold median of 6",
				HotPerHour: 0.5, StoppedPerHour: 0.0033, PricesFrom: "price book: c6i.large, the runner class's cheapest"},
		}}}
		o.Store = as
	})
	as.instances["i-1"] = store.Instance{ID: "i-1", State: store.StateReady, RunnerClass: "linux", Pool: "busy"}
	code, _, body := f.call(t, http.MethodGet, "/v1/pools", "run-7", "")
	if code != http.StatusOK {
		t.Fatalf("pools: %d %s", code, body)
	}
	var resp apiv1.PoolsResponse
	if err := json.Unmarshal(body, &resp); err != nil || len(resp.Pools) != 1 || resp.Pools[0].Autoscale == nil {
		t.Fatalf("pools %s: %v", body, err)
	}
	want := &apiv1.PoolAutoscaleInputs{Waiting: 7, Queued: 2, ScaleSetWaiting: 7, InFlight: 1, Runs: 3, Fanouts: 2, Prewarm: 40,
		HotStart: 3, StoppedStart: 14, ColdStart: 60.25, StartsFrom: "hot median of 5, stopped default (0 samples), cold median of 6",
		HotPerHour: 0.5, StoppedPerHour: 0.0033, PricesFrom: "price book: c6i.large, the runner class's cheapest"}
	if diff := cmp.Diff(want, resp.Pools[0].Autoscale.Inputs); diff != "" {
		t.Errorf("inputs (-want +got):\n%s", diff)
	}
}
