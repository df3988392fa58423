package poolsize

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func minutesIn(p *autoscale.Profile) (minutes, jobs uint32) {
	for _, s := range p.Slots {
		for b := range s.Minutes {
			minutes, jobs = minutes+s.Minutes[b], jobs+s.Jobs[b]
		}
	}
	return minutes, jobs
}

// recordMinutes closes the counted minute, counts a short gap without passes as quiet minutes and
// leaves a long one (no leader) out.
func TestRecordMinutes(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		counted       time.Time
		now           time.Time
		minutes, jobs uint32
	}{
		{"first pass", time.Time{}, t0.Add(10 * time.Second), 0, 0},
		{"same minute", t0, t0.Add(50 * time.Second), 0, 0},
		{"next minute", t0, t0.Add(70 * time.Second), 1, 4},
		{"15 quiet minutes between", t0, t0.Add(16*time.Minute + time.Second), 16, 4},
		{"16 minutes without a leader", t0, t0.Add(17*time.Minute + time.Second), 1, 4},
		{"clock went back", t0, t0.Add(-time.Minute), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := store.AutoscaleState{Minute: tc.counted, Count: 4}
			prof := &autoscale.Profile{}
			recordMinutes(&st, prof, tc.now, time.UTC)
			if m, j := minutesIn(prof); m != tc.minutes || j != tc.jobs {
				t.Errorf("recorded %d minutes, %d jobs; want %d, %d", m, j, tc.minutes, tc.jobs)
			}
			if want := tc.now.Truncate(time.Minute); !st.Minute.Equal(want) {
				t.Errorf("counting minute %s, want %s", st.Minute, want)
			}
			if tc.minutes > 0 && st.Count != 0 {
				t.Errorf("count %d after closing the minute, want 0", st.Count)
			}
		})
	}
}

// Arrivals are instances newly held by a job: a run holding three instances is three jobs, a
// recycled instance taken by another job is one more, and a new converger counts from its second
// pass.
func TestArrivals(t *testing.T) {
	c := &Converger{}
	held := func(pairs ...string) []store.Instance {
		var out []store.Instance
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, store.Instance{ID: pairs[i], RunID: pairs[i+1], State: store.StateRunning})
		}
		return out
	}
	steps := []struct {
		recs []store.Instance
		want int
	}{
		{held("i-1", "job:1"), 0}, // first pass: learnt, not counted
		{held("i-1", "job:1", "i-2", "4242:7:1", "i-3", "4242:7:1", "i-4", "4242:7:1"), 3},
		{held("i-1", "job:9", "i-2", "4242:7:1"), 1},
		{append(held("i-1", "job:9"), store.Instance{ID: "i-5", RunID: "job:10", State: store.StateTerminating}), 0},
	}
	for k, s := range steps {
		if got := c.arrivals("p", s.recs); got != s.want {
			t.Errorf("pass %d: %d arrivals, want %d", k+1, got, s.want)
		}
	}
}

// memAutoscale is an in-memory AutoscaleStore.
type memAutoscale struct {
	items map[string]store.AutoscaleState
}

func (m *memAutoscale) GetAutoscale(_ context.Context, pool string) (store.AutoscaleState, error) {
	st, ok := m.items[pool]
	if !ok {
		return st, store.ErrNotFound
	}
	return st, nil
}

func (m *memAutoscale) PutAutoscale(_ context.Context, st store.AutoscaleState, v int64) (store.AutoscaleState, error) {
	if m.items[st.Pool].Version != v {
		return st, store.ErrConflict
	}
	st.Version = v + 1
	m.items[st.Pool] = st
	return st, nil
}

// The cooldown counts the time between decisions, not passes: passes a second apart hold the
// previous targets for the whole 10 minutes.
func TestAutoscaleCooldownCountsTime(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	mem := &memAutoscale{items: map[string]store.AutoscaleState{"p": {Pool: "p", Hot: 3, Stopped: 2, DecidedAt: t0, Minute: t0, Version: 1}}}
	c := &Converger{opts: Options{Autoscale: AutoscaleOptions{Store: mem}}, log: slog.New(slog.DiscardHandler)}
	for now := t0.Add(time.Second); now.Before(t0.Add(DefaultCooldown)); now = now.Add(time.Second) {
		spec := warmpool.PoolSpec{Name: "p", Hot: 3, Stopped: 2, Autoscale: &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}}
		rep := c.autoscale(t.Context(), &spec, nil, categories{}, now)
		if rep.Err != nil || spec.Hot != 3 || spec.Stopped != 2 {
			t.Fatalf("at %s: %d hot %d stopped (%v); want 3, 2 held through the cooldown", now.Sub(t0), spec.Hot, spec.Stopped, rep.Err)
		}
	}
	spec := warmpool.PoolSpec{Name: "p", Hot: 3, Stopped: 2, Autoscale: &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}}
	c.autoscale(t.Context(), &spec, nil, categories{}, t0.Add(DefaultCooldown+time.Second))
	if spec.Hot != 0 || spec.Stopped != 0 {
		t.Errorf("after the cooldown: %d hot %d stopped, want 0, 0", spec.Hot, spec.Stopped)
	}
}

// An injected policy clock drives the decisions: passes a second apart on the pass's clock but ten
// minutes apart on the policy's shrink the pool after the cooldown, and the decision's time is the
// policy's.
func TestAutoscalePolicyClock(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	policy := t0
	mem := &memAutoscale{items: map[string]store.AutoscaleState{"p": {Pool: "p", Hot: 3, Stopped: 2, DecidedAt: t0, Minute: t0, Version: 1}}}
	c := &Converger{opts: Options{Autoscale: AutoscaleOptions{Store: mem, Now: func() time.Time { return policy }}}, log: slog.New(slog.DiscardHandler)}
	pass := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for k := 1; k <= 3; k++ {
		policy, pass = t0.Add(time.Duration(k)*DefaultCooldown/2+time.Second), pass.Add(time.Second)
		spec := warmpool.PoolSpec{Name: "p", Hot: 3, Stopped: 2, Autoscale: &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}}
		if rep := c.autoscale(t.Context(), &spec, nil, categories{}, pass); rep.Err != nil {
			t.Fatalf("decision %d: %v", k, rep.Err)
		}
		if got := mem.items["p"].DecidedAt; !got.Equal(policy) {
			t.Errorf("decision %d made at %s, want the policy clock's %s", k, got, policy)
		}
		if k == 3 && (spec.Hot != 0 || spec.Stopped != 0) {
			t.Errorf("after %s of policy time: %d hot %d stopped, want 0, 0", policy.Sub(t0), spec.Hot, spec.Stopped)
		}
	}
}
