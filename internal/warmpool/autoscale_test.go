package warmpool_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// seedDemand writes a pool's autoscale item with perMinute jobs in every minute of the two hours
// around now.
func seedDemand(t *testing.T, e *env, pool string, now time.Time, perMinute int) {
	t.Helper()
	prof := &autoscale.Profile{}
	for m := now.Add(-time.Hour); m.Before(now.Add(time.Hour)); m = m.Add(time.Minute) {
		prof.Record(autoscale.SlotOf(m, time.UTC), perMinute)
	}
	if _, err := e.st.PutAutoscale(t.Context(), store.AutoscaleState{Pool: pool, Profile: prof.Encode()}, 0); err != nil {
		t.Fatal(err)
	}
}

func slotJobs(t *testing.T, st store.AutoscaleState, slot int) (minutes, jobs uint32) {
	t.Helper()
	p, err := autoscale.DecodeProfile(st.Profile)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Slots[slot]
	for b := range s.Minutes {
		minutes, jobs = minutes+s.Minutes[b], jobs+s.Jobs[b]
	}
	return minutes, jobs
}

// A pool with an autoscale block keeps what the policy decides, within its window's counts, and
// its recorded demand and targets live in its autoscale item, so a new leader continues.
func TestConvergeAutoscaledPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.clock.Set(time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC)) // a Monday
	// busy: 6 jobs a minute recorded around now; the goal (5 s, shorter than a stopped start)
	// needs 6 hot, the window allows 3: 3 hot, no stopped, the conflict reported.
	busy := e.spec("busy", 3, 2, "v1-a")
	busy.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
	seedDemand(t, e, "busy", e.clock.Now(), 6)
	// quiet: nothing recorded; the block's minimum is kept.
	quiet := e.spec("quiet", 3, 2, "v1-a")
	quiet.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, MinHot: 1, Loc: time.UTC}
	// plain: no block, the window's counts as ever.
	plain := e.spec("plain", 1, 1, "v1-a")
	tg := &targets{}
	tg.set(busy, quiet, plain)
	opts := poolsize.Options{Autoscale: poolsize.AutoscaleOptions{Store: e.st}}
	c := e.converger(t, tg.get, opts)

	want := map[string][2]int{"busy": {3, 0}, "quiet": {1, 0}, "plain": {1, 1}}
	rep := pass(t, c)
	for name, w := range want {
		pr := poolReport(t, rep, name)
		if pr.TargetHot != w[0] || pr.TargetStopped != w[1] || len(pr.Created) != w[0]+w[1] || pr.Err != nil {
			t.Fatalf("pass 1 %s: %+v; want targets %v, all created", name, pr, w)
		}
		if (pr.Autoscale != nil) != (name != "plain") {
			t.Errorf("%s: autoscale report %+v", name, pr.Autoscale)
		}
	}
	if a := poolReport(t, rep, "busy").Autoscale; a.Forecast != 6 || a.Level != 6 || a.Conflict == "" || a.WindowHot != 3 {
		t.Errorf("busy decision %+v; want forecast 6, level 6, the window's max as a conflict", a)
	}
	if a := poolReport(t, rep, "quiet").Autoscale; !slices.ContainsFunc(a.Reasons, func(r string) bool { return r == "the schedule's minimum: 1 hot, 0 stopped" }) {
		t.Errorf("quiet reasons %q", a.Reasons)
	}
	if _, err := e.st.GetAutoscale(ctx, "plain"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("plain pool has an autoscale item: %v", err)
	}

	// The loop reaches the targets once the instances warm up.
	e.warmUp(t, "busy", nil, nil)
	e.warmUp(t, "quiet", nil, nil)
	e.warmUp(t, "plain", nil, nil)
	e.clock.Add(30 * time.Second)
	rep = pass(t, c)
	for name, w := range want {
		if pr := poolReport(t, rep, name); pr.Ready != w[0] || pr.Stopped != w[1] || pr.Err != nil {
			t.Errorf("pass 2 %s: %d hot %d stopped (%v); want %v", name, pr.Ready, pr.Stopped, pr.Err, w)
		}
	}

	// Two jobs take busy's hot instances; a new leader sees them arrive after its first pass.
	c2 := e.converger(t, tg.get, opts)
	pass(t, c2)
	hot := e.records(t, "busy")[store.StateReady]
	for i, in := range hot[:2] {
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(200 + i), RunID: 9, Repository: "acme/api", Labels: []string{"pool=busy"}, Pool: "busy"}
		served(t, e, j, in.ID)
	}
	e.clock.Add(5 * time.Second)
	pr := poolReport(t, pass(t, c2), "busy")
	if pr.Autoscale.Arrived != 2 || pr.TargetHot != 3 || pr.Created == nil {
		t.Errorf("after two jobs: %+v %+v; want 2 arrived, hot replaced", pr, pr.Autoscale)
	}
	st, err := e.st.GetAutoscale(ctx, "busy")
	if err != nil || st.Count != 2 || st.Hot != 3 || st.Stopped != 0 || !st.Minute.Equal(e.clock.Now().Truncate(time.Minute)) {
		t.Fatalf("autoscale item %+v %v; want 2 counted in this minute, targets 3/0", st, err)
	}
	// The minute over, its two jobs are part of the profile.
	slot := autoscale.SlotOf(e.clock.Now(), time.UTC)
	m0, j0 := slotJobs(t, st, slot)
	e.clock.Add(time.Minute)
	pass(t, c2)
	st, err = e.st.GetAutoscale(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	if m, j := slotJobs(t, st, slot); m != m0+1 || j != j0+2 || st.Count != 0 {
		t.Errorf("slot %d: %d minutes %d jobs (count %d); want %d, %d, 0", slot, m, j, st.Count, m0+1, j0+2)
	}
}

// An unreadable autoscale item never stops the pool: it keeps its window's counts and the pass
// reports why.
func TestConvergeAutoscaleItemUnreadable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec("odd", 2, 1, "v1-a")
	spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
	// A negative count: what no reconciler writes.
	if _, err := e.st.PutAutoscale(context.Background(), store.AutoscaleState{Pool: "odd", Count: -1}, 0); err != nil {
		t.Fatal(err)
	}
	tg := &targets{}
	tg.set(spec)
	c := e.converger(t, tg.get, poolsize.Options{Autoscale: poolsize.AutoscaleOptions{Store: e.st}})
	pr := poolReport(t, pass(t, c), "odd")
	if pr.TargetHot != 2 || pr.TargetStopped != 1 || len(pr.Created) != 3 || pr.Err == nil || !errors.Is(pr.Err, store.ErrInvalid) {
		t.Errorf("%+v; want the window's 2/1 created and the item's error reported", pr)
	}
}
