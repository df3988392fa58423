package claim_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

// A claim through the second look leaves the instance's message in the queue; its run's release
// pools it again with a message of its own. A provision that receives both claims through the
// current one, drops the other, and leaves no message behind for the instance it claimed (it used
// to claim through the first, leaving the current one in the queue: a duplicate after the next
// release, and a pickup's wasted receive until then). Finding the instance dead in the earlier
// pooling does not make the request drop the current pooling's message.
func TestClaimNTakesTheCurrentPoolingsMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ins := e.idle(t, 1, nil)
	id := ins[0].ID
	e.agents(t, nil, ins, claimtest.Behaviour{})

	// Run A takes it through its record, runs, and its verified release pools it again.
	runA := runID("a")
	if _, err := e.st.ClaimPooledAt(ctx, id, runA, ins[0].PooledAt, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	none := ""
	for _, c := range []store.Change{
		{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: runA, Threshold: time.Now().Add(time.Hour)},
		{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: runA, SetRunID: &none, Threshold: time.Now().Add(time.Hour)},
	} {
		if _, err := e.st.Transition(ctx, id, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalReleased, RunID: runA}); err != nil {
		t.Fatal(err)
	}
	rec, err := e.st.MarkPooled(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.PooledAt.UnixMilli() == ins[0].PooledAt.UnixMilli() {
		t.Fatalf("two poolings marked in the same millisecond: %s", rec.PooledAt)
	}
	if err := e.q.Put(ctx, claim.MessageOf(rec), 0); err != nil {
		t.Fatal(err)
	}

	c, _ := e.claimer(testOptions())
	res, err := c.ClaimN(ctx, claim.Request{RunID: runID("b"), Scope: "acme/api", Count: 1, Queue: e.q})
	if err != nil {
		t.Fatalf("ClaimN: %v", err)
	}
	if got := ids(res.Claimed); len(got) != 1 || got[0] != id || res.Lost != 1 {
		t.Errorf("ClaimN claimed %v, lost %d; want %s claimed and the earlier pooling's message lost", got, res.Lost, id)
	}
	if left := e.drain(t); len(left) != 0 {
		t.Errorf("messages left in the pool of the instance claimed: %+v", left)
	}
}
