package scalesets_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestListenerCreatesScaleSetAndQueuesJobs: the listener creates the scale set as configured, opens
// the session, tells the service its capacity, acquires the jobs and queues them in the ledger.
func TestListenerCreatesScaleSetAndQueuesJobs(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.replica(t, "a")
		eventually(t, "a session held by a", func() bool { return e.sessionOwner() == "a" })
		st, _ := e.gh.ScaleSet(org, setName)
		if len(st.Labels) != 1 || st.Labels[0] != setName || st.GroupID != 1 {
			t.Errorf("scale set at GitHub = %+v: want the name as its one label, in the default group", st)
		}
		id := e.gh.QueueScaleSetJob(org, "api", 41, setName)
		eventually(t, "the job in the ledger", func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		// The ledger record keeps the message's event and the ref its jobWorkflowRef names (the
		// runner cache's scope of the job's run; the message names no ref otherwise).
		ss, _ := e.gh.ScaleSet(org, setName)
		key, _ := warmpool.LedgerKey(warmpool.Job{JobID: id, ScaleSetID: ss.ID, ScaleSetJob: githubfake.ScaleSetJobID(id)}.RunKey())
		if r, err := e.st.GetRun(t.Context(), key); err != nil || r.Event != "push" || r.Ref != "refs/heads/main" {
			t.Errorf("ledger record %s: %+v, %v; want event push and ref refs/heads/main", key, r, err)
		}
		eventually(t, "the messages deleted", func() bool { st, _ := e.gh.ScaleSet(org, setName); return st.Pending == 0 })
		if st, _ := e.gh.ScaleSet(org, setName); st.MaxCapacity != 10 {
			t.Errorf("X-ScaleSetMaxCapacity = %d, want max_runners 10 (nothing serves the scale set yet)", st.MaxCapacity)
		}
	})
}

// TestTakeoverLosesNoJob: two replicas; the one holding the session is killed (no lease released,
// no session deleted). The other takes over within about one lease period, deleting the dead
// holder's session, and every job, queued before or after the crash, reaches the ledger once.
func TestTakeoverLosesNoJob(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		reps := map[string]*replica{"a": e.replica(t, "a"), "b": e.replica(t, "b")}
		eventually(t, "a session held", func() bool { return e.sessionOwner() != "" })
		holder := e.sessionOwner()
		other := map[string]string{"a": "b", "b": "a"}[holder]
		var ids []int64
		for i := range 3 {
			ids = append(ids, e.gh.QueueScaleSetJob(org, "api", int64(100+i), setName))
		}
		eventually(t, "the first jobs queued", func() bool { return e.ledger(t, ids[2]) == warmpool.JobQueued })
		killed := time.Now()
		reps[holder].kill()
		for i := range 3 {
			ids = append(ids, e.gh.QueueScaleSetJob(org, "api", int64(200+i), setName))
		}
		eventually(t, "the session taken over", func() bool { return e.sessionOwner() == other })
		t.Logf("takeover after %s (lease TTL %s)", time.Since(killed).Round(time.Millisecond), testLeaseTTL)
		for _, id := range ids {
			eventually(t, fmt.Sprintf("job %d in the ledger", id), func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		}
		// Served by the pool worker: each job once, whatever the redeliveries after the crash.
		served := e.serveAll(t, e.worker(t, reps[other].m), ids, nil)
		for _, id := range ids {
			if served[id] != 1 {
				t.Errorf("job %d served %d times, want once (served: %v)", id, served[id], served)
			}
		}
		if n := reps[other].m.Metrics().Sessions(setName, "taken_over"); n != 1 {
			t.Errorf("taken_over events = %d, want 1 (the dead holder's session deleted)", n)
		}
		if n := reps[other].m.Metrics().Conflicts(setName); n != 0 {
			t.Errorf("conflicts = %d: the new holder should delete the recorded session, not fight it", n)
		}
	})
}

