package simulate

import (
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

var model = Model{
	Starts:   autoscale.Starts{Hot: 2 * time.Second, Stopped: 14 * time.Second, Cold: 27 * time.Second},
	Prices:   autoscale.Prices{HotPerHour: 0.1, StoppedPerHour: 0.01},
	Interval: 30 * time.Second,
}

var monday = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// burst is n jobs of d created at t.
func burst(t time.Time, n int, d time.Duration) []jobtrace.Job {
	var out []jobtrace.Job
	for range n {
		out = append(out, jobtrace.Job{Created: t, Started: t, Completed: t.Add(d)})
	}
	return out
}

func sortJobs(jobs []jobtrace.Job) {
	slices.SortStableFunc(jobs, func(a, b jobtrace.Job) int { return a.Created.Compare(b.Created) })
}

func TestRunColdOnly(t *testing.T) {
	t.Parallel()
	r, err := Run(burst(monday.Add(time.Hour), 5, 10*time.Minute), model, ColdOnly{}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.P50 != 27*time.Second || r.P99 != 27*time.Second || r.IdleInstanceHours != 0 {
		t.Errorf("cold only: p50 %s, p99 %s, idle %.2f h; want 27 s, 27 s, 0", r.P50, r.P99, r.IdleInstanceHours)
	}
	// 5 instances busy for 27 s + 10 min each.
	if want := 5 * (10*time.Minute + 27*time.Second).Hours() * 0.1; r.Cost < want-1e-9 || r.Cost > want+1e-9 {
		t.Errorf("cost %.5f, want %.5f", r.Cost, want)
	}
}

func TestRunFixedPoolHotThenStoppedThenCold(t *testing.T) {
	t.Parallel()
	// 4 hot from midnight; a burst of 6 at 01:00 takes the 4 hot, then overflows to cold.
	f := &Fixed{}
	for h := range 24 {
		f.Hot[0][h] = 4
	}
	jobs := append(burst(monday.Add(time.Minute), 1, time.Second), burst(monday.Add(time.Hour), 6, time.Minute)...)
	r, err := Run(jobs, model, f, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	q := r.QueueTimes()
	// The pool is warm before the first job (the replay begins early enough).
	want := []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 27 * time.Second, 27 * time.Second}
	for i := range want {
		if q[i] != want[i] {
			t.Fatalf("queue times %v, want %v", q, want)
		}
	}
	// About an hour of 4 idle hot instances before the burst.
	if r.IdleInstanceHours < 3.9 || r.IdleInstanceHours > 4.3 {
		t.Errorf("idle %.2f instance-hours, want about 4", r.IdleInstanceHours)
	}
}

// observing is a Fixed schedule that keeps what every pass observed.
type observing struct {
	*Fixed
	seen []Observation
}

func (o *observing) Targets(ob Observation) (int, int) {
	o.seen = append(o.seen, ob)
	return o.Fixed.Targets(ob)
}

func TestObservationCountsSlowJobs(t *testing.T) {
	t.Parallel()
	// 4 hot; a burst of 6 at 01:00: 4 start hot, 2 cold, beyond the 5 s goal. A policy pacing the
	// goal's budget reads the slow ones at the next pass.
	f := &observing{Fixed: &Fixed{}}
	for h := range 24 {
		f.Hot[0][h] = 4
	}
	jobs := append(burst(monday.Add(time.Minute), 1, time.Second), burst(monday.Add(time.Hour), 6, time.Minute)...)
	if _, err := Run(jobs, model, f, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	slow, arrived := 0, 0
	for _, o := range f.seen {
		slow, arrived = slow+o.Slow, arrived+o.Arrived
	}
	if slow != 2 || arrived != 7 {
		t.Errorf("the passes observed %d slow of %d jobs, want 2 of 7", slow, arrived)
	}
}

func TestAutoscalerIsReadyForARecurringBurst(t *testing.T) {
	t.Parallel()
	// Last week: 40 jobs at 09:00 every weekday, a job every 10 minutes otherwise.
	var hist, week []jobtrace.Job
	for d := range 5 {
		for m := 0; m < 24*60; m += 10 {
			hist = append(hist, burst(monday.AddDate(0, 0, d).Add(time.Duration(m)*time.Minute), 1, time.Minute)...)
			week = append(week, burst(monday.AddDate(0, 0, 7+d).Add(time.Duration(m)*time.Minute+time.Second), 1, time.Minute)...)
		}
		hist = append(hist, burst(monday.AddDate(0, 0, d).Add(9*time.Hour), 40, 5*time.Minute)...)
		week = append(week, burst(monday.AddDate(0, 0, 7+d).Add(9*time.Hour), 40, 5*time.Minute)...)
	}
	sortJobs(hist)
	sortJobs(week)
	prof := Record(hist, time.UTC)
	a := &Autoscaler{Profile: prof, Plan: autoscale.PlanWeek(prof, 0), Base: autoscale.Input{
		Starts: model.Starts, Prices: model.Prices, Goal: 5 * time.Second, Interval: model.Interval, Cooldown: 2 * time.Minute,
	}}
	r, err := Run(week, model, a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range week {
		if j.Created.Hour() == 9 && j.Created.Minute() == 0 && r.QueueTimes()[i] != 2*time.Second {
			t.Fatalf("a 09:00 job waited %s: the pool was not ready before the burst", r.QueueTimes()[i])
		}
	}
	if r.P95 > 5*time.Second {
		t.Errorf("p95 %s, want at most 5 s", r.P95)
	}
	// The burst's pool is held around 09:00, not all day: far below 40 instances all week.
	if r.IdleInstanceHours > 40*24*5/4 {
		t.Errorf("idle %.0f instance-hours: the burst's level is held too long", r.IdleInstanceHours)
	}
}

func TestSearchFixedMeetsTheGoalAtLeastCost(t *testing.T) {
	t.Parallel()
	p := jobtrace.DefaultParams()
	p.Days, p.Zones = 1, p.Zones[:1]
	p.Zones[0].Repos = 4
	jobs := jobtrace.Generate(p, 3)
	f, r, err := SearchFixed(jobs, model, 5*time.Second, 0.95, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if !Meets(r.QueueTimes(), 5*time.Second, 0.95) {
		t.Fatalf("the searched schedule misses the goal: p95 %s", r.P95)
	}
	// Cheapest: one fewer hot instance in any used hour misses the goal.
	for h := range 24 {
		if f.Hot[0][h] == 0 {
			continue
		}
		f.Hot[0][h]--
		lower, err := Run(jobs, model, f, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if Meets(lower.QueueTimes(), 5*time.Second, 0.95) && lower.IdleInstanceHours < r.IdleInstanceHours {
			t.Errorf("hour %d: %d hot still meets the goal with fewer idle hours (%.1f < %.1f)", h, f.Hot[0][h], lower.IdleInstanceHours, r.IdleInstanceHours)
		}
		f.Hot[0][h]++
	}
}

// TestAutoscalerPrewarmsARunsMatrix: a workflow whose matrix of 40 `needs:` a 3-minute build is
// warmed for when the build is queued, at an hour no history predicts; ignoring runs, the matrix
// overflows to cold starts.
func TestAutoscalerPrewarmsARunsMatrix(t *testing.T) {
	t.Parallel()
	run := func(id int64, at time.Time, build time.Duration) []jobtrace.Job {
		jobs := burst(at, 1, build)
		jobs = append(jobs, burst(at.Add(build), 40, 5*time.Minute)...)
		for i := range jobs {
			jobs[i].RunID, jobs[i].Workflow = id, "test"
		}
		return jobs
	}
	hist := append(run(1, monday.Add(10*time.Hour), 3*time.Minute), run(2, monday.Add(15*time.Hour), 4*time.Minute)...)
	week := run(3, monday.AddDate(0, 0, 8).Add(13*time.Hour+7*time.Minute), 3*time.Minute+20*time.Second)
	lead := model.Starts.Cold + model.Interval
	fan := autoscale.LearnFanouts(Runs(hist), lead)
	if got := fan["test"]; got.Jobs != 40 || got.After != 3*time.Minute {
		t.Fatalf("learned %+v, want 40 jobs after 3 min", got)
	}
	if n := len(Uncovered(hist, fan)); n != 2 {
		t.Errorf("%d jobs left to the plan, want the 2 builds", n)
	}
	for _, tt := range []struct {
		name    string
		fanouts autoscale.Fanouts
		hot     int // matrix jobs started hot
	}{{"runs followed", fan, 40}, {"runs ignored", nil, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prof := Record(Uncovered(hist, tt.fanouts), time.UTC)
			a := &Autoscaler{Profile: prof, Plan: autoscale.PlanWeek(prof, 0.05), Fanouts: tt.fanouts, Base: autoscale.Input{
				Starts: model.Starts, Prices: model.Prices, Goal: 5 * time.Second, Interval: model.Interval, Cooldown: 2 * time.Minute,
			}}
			r, err := Run(week, model, a, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			hot := 0
			for _, q := range r.QueueTimes()[1:] {
				if q == model.Starts.Hot {
					hot++
				}
			}
			if hot != tt.hot {
				t.Errorf("%d of the matrix's 40 jobs started hot, want %d", hot, tt.hot)
			}
			// The pre-warm idles from the build's queueing to the matrix's, and no longer.
			if tt.fanouts != nil && r.IdleInstanceHours > 40*(3*time.Minute+20*time.Second+model.Interval).Hours() {
				t.Errorf("idle %.2f instance-hours: the pre-warm came too early or stayed", r.IdleInstanceHours)
			}
		})
	}
}
