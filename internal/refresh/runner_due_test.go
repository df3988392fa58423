package refresh_test

import (
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// An idle instance whose runner is due (RunnerDue) is expired by refresh, run-less, and terminated
// by the next pass; an idle one that is not due, and a running one that is (it holds a job), are left.
func TestRefreshRetiresIdleRunnersThatAreDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 3, deployment)
	dueIdle, fineIdle, dueRunning := ids[0], ids[1], ids[2]
	ahead := e.clock.Now().Add(time.Hour)
	e.record(t, dueIdle, store.StateIdle, ahead)
	e.record(t, fineIdle, store.StateIdle, ahead)
	e.record(t, dueRunning, store.StateRunning, ahead)
	e.opts.RunnerDue = func(rec store.Instance) string {
		if rec.ID == dueIdle || rec.ID == dueRunning {
			return "its runner 2.335.0 is behind the current release 2.336.0: retired"
		}
		return ""
	}
	r := e.refresher()
	if _, err := r.Run(ctx); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	rec, err := e.st.Get(ctx, dueIdle)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Expired(e.clock.Now()) || !strings.Contains(rec.Reason, "behind the current release") {
		t.Fatalf("due idle record after a pass: %s, threshold %v, reason %q; want expired with the reason", rec.State, rec.Threshold, rec.Reason)
	}
	e.clock.Advance(time.Second)
	if _, err := r.Run(ctx); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if st := e.recordState(t, dueIdle); st != store.StateTerminated && st != store.StateTerminating {
		t.Errorf("due idle instance is %s after the second pass, want terminated", st)
	}
	for id, want := range map[string]store.State{fineIdle: store.StateIdle, dueRunning: store.StateRunning} {
		if st := e.recordState(t, id); st != want {
			t.Errorf("%s is %s, want %s", id, st, want)
		}
	}
}
