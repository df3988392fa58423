package warmpool_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// autoscaled is a converger of one pool with an autoscale block (goal 5 s, UTC) within a window of
// hot and stopped, with opts (its Autoscale.Store the env's store).
func autoscaled(t *testing.T, e *env, name string, hot, stopped int, opts poolsize.Options) (*poolsize.Converger, *targets) {
	t.Helper()
	spec := e.spec(name, hot, stopped, "v1-a")
	spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
	tg := &targets{}
	tg.set(spec)
	opts.Autoscale.Store = e.st
	return e.converger(t, tg.get, opts), tg
}

// The recorded demand ages: halved once a week, from the time kept in the pool's autoscale item,
// so a new leader continues the half-life where the last one left it.
func TestAutoscaleProfileAgesWeekly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	t0 := time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC)
	e.clock.Set(t0)
	seedDemand(t, e, "aging", t0, 6) // 15 minutes of 6 jobs in each slot of the two hours
	c, tg := autoscaled(t, e, "aging", 3, 0, poolsize.Options{})
	opts := poolsize.Options{Autoscale: poolsize.AutoscaleOptions{Store: e.st}}
	pass(t, c)
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

// ProfileWeek is poolsize.ProfileHalfLife, named for what the test means.
const ProfileWeek = poolsize.ProfileHalfLife

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
	spec.Class.InstanceTypes = []string{"c6i.xlarge", "c6i.large"}
	// 6 jobs a minute need 6 hot; $1.10 an hour pays for 2 at the file's 0.5 (12 at 0.085).
	spec.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Budget: 1.1, Loc: time.UTC}
	seedDemand(t, e, "priced", e.clock.Now(), 6)
	tg := &targets{}
	tg.set(spec)
	c := e.converger(t, tg.get, poolsize.Options{Autoscale: poolsize.AutoscaleOptions{Store: e.st, Price: book.PerHour}})
	pr := poolReport(t, pass(t, c), "priced")
	a := pr.Autoscale
	if pr.TargetHot != 2 || a.HotPerHour != 0.5 || a.PricesFrom != "price book: c6i.large, the runner class's cheapest" || a.Conflict == "" {
		t.Fatalf("%+v %+v; want 2 hot at the class's cheapest price 0.5, the budget's conflict", pr, a)
	}
	// Once it holds instances, their types' median price.
	e.clock.Add(30 * time.Second)
	a = poolReport(t, pass(t, c), "priced").Autoscale
	if a.HotPerHour != 0.5 || !strings.HasPrefix(a.PricesFrom, "price book: median of 2 instances (c6i.large)") || a.StoppedPerHour != poolsize.DefaultPrices.StoppedPerHour {
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
		{"slow", map[string][]int64{"cold": {61000, 59000, 60000, 60500, 600000, 58000}}, 3, "cold median of 6"}, // the plan's level, no tail buffer without a p99 goal
		{"few", map[string][]int64{"cold": repeat(60000, 4)}, 0, "cold default (4 samples)"},
		{"forged", map[string][]int64{"cold": append(repeat(-60000, 3), repeat(60000, 2)...)}, 0, "cold default (2 samples)"},
	} {
		seedStarts(t, e, tc.name, prof, tc.starts)
		c, _ := autoscaled(t, e, tc.name, 10, 5, poolsize.Options{})
		pr := poolReport(t, pass(t, c), tc.name)
		if pr.TargetHot+pr.TargetStopped != tc.ready || (tc.ready > 0) != (pr.TargetHot > 0) || !strings.Contains(pr.Autoscale.StartsFrom, tc.from) {
			t.Errorf("%s: %d hot %d stopped, starts from %q (%+v); want %d ready, %q", tc.name, pr.TargetHot, pr.TargetStopped, pr.Autoscale.StartsFrom, pr.Autoscale, tc.ready, tc.from)
		}
	}
	// The samples no reconciler writes are gone from the item.
	if st, err := e.st.GetAutoscale(t.Context(), "forged"); err != nil || !slices.Equal(st.Starts["cold"], []int64{60000, 60000}) {
		t.Errorf("forged's kept cold starts %v (%v); want the two believable ones", st.Starts["cold"], err)
	}
}

// The start times come from the pool's own jobs: from the job's creation at GitHub to its
// runner's registration, by where the instance came from. A registration dated before the job's
// ledger record (an agent's clock, or a forged report) is not a measurement.
func TestAutoscaleStartsMeasuredFromPoolJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.clock.Set(time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC))
	seedDemand(t, e, "measured", e.clock.Now(), 6)
	c, _ := autoscaled(t, e, "measured", 6, 0, poolsize.Options{})
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
		if i == 4 {
			// The worker wakes a hot instance's agent before it writes the ledger: a registration
			// dated before the ledger's served time is a start all the same.
			r, err := e.st.GetRun(ctx, "pooljob:504")
			if err != nil {
				t.Fatal(err)
			}
			r.Result = []byte(`{"instanceId":"` + id + `","source":"hot","at":"` + e.clock.Now().Add(2*time.Second).Format(time.RFC3339Nano) + `"}`)
			if _, err := e.st.UpdateRun(ctx, r, r.Version); err != nil {
				t.Fatal(err)
			}
		}
		at := e.clock.Now()
		if i == 5 {
			at = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // before the job's record: not a start
		}
		e.agentSignal(t, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: j.RunKey(), At: at})
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
	if a.HotStartMS != 3000 || a.StoppedStartMS != poolsize.DefaultStarts.Stopped.Milliseconds() || !strings.HasPrefix(a.StartsFrom, "hot median of 5, stopped default (0 samples)") {
		t.Errorf("decision %+v; want the measured hot start of 3 s, the others default", a)
	}
}

