package release_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/releasetest"
)

// TestReleaseScopesByTrustLevel: the pool scope a release (and a rolled-back provision's hand-back,
// the same steps) gives an instance carries the run's trust level, from the run record's event,
// when the instance keeps what a job left (its class's or its record's job access is docker or
// root): a pull request's run pools it under the repository's untrusted scope, a push's under the
// repository's, and a run record without an event (written before it was kept) counts as a pull
// request's. A class that keeps nothing pools under the repository's scope whatever the event.
func TestReleaseScopesByTrustLevel(t *testing.T) {
	t.Parallel()
	const untrusted = scope + ":untrusted"
	for _, tc := range []struct {
		name        string
		event       string
		classAccess string // the class's job access now ("": not configured)
		recAccess   string // the record's (the class's at launch)
		handBack    bool   // a rolled-back provision's hand-back of a claimed instance
		want        string
	}{
		{"docker class, pull request", "pull_request", declared.JobAccessDocker, "", false, untrusted},
		{"docker class, review of a pull request", "pull_request_review", declared.JobAccessDocker, "", false, untrusted},
		{"docker class, push", "push", declared.JobAccessDocker, "", false, scope},
		{"docker class, pull_request_target", "pull_request_target", declared.JobAccessDocker, "", false, scope},
		{"docker class, run record without an event", "", declared.JobAccessDocker, "", false, untrusted},
		{"root class, pull request", "pull_request", declared.JobAccessRoot, "", false, untrusted},
		{"docker record of a class not configured", "pull_request", "", declared.JobAccessDocker, false, untrusted},
		{"user class, pull request", "pull_request", declared.JobAccessUser, declared.JobAccessUser, false, scope},
		{"user class, no event", "", "", "", false, scope},
		{"hand-back, docker class, pull request", "pull_request", declared.JobAccessDocker, "", true, untrusted},
		{"hand-back, docker class, push", "push", declared.JobAccessDocker, "", true, scope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			e.opts.JobAccess = func(class string) (string, bool) { return tc.classAccess, tc.classAccess != "" }
			runKey := store.RunKey("4242", "8100", 1)
			if _, _, err := e.st.CreateRun(ctx, store.Run{Key: runKey, RepositoryID: "4242", Repository: scope, RunID: "8100", Attempt: 1, Event: tc.event}); err != nil {
				t.Fatalf("CreateRun: %v", err)
			}
			if run, err := e.st.GetRun(ctx, runKey); err != nil || run.Event != tc.event {
				t.Fatalf("GetRun = %+v, %v; want the event %q kept", run, err, tc.event)
			}
			id := e.launch(t, 1)[0]
			state := store.StateRunning
			if tc.handBack {
				state = store.StateClaimed
			}
			rec := e.recordWithAccess(t, id, runKey, state, tc.recAccess)
			agent := releasetest.Start(ctx, e.st, runKey, []string{id}, releasetest.Deregister)
			defer agent.Stop()
			rel := e.releaser(nil)
			if tc.handBack {
				if err := rel.HandBack(ctx, runKey, scope, rec, e.now.Add(idleTime)); err != nil {
					t.Fatalf("HandBack: %v", err)
				}
			} else if rep, err := rel.Release(ctx, runKey, idleTime); err != nil || rep.Count(release.Pooled) != 1 {
				t.Fatalf("Release = %+v, %v; want pooled", rep, err)
			}
			got, err := e.st.Get(ctx, id)
			if err != nil || got.State != store.StateIdle || got.Scope != tc.want {
				t.Fatalf("record after the release: %s scope %q (%v), want idle with scope %q", got.State, got.Scope, err, tc.want)
			}
			msgs := e.messages(t)
			if len(msgs) != 1 || msgs[0].Scope != tc.want {
				t.Errorf("pool messages %+v, want one with scope %q", msgs, tc.want)
			}
		})
	}
}

// recordWithAccess is record with the record's job access set (as the provision writes it).
func (e *env) recordWithAccess(t *testing.T, id, runID string, state store.State, access string) store.Instance {
	t.Helper()
	if access == "" {
		return e.record(t, id, runID, state)
	}
	ctx := t.Context()
	rec, err := e.st.Create(ctx, store.Instance{
		ID: id, State: store.StateCreated, RunID: runID, Threshold: e.now.Add(time.Hour),
		UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, ResourceClass: "large",
		RunnerClass: runnerClass, Scope: scope, Zone: "us-east-1a", JobAccess: access,
	})
	if err != nil {
		t.Fatalf("creating record %s: %v", id, err)
	}
	if state == store.StateRunning {
		if rec, err = e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: runID, Threshold: e.now.Add(time.Hour)}); err != nil {
			t.Fatalf("record %s -> running: %v", id, err)
		}
	}
	return rec
}
