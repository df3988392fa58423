package warmpool_test

import (
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// The recorded demand ages: halved once a week, from the time kept in the pool's autoscale item,
// so a new leader continues the half-life where the last one left it.
func TestAutoscaleProfileAgesWeekly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	t0 := time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC)
	e.clock.Set(t0)
	spec := e.spec("aging", 3, 0, "v1-a")
	spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
	seedDemand(t, e, "aging", t0, 6) // 15 minutes of 6 jobs in each slot of the two hours
	tg := &targets{}
	tg.set(spec)
	opts := warmpool.Options{Autoscale: warmpool.AutoscaleOptions{Store: e.st}}
	pass(t, e.converger(t, tg.get, opts))
	st, err := e.st.GetAutoscale(ctx, "aging")
	if err != nil || !st.HalvedAt.Equal(t0) {
		t.Fatalf("after the first pass: halved at %v (%v); want the clock started at %v", st.HalvedAt, err, t0)
	}
	before := autoscale.SlotOf(t0.Add(-30*time.Minute), time.UTC)
	if m, j := slotJobs(t, st, before); m != 15 || j != 90 {
		t.Fatalf("slot before now: %d minutes %d jobs; want 15, 90", m, j)
	}

	// A week and a minute later, another leader: halved once, its clock a week on.
	e.clock.Set(t0.Add(ProfileWeek + time.Minute))
	pass(t, e.converger(t, tg.get, opts))
	if st, err = e.st.GetAutoscale(ctx, "aging"); err != nil {
		t.Fatal(err)
	}
	if m, j := slotJobs(t, st, before); m != 7 || j != 45 || !st.HalvedAt.Equal(t0.Add(ProfileWeek)) {
		t.Errorf("a week on: %d minutes %d jobs, halved at %v; want 7, 45 at %v", m, j, st.HalvedAt, t0.Add(ProfileWeek))
	}
	// Two weeks later: two halvings more.
	e.clock.Set(t0.Add(3*ProfileWeek + time.Hour))
	pass(t, e.converger(t, tg.get, opts))
	if st, err = e.st.GetAutoscale(ctx, "aging"); err != nil {
		t.Fatal(err)
	}
	if m, j := slotJobs(t, st, before); m != 1 || j != 11 || !st.HalvedAt.Equal(t0.Add(3*ProfileWeek)) {
		t.Errorf("three weeks on: %d minutes %d jobs, halved at %v; want 1, 11 at %v", m, j, st.HalvedAt, t0.Add(3*ProfileWeek))
	}
}

// ProfileWeek is warmpool.ProfileHalfLife, named for what the test means.
const ProfileWeek = warmpool.ProfileHalfLife

