package scalesets_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// deleteSessionRoute is the fake's route of session deletions, as Calls counts them.
const deleteSessionRoute = "DELETE /_actions/_apis/runtime/runnerscalesets/{id}/sessions/{sid}"

// TestTakeoverAfterExpiredSession: the holder dies and the service expires its session before
// another replica takes the lease. Deleting the recorded session answers 400
// RunnerScaleSetSessionExpiredException (actions/actions-runner-controller#4285): the new holder
// forgets it and opens its own session, without a loop of deletes, and serves the jobs queued
// meanwhile. Killed right after a lease renewal (the worst case), the holder's lease in the table
// ends within LeaseTTL less the takeover budget of its death, and the new session opens within the
// budget after that: within one lease period (fails on the old code, whose lease ran a full
// LeaseTTL past the death).
func TestTakeoverAfterExpiredSession(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.gh.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 300 * time.Millisecond, SessionIdle: time.Second})
		reps := map[string]*replica{"a": e.replica(t, "a"), "b": e.replica(t, "b")}
		eventually(t, "a session held", func() bool { return e.sessionOwner() != "" })
		holder := e.sessionOwner()
		other := map[string]string{"a": "b", "b": "a"}[holder]
		// Killed right after a renewal: the worst case, its lease then runs longest past its death.
		lease := "scaleset:" + org + "/" + setName
		first, _ := e.st.CurrentLease(t.Context(), lease)
		eventually(t, "a renewal of the lease", func() bool {
			l, err := e.st.CurrentLease(t.Context(), lease)
			return err == nil && l.ExpiresAt.After(first.ExpiresAt)
		})
		reps[holder].kill()
		killed := time.Now()
		dead, err := e.st.CurrentLease(t.Context(), lease)
		if err != nil || dead.Holder != holder {
			t.Fatalf("lease after the kill: %+v, %v: want %s's", dead, err, holder)
		}
		// The dead holder's lease ends before one lease period is out, leaving the new holder
		// LeaseTTL/TakeoverBudget to open its session.
		budget := testLeaseTTL / scalesets.TakeoverBudget
		if left := dead.ExpiresAt.Sub(killed); left > testLeaseTTL-budget {
			t.Errorf("dead holder's lease runs %s past its death, want at most %s (lease period %s less the takeover budget)", left, testLeaseTTL-budget, testLeaseTTL)
		}
		eventually(t, "the dead holder's session expired at the service", func() bool { return e.sessionOwner() == "" })
		id := e.gh.QueueScaleSetJob(org, "api", 500, setName)
		eventually(t, "a new session opened by "+other, func() bool { return e.sessionOwner() == other })
		if opened := time.Now(); opened.After(dead.ExpiresAt.Add(budget)) {
			t.Errorf("new session %s after the dead holder's lease ended, want within the takeover budget %s: not within one lease period (%s) of the death",
				opened.Sub(dead.ExpiresAt), budget, testLeaseTTL)
		}
		t.Logf("new session %s after the kill (lease period %s)", time.Since(killed).Round(time.Millisecond), testLeaseTTL)
		eventually(t, fmt.Sprintf("job %d in the ledger", id), func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		if n := e.gh.Calls()[deleteSessionRoute]; n > 2 {
			t.Errorf("session deletions = %d, want at most 2: a replica never loops on a delete", n)
		}
		if n := reps[other].m.Metrics().Conflicts(setName); n != 0 {
			t.Errorf("conflicts = %d, want none", n)
		}
	})
}

// TestEvictedSessionReopened: the service forgets a live session (refresh and polls answer 404,
// actions/scaleset#123). The holder counts it lost, forgets it and opens a new one.
func TestEvictedSessionReopened(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		r := e.replica(t, "a")
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
		first, _ := e.gh.ScaleSet(org, setName)
		if !e.gh.EvictScaleSetSession(org, setName) {
			t.Fatal("no session to evict")
		}
		eventually(t, "a new session", func() bool {
			st, _ := e.gh.ScaleSet(org, setName)
			return st.Session != nil && st.Session.ID != first.Session.ID
		})
		if n := r.m.Metrics().Sessions(setName, "lost"); n != 1 {
			t.Errorf("sessions lost = %d, want 1", n)
		}
		id := e.gh.QueueScaleSetJob(org, "api", 510, setName)
		eventually(t, "the job queued on the new session", func() bool { return e.ledger(t, id) == warmpool.JobQueued })
	})
}

// TestScaleSetKeepsNameLabelAndDisablesUpdate: the scale set the listener makes carries its name as
// first label, then the configured labels (as ARC keeps it), and RunnerSetting.disableUpdate
// (runnerpool updates its runners itself); a scale set made without them is corrected.
func TestScaleSetKeepsNameLabelAndDisablesUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.set.Labels = []string{"gpu", setName, "large"}
	e.createSet(t, scaleset.Setting{})
	e.replica(t, "a")
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
	st, _ := e.gh.ScaleSet(org, setName)
	if want := []string{setName, "gpu", "large"}; !slices.Equal(st.Labels, want) || !st.DisableUpdate {
		t.Errorf("scale set labels %v, disableUpdate %v; want %v and true", st.Labels, st.DisableUpdate, want)
	}
}

// TestBatchedJobMessages: jobs that piled up while no listener ran come in batches of up to 50 job
// messages; every job reaches the ledger (acquired in one call per batch where the service needs
// it).
func TestBatchedJobMessages(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.createSet(t, scaleset.Setting{DisableUpdate: true})
		var ids []int64
		for i := range 60 {
			ids = append(ids, e.gh.QueueScaleSetJob(org, "api", int64(1000+i), setName))
		}
		if st, _ := e.gh.ScaleSet(org, setName); st.Pending != 2 {
			t.Fatalf("%d messages pending for 60 jobs, want 2 (50 and 10 job messages)", st.Pending)
		}
		e.replica(t, "a")
		for _, id := range ids {
			eventually(t, fmt.Sprintf("job %d in the ledger", id), func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		}
	})
}

// TestShortOutageKeepsSession: a blip of 503s shorter than the client's retries (4, with back-off,
// as GitHub's client) costs no session: the listener keeps polling the same one.
func TestShortOutageKeepsSession(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.retryWait = 200 * time.Millisecond // retries span about 3 s
		r := e.replica(t, "a")
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
		first, _ := e.gh.ScaleSet(org, setName)
		polls := e.gh.Calls()["GET /_actions/_queue/{id}/{sid}/messages"]
		e.gh.SetActionsServiceDown(true)
		eventually(t, "polls answered 503", func() bool { return e.gh.Calls()["GET /_actions/_queue/{id}/{sid}/messages"] > polls+1 })
		e.gh.SetActionsServiceDown(false)
		id := e.gh.QueueScaleSetJob(org, "api", 520, setName)
		eventually(t, "the job queued", func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		if now, _ := e.gh.ScaleSet(org, setName); now.Session == nil || now.Session.ID != first.Session.ID {
			t.Errorf("session %+v after the blip, want the first one (%s)", now.Session, first.Session.ID)
		}
		if n := r.m.Metrics().Sessions(setName, "created"); n != 1 {
			t.Errorf("sessions created = %d, want 1", n)
		}
	})
}
