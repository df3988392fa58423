package store_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// A brief listing returns the same records as the full one with exactly the brief fields set, and
// skips foreign items as every listing does.
func TestBriefListings(t *testing.T) {
	t.Parallel()
	var count foreignCounter
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, db, table := newStore(t, store.WithClock(clock.Now), store.WithForeignItems(count.add))
	ctx := t.Context()
	if _, err := st.Create(ctx, store.Instance{
		ID: "i-0123456789abcdef0", State: store.StateWarming, Threshold: clock.Now().Add(time.Hour), UsageClass: "on-demand",
		InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, ResourceClass: "medium", RunnerClass: "linux", Pool: "small-x64",
		Scope: "acme", Zone: "us-east-1a", SpecHash: "v1", RunnerVersion: "2.330.0", JobAccess: "normal", Reason: "warming up",
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.PinAgentKey(ctx, "i-0123456789abcdef0", base64.StdEncoding.EncodeToString(make([]byte, ed25519.PublicKeySize))); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	full, err := st.Transition(ctx, "i-0123456789abcdef0", store.Change{From: []store.State{store.StateWarming}, To: store.StateReady,
		RequireNoRun: true, Threshold: clock.Now().Add(time.Hour), MarkPooled: true, Reason: "warmed up"})
	if err != nil {
		t.Fatal(err)
	}
	poison(t, db, table, store.AgentPK("i-attacker"), "X", nil)

	want := store.Instance{ID: full.ID, State: full.State, Threshold: full.Threshold, Pool: full.Pool, RunnerClass: full.RunnerClass, Scope: full.Scope,
		SpecHash: full.SpecHash, CreatedAt: full.CreatedAt, Version: full.Version, PooledAt: full.PooledAt, AgentKey: full.AgentKey,
		InstanceType: full.InstanceType, UsageClass: full.UsageClass, Zone: full.Zone, RunnerVersion: full.RunnerVersion, JobAccess: full.JobAccess}
	if want.AgentKey == "" || want.PooledAt.IsZero() || want.RunnerVersion == "" || want.JobAccess == "" {
		t.Fatalf("the record lacks a field to check: %+v", full)
	}
	// A pool's listing (convergence) carries neither the runner version nor the job access, and
	// the prices only when asked.
	pooled := want
	pooled.RunnerVersion, pooled.JobAccess = "", ""
	unpriced := pooled
	unpriced.InstanceType, unpriced.UsageClass, unpriced.Zone = "", "", ""
	for name, c := range map[string]struct {
		list func() ([]store.Instance, error)
		want store.Instance
	}{
		"ByPoolBrief":         {func() ([]store.Instance, error) { return st.ByPoolBrief(ctx, "small-x64", false) }, unpriced},
		"ByPoolBrief, prices": {func() ([]store.Instance, error) { return st.ByPoolBrief(ctx, "small-x64", true) }, pooled},
		"ByStateBrief":        {func() ([]store.Instance, error) { return st.ByStateBrief(ctx, store.StateReady, time.Time{}) }, want},
		"LiveBrief":           {func() ([]store.Instance, error) { return st.LiveBrief(ctx) }, want},
	} {
		got, err := c.list()
		if err != nil || len(got) != 1 || got[0] != c.want {
			t.Errorf("%s = %+v, %v;\nwant [%+v]", name, got, err, c.want)
		}
	}
	if got, err := st.ByStateBrief(ctx, store.StateReady, clock.Now()); err != nil || len(got) != 0 {
		t.Errorf("ByStateBrief(ready, expired now) = %v, %v; want none", got, err)
	}
	if count.get(store.IndexByPool) == 0 || count.get(store.IndexByState) == 0 {
		t.Errorf("foreign items not counted: %v", count.n)
	}
}

// ByPoolBrief reads a pool in ranges of ids at once: every record comes back exactly once, whatever
// its id (the ranges' bounds and ids that are not EC2's included).
func TestByPoolBriefCoversEveryID(t *testing.T) {
	t.Parallel()
	st, _, _ := newStore(t)
	ctx := t.Context()
	ids := []string{"a-1", "i-0123456789abcdef0", "i-4", "i-4fffffffffffffff0", "i-8", "i-9aaaaaaaaaaaaaaa0",
		"i-c", "i-f0000000000000000", "i-~", "z"}
	for _, id := range ids {
		if _, err := st.Create(ctx, store.Instance{ID: id, State: store.StateWarming, Pool: "p", Threshold: st.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.ByPoolBrief(ctx, "p", false)
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs []string
	for _, in := range got {
		gotIDs = append(gotIDs, in.ID)
	}
	slices.Sort(gotIDs)
	if !slices.Equal(gotIDs, ids) {
		t.Errorf("ByPoolBrief = %v, want %v", gotIDs, ids)
	}
}

// FittingIn reads several states of one class and scope in one query, and only those states
// (selection's second look: idle and ready).
func TestFittingIn(t *testing.T) {
	t.Parallel()
	st, _, _ := newStore(t)
	ctx := t.Context()
	mk := func(id string, to store.State) {
		t.Helper()
		if _, err := st.Create(ctx, store.Instance{ID: id, State: store.StateWarming, RunnerClass: "linux", Scope: "acme/app", Pool: "p", Threshold: st.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if to == store.StateWarming {
			return
		}
		if _, err := st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: to}); err != nil {
			t.Fatal(err)
		}
	}
	mk("i-ready", store.StateReady)
	mk("i-stopped", store.StateStopped)
	mk("i-warming", store.StateWarming)
	idle(t, st, "i-idle") // no class: not in by_fit
	for _, c := range []struct {
		states []store.State
		want   []string
	}{
		{[]store.State{store.StateIdle, store.StateReady}, []string{"i-ready"}},
		{[]store.State{store.StateReady, store.StateStopped}, []string{"i-ready", "i-stopped"}},
		{[]store.State{store.StateStopped}, []string{"i-stopped"}},
		{[]store.State{store.StateReady, store.StateWarming}, []string{"i-ready", "i-warming"}},
	} {
		recs, err := st.FittingIn(ctx, c.states, "linux", "ACME/app")
		var got []string
		for _, r := range recs {
			got = append(got, r.ID)
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("FittingIn(%v) = %v, %v; want %v", c.states, got, err, c.want)
		}
	}
	if _, err := st.FittingIn(ctx, []store.State{store.StateTerminated}, "linux", "acme/app"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("FittingIn(terminated) = %v, want ErrInvalid", err)
	}
}