// An autoscaled pool's hot price is the price file's for its instance types, not a constant: the
// budget then pays for fewer instances.
func TestAutoscalePricesFromThePriceFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.clock.Set(time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC))
	f, err := pricing.ParseFile([]byte(`{"prices": [
		{"instance_type": "c6i.large", "per_hour": 0.5},
		{"instance_type": "c6i.xlarge", "per_hour": 0.9}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	book := pricing.New(pricing.Options{File: &f, Now: e.clock.Now})
	spec := e.spec("priced", 10, 0, "v1-a")
	spec.InstanceTypes = []string{"c6i.xlarge", "c6i.large"}
	// 6 jobs a minute need 6 hot; $1.10 an hour pays for 2 at the file's 0.5 (12 at 0.085).
	spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Budget: 1.1, Loc: time.UTC}
	seedDemand(t, e, "priced", e.clock.Now(), 6)
	tg := &targets{}
	tg.set(spec)
	c := e.converger(t, tg.get, warmpool.Options{Autoscale: warmpool.AutoscaleOptions{Store: e.st, Price: book.PerHour}})
	pr := poolReport(t, pass(t, c), "priced")
	a := pr.Autoscale
	if pr.TargetHot != 2 || a.HotPerHour != 0.5 || a.PricesFrom != "price book: c6i.large, the runner class's cheapest" || a.Conflict == "" {
		t.Fatalf("%+v %+v; want 2 hot at the class's cheapest price 0.5, the budget's conflict", pr, a)
	}
	// Once it holds instances, their types' median price.
	e.clock.Add(30 * time.Second)
	a = poolReport(t, pass(t, c), "priced").Autoscale
	if a.HotPerHour != 0.5 || !strings.HasPrefix(a.PricesFrom, "price book: median of 2 instances (c6i.large)") || a.StoppedPerHour != warmpool.DefaultPrices.StoppedPerHour {
		t.Errorf("with instances: %+v; want the median of their file price, the default stopped price", a)
	}
}

// seedStarts keeps n measured starts of d of a kind in the pool's autoscale item, with demand.
func seedStarts(t *testing.T, e *env, pool string, prof *autoscale.Profile, starts map[string][]int64) {
	t.Helper()
	if _, err := e.st.PutAutoscale(t.Context(), store.AutoscaleState{Pool: pool, Profile: prof.Encode(), Starts: starts}, 0); err != nil {
		t.Fatal(err)
	}
}

func repeat(ms int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = ms
	}
	return out
}

// A pool whose measured cold starts take 60 s looks that much further ahead: a quarter-hour's
// demand is made ready before it begins where today's default (27 s) would wait for it.
func TestAutoscaleMeasuredColdStartsLookFurtherAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Date(2026, 11, 23, 9, 14, 0, 0, time.UTC) // 60 s before the 09:15 quarter-hour
	e.clock.Set(now)
	prof := &autoscale.Profile{}
	// 4 jobs a minute at 09:45-10:00, none before: the plan pools two quarter-hours either side,
	// so the 09:15 quarter-hour needs 4 hot and the 09:00 one none.
	for m := now.Add(-14 * time.Minute); m.Before(now.Add(46 * time.Minute)); m = m.Add(time.Minute) {
		prof.Record(autoscale.SlotOf(m, time.UTC), 4*(m.Minute()/45))
	}
	for _, tc := range []struct {
		name   string
		starts map[string][]int64
		ready  int // hot and stopped
		from   string
	}{
		{"slow", map[string][]int64{"cold": {61000, 59000, 60000, 60500, 600000, 58000}}, 4, "cold median of 6"},
		{"few", map[string][]int64{"cold": repeat(60000, 4)}, 0, "cold default (4 samples)"},
		{"forged", map[string][]int64{"cold": append(repeat(-60000, 3), repeat(60000, 2)...)}, 0, "cold default (2 samples)"},
	} {
		seedStarts(t, e, tc.name, prof, tc.starts)
		spec := e.spec(tc.name, 10, 5, "v1-a")
		spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
		tg := &targets{}
		tg.set(spec)
		pr := poolReport(t, pass(t, e.converger(t, tg.get, warmpool.Options{Autoscale: warmpool.AutoscaleOptions{Store: e.st}})), tc.name)
		if pr.TargetHot+pr.TargetStopped != tc.ready || (tc.ready > 0) != (pr.TargetHot > 0) || !strings.Contains(pr.Autoscale.StartsFrom, tc.from) {
			t.Errorf("%s: %d hot %d stopped, starts from %q (%+v); want %d ready, %q", tc.name, pr.TargetHot, pr.TargetStopped, pr.Autoscale.StartsFrom, pr.Autoscale, tc.ready, tc.from)
		}
	}
}

// The start times come from the pool's own jobs: from the job's creation at GitHub to its
// runner's registration, by where the instance came from. A registration dated before the claim
// (an agent's clock, or a forged report) is not a measurement.
func TestAutoscaleStartsMeasuredFromPoolJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.clock.Set(time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC))
	spec := e.spec("measured", 6, 0, "v1-a")
	spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
	seedDemand(t, e, "measured", e.clock.Now(), 6)
	tg := &targets{}
	tg.set(spec)
	c := e.converger(t, tg.get, warmpool.Options{Autoscale: warmpool.AutoscaleOptions{Store: e.st}})
	pass(t, c)
	e.warmUp(t, "measured", nil, nil)
	e.clock.Add(30 * time.Second)
	hot := poolReport(t, pass(t, c), "measured").Readied
	if len(hot) != 6 {
		t.Fatalf("readied %v, want 6", hot)
	}
	for i, id := range hot {
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(500 + i), RunID: 9, Repository: "acme/api", Labels: []string{"pool=measured"}, Pool: "measured",
			CreatedAt: e.clock.Now().Add(-3 * time.Second)}
		served(t, e, j, id)
		at := e.clock.Now()
		if i == 5 {
			at = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // before the claim: not a start
		}
		if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: j.RunKey(), At: at}); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Add(30 * time.Second)
	if pr := poolReport(t, pass(t, c), "measured"); len(pr.Promoted) != 6 {
		t.Fatalf("promoted %v, want all 6", pr.Promoted)
	}
	e.clock.Add(30 * time.Second)
	a := poolReport(t, pass(t, c), "measured").Autoscale
	st, err := e.st.GetAutoscale(ctx, "measured")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Starts["hot"]; len(got) != 5 || got[0] != 3000 {
		t.Errorf("kept hot starts %v; want five of 3000 ms", got)
	}
	if a.HotStartMS != 3000 || a.StoppedStartMS != warmpool.DefaultStarts.Stopped.Milliseconds() || !strings.HasPrefix(a.StartsFrom, "hot median of 5, stopped default (0 samples)") {
		t.Errorf("decision %+v; want the measured hot start of 3 s, the others default", a)
	}
}
