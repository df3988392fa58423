package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// autoscaleStore is fakeStore with autoscale items; a pool named "broken" fails to read.
type autoscaleStore struct {
	*fakeStore
	items map[string]store.AutoscaleState
}

func (s autoscaleStore) GetAutoscale(_ context.Context, pool string) (store.AutoscaleState, error) {
	if pool == "broken" {
		return store.AutoscaleState{}, errors.New("throttled")
	}
	st, ok := s.items[pool]
	if !ok {
		return store.AutoscaleState{}, store.ErrNotFound
	}
	return st, nil
}

// The pools answer carries each autoscaled pool's last decision, its measured queue time and goal
// among it; a pool without one, or whose
// decision cannot be read, is counted all the same.
func TestPoolsAutoscale(t *testing.T) {
	t.Parallel()
	decided := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	var as autoscaleStore
	f := newFixtureWith(t, func(o *api.Options) {
		as = autoscaleStore{fakeStore: o.Store.(*fakeStore), items: map[string]store.AutoscaleState{"busy": {
			Pool: "busy", Hot: 3, Stopped: 0, DecidedAt: decided,
			Decision: store.AutoscaleDecision{Forecast: 6, WindowHot: 3, WindowStopped: 2, Reasons: []string{"r1"}, Conflict: "the goal needs 6 hot; the schedule's max is 3",
				GoalMS: 5000, QueueP95MS: 7500, QueueJobs: 42},
		}}}
		o.Store = as
	})
	for id, pool := range map[string]string{"i-1": "busy", "i-2": "plain", "i-3": "broken"} {
		as.instances[id] = store.Instance{ID: id, State: store.StateReady, RunnerClass: "linux", Pool: pool}
	}
	code, _, body := f.call(t, http.MethodGet, "/v1/pools", "run-7", "")
	if code != http.StatusOK {
		t.Fatalf("pools: %d %s", code, body)
	}
	var resp apiv1.PoolsResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	got := map[string]*apiv1.PoolAutoscale{}
	for _, p := range resp.Pools {
		got[p.Pool] = p.Autoscale
	}
	want := map[string]*apiv1.PoolAutoscale{
		"busy": {DecidedAt: decided, Forecast: 6, TargetHot: 3, TargetStopped: 0, WindowHot: 3, WindowStopped: 2,
			Reasons: []string{"r1"}, Conflict: "the goal needs 6 hot; the schedule's max is 3", GoalMS: 5000, QueueP95MS: 7500, QueueJobs: 42},
		"plain": nil, "broken": nil,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("autoscale of pools (-want +got):\n%s", diff)
	}
}