// TestForeignSessionBacksOff: another process holds the scale set's session. The listener gets 409,
// backs off (metric, log line) without deleting the foreign session, and takes the scale set once
// the other process lets go.
func TestForeignSessionBacksOff(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		c, ss := e.createSet(t, scaleset.Setting{})
		foreign, err := c.CreateSession(t.Context(), ss.ID, "someone-else")
		if err != nil {
			t.Fatal(err)
		}
		r := e.replica(t, "a")
		eventually(t, "a 409 counted", func() bool { return r.m.Metrics().Conflicts(setName) >= 2 })
		if o := e.sessionOwner(); o != "someone-else" {
			t.Fatalf("session owner %q: the listener must not take a foreign session", o)
		}
		if err := c.DeleteSession(t.Context(), ss.ID, foreign.SessionID); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the session taken once free", func() bool { return e.sessionOwner() == "a" })
	})
}

// TestServiceOutage: the Actions service is down for a while (60 s in production terms, scaled);
// the listener keeps trying, reconnects, and the jobs queued meanwhile are acquired and queued.
func TestServiceOutage(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.replica(t, "a")
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
		e.gh.SetActionsServiceDown(true)
		var ids []int64
		for i := range 2 {
			ids = append(ids, e.gh.QueueScaleSetJob(org, "api", int64(300+i), setName))
		}
		time.Sleep(1500 * time.Millisecond) // the outage, scaled
		if got := e.ledger(t, ids[0]); got != "" {
			t.Fatalf("job queued during the outage: ledger %q before the service came back", got)
		}
		e.gh.SetActionsServiceDown(false)
		for _, id := range ids {
			eventually(t, fmt.Sprintf("job %d queued after the outage", id), func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		}
	})
}

// TestBadMessages: malformed, unknown and partly unknown messages are counted and deleted, and the
// listener goes on to serve the next job.
func TestBadMessages(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		r := e.replica(t, "a")
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
		bad := []struct{ typ, body string }{
			{"RunnerScaleSetSomethingNew", `[]`},
			{"RunnerScaleSetJobMessages", `not json`},
			{"RunnerScaleSetJobMessages", `[{"messageType":"JobExploded","runnerRequestId":5}]`},
			{"RunnerScaleSetJobMessages", `[{"messageType":"JobAvailable","runnerRequestId":6,"ownerName":"acme","repositoryName":"bad repo","workflowRunId":1}]`},
		}
		for _, b := range bad {
			if !e.gh.InjectScaleSetMessage(org, setName, b.typ, b.body) {
				t.Fatal("no scale set")
			}
		}
		id := e.gh.QueueScaleSetJob(org, "api", 400, setName)
		eventually(t, "the good job queued", func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		eventually(t, "every message deleted", func() bool { st, _ := e.gh.ScaleSet(org, setName); return st.Pending == 0 })
		m := r.m.Metrics()
		if m.Messages(setName, "unknown") != 1 || m.Messages(setName, "malformed") != 2 || m.Jobs(setName, "refused") != 1 {
			t.Errorf("counted unknown %d, malformed %d, refused jobs %d; want 1, 2, 1",
				m.Messages(setName, "unknown"), m.Messages(setName, "malformed"), m.Jobs(setName, "refused"))
		}
	})
}

// TestSessionRefreshed: the message queue token expires (1 s here); the listener refreshes the
// session rather than losing it, and goes on serving.
func TestSessionRefreshed(t *testing.T) {
	t.Parallel()
	shapes(t, func(t *testing.T, e *env) {
		e.gh.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 300 * time.Millisecond, QueueTokenTTL: time.Second, SessionIdle: time.Minute})
		r := e.replica(t, "a")
		eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })
		first, _ := e.gh.ScaleSet(org, setName)
		eventually(t, "two refreshes", func() bool { return r.m.Metrics().Sessions(setName, "refreshed") >= 2 })
		id := e.gh.QueueScaleSetJob(org, "api", 700, setName)
		eventually(t, "the job queued", func() bool { return e.ledger(t, id) == warmpool.JobQueued })
		if now, _ := e.gh.ScaleSet(org, setName); now.Session == nil || now.Session.ID != first.Session.ID {
			t.Errorf("session %+v, want the first one (%s) kept by refreshing it", now.Session, first.Session.ID)
		}
	})
}