// enqueue puts webhook jobs of pool on a job queue (the ledger records them queued), as the
// webhook does.
func enqueue(t *testing.T, jobs *pooljob.JobQueue, pool string, first int64, n int, at time.Time) {
	t.Helper()
	enqueueLike(t, jobs, warmpool.Job{RunID: 9, Pool: pool, CreatedAt: at}, first, n)
}

// enqueueLike queues n jobs of acme/api like j (its run, pool, workflow and creation), ids from
// first, as the webhook receiver does.
func enqueueLike(t *testing.T, jobs *pooljob.JobQueue, j warmpool.Job, first int64, n int) {
	t.Helper()
	j.Action, j.Repository, j.Labels = warmpool.ActionQueued, "acme/api", []string{"pool=" + j.Pool}
	for i := range n {
		j.JobID = first + int64(i)
		if _, err := jobs.Enqueue(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
}

// Queued jobs raise the decided target before the profile knows them: the pool job queue is
// shared, so a pool's waiting jobs are its ledger records not yet served (one query). Jobs of
// another pool, a job GitHub cancelled long ago and an agent's item dressed as a waiting job do
// not count.
func TestAutoscaleQueuedJobsRaiseTheTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.clock.Set(time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC))
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	enqueue(t, jobs, "queued", 100, 4, e.clock.Now())
	enqueue(t, jobs, "other", 200, 3, e.clock.Now())
	// Recorded 25 h ago: GitHub cancelled it (its ledger entry is abandoned when met).
	e.clock.Add(-25 * time.Hour)
	enqueue(t, jobs, "queued", 300, 1, e.clock.Now())
	e.clock.Add(25 * time.Hour)
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: e.st.AgentKey("i-0123456789abcdef0")}, "sk": &types.AttributeValueMemberS{Value: "X"},
		"idx_pool": &types.AttributeValueMemberS{Value: "WAITING#queued"}, "id": &types.AttributeValueMemberS{Value: "pooljob:9"},
	}}); err != nil {
		t.Fatal(err)
	}
	c, _ := autoscaled(t, e, "queued", 10, 5, poolsize.Options{Jobs: jobs})
	pr := poolReport(t, pass(t, c), "queued")
	if a := pr.Autoscale; pr.TargetHot != 4 || a.Waiting != 4 || a.Queued != 4 || a.InFlight != 0 || a.Forecast != 0 {
		t.Fatalf("%+v %+v; want 4 hot for 4 queued jobs, nothing forecast", pr, a)
	}
	if a := poolReport(t, pass(t, c), "queued").Autoscale; a.Queued != 4 || a.InFlight != 4 {
		t.Fatalf("pass 2: %+v; want the 4 warming instances in flight", a)
	}
	// Once served, a job is no longer queued: it waits with its instance on its way.
	e.warmUp(t, "queued", nil, nil)
	e.clock.Add(30 * time.Second)
	hot := poolReport(t, pass(t, c), "queued").Readied
	served(t, e, warmpool.Job{Action: warmpool.ActionQueued, JobID: 100, RunID: 9, Repository: "acme/api", Labels: []string{"pool=queued"}, Pool: "queued"}, hot[0])
	e.clock.Add(30 * time.Second)
	if a := poolReport(t, pass(t, c), "queued").Autoscale; a.Queued != 3 || a.Waiting != 4 || a.InFlight != 1 {
		t.Errorf("after one served: %+v; want 3 queued, 4 waiting (one with its instance), 1 in flight", a)
	}
}

// A scale set's statistics count the jobs the Actions service assigned it beyond the running ones
// (and offered ones, on GHES): kept in the table by its listener, they raise the pool's target
// before any reaches the ledger. Statistics too old, dated ahead or with counts no service sends
// are left out.
func TestAutoscaleScaleSetAssignedJobsRaiseTheTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	now := time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC)
	e.clock.Set(now)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	for _, st := range []store.ScaleSetStats{
		{ScaleSet: "acme/linux", ScaleSetID: 7, Assigned: 6, Running: 1, At: now.Add(-20 * time.Second)},
		{ScaleSet: "acme/ghes", ScaleSetID: 8, Available: 2, At: now},
		{ScaleSet: "acme/gone", ScaleSetID: 9, Assigned: 40, At: now.Add(-time.Hour)},
		{ScaleSet: "acme/odd", ScaleSetID: 10, Assigned: -40, Running: -80, At: now},
		{ScaleSet: "acme/ahead", ScaleSetID: 11, Assigned: 40, At: now.Add(time.Hour)},
	} {
		st.Pool = "sets"
		if err := e.st.PutScaleSetStats(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	// Two of scale set 7's jobs reached the ledger: the same jobs, counted once.
	for i := range 2 {
		j := warmpool.Job{Action: warmpool.ActionQueued, JobID: int64(40 + i), RunID: 9, Repository: "acme/api", Labels: []string{"linux"}, Pool: "sets",
			ScaleSet: "linux", ScaleSetID: 7, ScaleSetScope: "acme"}
		if _, err := jobs.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := autoscaled(t, e, "sets", 10, 5, poolsize.Options{Jobs: jobs})
	pr := poolReport(t, pass(t, c), "sets")
	if a := pr.Autoscale; pr.TargetHot != 7 || a.Waiting != 7 || a.Queued != 2 || a.ScaleSetWaiting != 7 {
		t.Errorf("%+v %+v; want 7 hot: 5 assigned beyond the running one, 2 offered (the 2 queued among them)", pr, a)
	}
}
