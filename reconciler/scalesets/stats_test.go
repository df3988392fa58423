package scalesets_test

import (
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// The listener keeps its scale set's statistics in the table under the warm pool it serves, for
// the leader's autoscale wherever that runs; the jobs it queues are the pool's waiting jobs.
func TestListenerKeepsStatisticsForTheAutoscale(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.replica(t, "a")
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
		for i := range 3 {
			e.gh.QueueScaleSetJob(org, "api", int64(900+i), setName)
		}
		set, _ := e.gh.ScaleSet(org, setName)
		var got store.ScaleSetStats
		eventually(t, "statistics of 3 waiting jobs kept", func() bool {
			stats, bad, err := e.st.ScaleSetStatsOf(t.Context(), poolName)
			if err != nil || len(bad) > 0 || len(stats) != 1 {
				return false
			}
			got = stats[0]
			return got.Available+got.Assigned-got.Running == 3
		})
		if got.ScaleSet != org+"/"+setName || got.ScaleSetID != set.ID || got.At.IsZero() {
			t.Errorf("statistics %+v; want scale set %s/%s (id %d), dated", got, org, setName, set.ID)
		}
		eventually(t, "3 waiting jobs in the ledger", func() bool {
			w, err := e.st.PoolJobs(t.Context(), poolName)
			return err == nil && len(w) == 3
		})
	})
}
