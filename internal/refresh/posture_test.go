package refresh_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// pooledWith makes id an idle, pooled instance launched under jobAccess, announced in the queue.
func (e *env) pooledWith(t *testing.T, id, jobAccess string) store.Instance {
	t.Helper()
	ctx := t.Context()
	threshold := e.clock.Now().Add(time.Hour)
	if _, err := e.st.Create(ctx, store.Instance{
		ID: id, State: store.StateCreated, RunID: "77", Threshold: threshold, JobAccess: jobAccess,
		UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "default", Scope: scope,
	}); err != nil {
		t.Fatal(err)
	}
	empty := ""
	for _, c := range []store.Change{
		{From: []store.State{store.StateCreated}, To: store.StateRunning, Threshold: threshold},
		{From: []store.State{store.StateRunning}, To: store.StateIdle, SetRunID: &empty, Threshold: threshold},
	} {
		if _, err := e.st.Transition(ctx, id, c); err != nil {
			t.Fatal(err)
		}
	}
	return e.repool(t, id)
}

// A runner class changed from job_access = "root" to "user": its instances pooled before the change
// keep the sudoers drop-in their user data wrote (and whatever a root job left). They used to be
// handed to the next run as they were; refresh expires them and drops their messages, and leaves
// the instances launched under the class's posture now. An instance whose record names no job
// access (written before launches recorded it) may have been launched as root: it is retired too
// (the old refresh left it to its threshold, which every reuse pushes back).
func TestRefreshRetiresPooledInstancesOfAnotherPosture(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 3, deployment)
	root, user, unknown := ids[0], ids[1], ids[2]
	e.pooledWith(t, root, "root")
	e.pooledWith(t, user, "user")
	e.pooledWith(t, unknown, "")
	e.opts.JobAccess = func(class string) (string, bool) { return "", class == "default" } // user, by default
	r := e.poolRefresher()
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff([]string{root, unknown}, rep.Pool.OtherPosture, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("retired (-want +got):\n%s", diff)
	}
	for _, id := range []string{root, unknown} {
		rec, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Expired(e.clock.Now()) {
			t.Errorf("instance %s launched with job access %q: threshold %s, want expired", id, rec.JobAccess, rec.Threshold)
		}
		if _, err := e.st.ClaimPooledAt(ctx, id, "run-next", rec.PooledAt, e.clock.Now().Add(time.Hour)); err == nil {
			t.Errorf("a run claimed instance %s launched with job access %q", id, rec.JobAccess)
		}
	}
	got := e.pooledAt(t)
	if _, ok := got[root]; ok || len(got[user]) != 1 {
		t.Errorf("messages by instance %v; want none of %s, one of %s", got, root, user)
	}
	if _, ok := got[unknown]; ok {
		t.Errorf("messages by instance %v; want none of %s (no job access recorded)", got, unknown)
	}
}
