package poolsize

import (
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// The records a pass looks after whatever the pool's configuration says: a removed pool is
// converged, and found by the search for removed pools, while it has one of them; a held (broken)
// pool's pending jobs are promoted or ended. A run's record never keeps a removed pool.
func TestTendedRecords(t *testing.T) {
	t.Parallel()
	job, run := warmpool.JobRunPrefix+"100", "run:acme/api:7"
	for _, tc := range []struct {
		state          store.State
		runID          string
		tended, onHold bool // onHold: a pending job, looked after in a held pool
	}{
		{state: store.StateWarming, tended: true},
		{state: store.StateReady, tended: true},
		{state: store.StateStopped, tended: true},
		{state: store.StateTerminating, tended: true},
		{state: store.StateClaimed, runID: job, tended: true, onHold: true},
		{state: store.StateCreated, runID: job, tended: true, onHold: true},
		{state: store.StateRunning, runID: job, tended: true},
		// A step-driven run's instance that once was warm: its release and refresh end it.
		{state: store.StateClaimed, runID: run},
		{state: store.StateRunning, runID: run},
		{state: store.StateIdle},
		{state: store.StateTerminated},
		{state: store.StateTerminated, runID: job},
	} {
		in := store.Instance{ID: "i-0123456789abcdef0", State: tc.state, RunID: tc.runID, Pool: "gone"}
		if got := tended(in); got != tc.tended {
			t.Errorf("tended(%s %q) = %v, want %v", tc.state, tc.runID, got, tc.tended)
		}
		if got := pendingJob(in); got != tc.onHold {
			t.Errorf("pendingJob(%s %q) = %v, want %v", tc.state, tc.runID, got, tc.onHold)
		}
	}
}
