package simulate

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// The lower bound a causal policy faces (docs/autoscale.md, "What a policy that knows only the
// past can reach"): the baseline is a schedule searched on the judged week itself (hindsight).
// A policy that knows only the past cannot know this week's fan-out times; the most it can know
// is the generator itself: every past week. So the oracle here learns from K other weeks of the
// same generator (seeds 1001...), chooses the week plan whose replays leave on average exactly
// the goal's 5 % slow on those weeks (no margin: it knows the distribution), and is replayed on
// the judged week and on M fresh weeks (seeds 2001...), each against its own hindsight
// schedule. It prints, judges nothing; run with
//
//	RUNNERPOOL_MEASURE=1 go test -count=1 -v -run TestMeasureOracle ./internal/simulate
//
// (RUNNERPOOL_MEASURE_WEEK=asia|americas RUNNERPOOL_MEASURE_LABEL=pool=L for a held-out kind;
// RUNNERPOOL_MEASURE_K, RUNNERPOOL_MEASURE_M the numbers of weeks, default 8 and 4).

// measureKind is the generator of the measured week: its classes and label.
func measureKind(t *testing.T) ([]jobtrace.GenParams, string) {
	switch w := os.Getenv("RUNNERPOOL_MEASURE_WEEK"); w {
	case "", "week":
		return []jobtrace.GenParams{jobtrace.DefaultParams()}, ""
	default:
		c, ok := jobtrace.HeldOut()[w]
		if !ok {
			t.Fatalf("no held-out week %q", w)
		}
		return c, os.Getenv("RUNNERPOOL_MEASURE_LABEL")
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func generated(classes []jobtrace.GenParams, label string, seed uint64, days int) []jobtrace.Job {
	cs := make([]jobtrace.GenParams, len(classes))
	for i, c := range classes {
		c.Start = c.Start.AddDate(0, 0, days)
		cs[i] = c
	}
	jobs := jobtrace.GenerateClasses(cs, seed)
	if label != "" {
		jobs = jobtrace.WithLabel(jobs, label)
	}
	return jobs
}

func TestMeasureOracle(t *testing.T) {
	if os.Getenv("RUNNERPOOL_MEASURE") == "" {
		t.Skip("a measurement: RUNNERPOOL_MEASURE=1")
	}
	classes, label := measureKind(t)
	goal := 5 * time.Second
	k, m := envInt("RUNNERPOOL_MEASURE_K", 8), envInt("RUNNERPOOL_MEASURE_M", 4)
	var train [][]jobtrace.Job
	prof := &autoscale.Profile{}
	for i := range k {
		w := generated(classes, label, uint64(1001+i), 0)
		train = append(train, w)
		rec := Record(w, time.UTC)
		addProfile(prof, rec)
	}
	o := Options{Model: measureModel, Goal: goal, Percentile: 0.95, Loc: time.UTC, Cooldown: 2 * time.Minute}
	judge := func(name string, plan *autoscale.WeekPlan) (autoscale.Candidate, error) {
		c := autoscale.Candidate{Name: name, Plan: plan}
		for _, w := range train {
			pl := &planner{o: o, hist: w, prof: prof}
			r, err := Run(w, measureModel, pl.autoscaler(plan, nil), goal)
			if err != nil {
				return c, err
			}
			c.SlowShare += slowShareOf(r, goal) / float64(len(train))
			c.IdleInstanceHours += r.IdleInstanceHours / float64(len(train))
		}
		return c, nil
	}
	var chosen []autoscale.Candidate
	for _, target := range []float64{0.05, 0.04, 0.03} {
		ch, err := autoscale.ChoosePlan(prof, 0.05, target, judge)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("oracle plan at %.0f %% (%d weeks of the generator as history): %s, %.2f %% slow on them, %.0f idle inst-h\n", 100*target, k, ch.Chosen.Name, 100*ch.Chosen.SlowShare, ch.Chosen.IdleInstanceHours)
		chosen = append(chosen, ch.Chosen)
	}
	// The fixed schedule with the same knowledge: the cheapest meeting the goal over all K weeks
	// (laid end to end before the judged week).
	var past []jobtrace.Job
	for i := len(train) - 1; i >= 0; i-- {
		for _, j := range train[i] {
			d := -7 * 24 * time.Hour * time.Duration(i+1)
			j.Created, j.Started, j.Completed = j.Created.Add(d), j.Started.Add(d), j.Completed.Add(d)
			past = append(past, j)
		}
	}
	pastSched, _, err := SearchFixed(past, measureModel, goal, 0.95, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("| week | hindsight: idle, slow | schedule of the week before: idle, slow, p95, ratio | schedule of the K weeks: idle, slow, p95, ratio | oracle plans at 5, 4, 3 %: idle, slow, p95, ratio |")
	row := func(name string, week, before []jobtrace.Job) {
		_, fr, err := SearchFixed(week, measureModel, goal, 0.95, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		prior, _, err := SearchFixed(before, measureModel, goal, 0.95, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := Run(week, measureModel, prior, goal)
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("| %s | %.0f, %.2f %% | %.0f, %.2f %%, %s, %.2f |", name, fr.IdleInstanceHours, 100*slowShareOf(fr, goal),
			pr.IdleInstanceHours, 100*slowShareOf(pr, goal), pr.P95, pr.IdleInstanceHours/fr.IdleInstanceHours)
		ps, err := Run(week, measureModel, pastSched, goal)
		if err != nil {
			t.Fatal(err)
		}
		line += fmt.Sprintf(" %.0f, %.2f %%, %s, %.2f |", ps.IdleInstanceHours, 100*slowShareOf(ps, goal), ps.P95, ps.IdleInstanceHours/fr.IdleInstanceHours)
		for _, c := range chosen {
			pl := &planner{o: o, hist: before, prof: prof}
			or, err := Run(week, measureModel, pl.autoscaler(c.Plan, nil), goal)
			if err != nil {
				t.Fatal(err)
			}
			line += fmt.Sprintf(" %.0f, %.2f %%, %s, %.2f;", or.IdleInstanceHours, 100*slowShareOf(or, goal), or.P95, or.IdleInstanceHours/fr.IdleInstanceHours)
		}
		fmt.Println(line + " |")
	}
	row("the judged week (seed 1)", generated(classes, label, 1, 0), generated(classes, label, 2, -7))
	for i := range m {
		row(fmt.Sprintf("seed %d", 2001+i), generated(classes, label, uint64(2001+i), 0), generated(classes, label, uint64(3001+i), -7))
	}
}

// addProfile adds q's recorded minutes to p.
func addProfile(p, q *autoscale.Profile) {
	for s := range q.Slots {
		src := q.Slots[s]
		if src.Minutes == nil {
			continue
		}
		dst := &p.Slots[s]
		if dst.Minutes == nil {
			dst.Minutes, dst.Jobs = make([]uint32, autoscale.Buckets), make([]uint32, autoscale.Buckets)
		}
		for b := range src.Minutes {
			dst.Minutes[b] += src.Minutes[b]
			dst.Jobs[b] += src.Jobs[b]
		}
	}
}

// TestMeasurePlans compares, on the judged week and M fresh pairs of weeks (the week before as
// history), the week plan of the recorded demand and of its spread (spreadProfile), each chosen
// by replaying the history at several targets.
func TestMeasurePlans(t *testing.T) {
	goal := 5 * time.Second
	pairs := measurePairs(t, envInt("RUNNERPOOL_MEASURE_M", 2))
	o := Options{Model: measureModel, Goal: goal, Percentile: 0.95, Loc: time.UTC, Cooldown: 2 * time.Minute}
	targets := []float64{0.025, 0.035, 0.05}
	type acc struct{ ratio, slow float64 }
	sums := map[string]*acc{}
	for _, pr := range pairs {
		seed, week, before, fr := pr.seed, pr.week, pr.before, pr.fixed
		prof := Record(before, time.UTC)
		for _, v := range []struct {
			name string
			p    *autoscale.Profile
		}{{"recorded", prof}, {"spread", spreadProfile(prof)}} {
			for _, target := range targets {
				pl := &planner{o: o, hist: before, prof: prof}
				ch, err := autoscale.ChoosePlan(v.p, 0.05, target, pl.try)
				if err != nil {
					t.Fatal(err)
				}
				r, err := Run(week, measureModel, pl.autoscaler(ch.Chosen.Plan, nil), goal)
				if err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("%s at %.1f %%", v.name, 100*target)
				if sums[key] == nil {
					sums[key] = &acc{}
				}
				sums[key].ratio += r.IdleInstanceHours / fr.IdleInstanceHours
				sums[key].slow += slowShareOf(r, goal)
				fmt.Printf("seed %d: %-20s %-28s history %.2f %% | week: idle %.0f (hindsight %.0f), ratio %.2f, slow %.2f %%, p95 %s\n", seed, key, ch.Chosen.Name,
					100*ch.Chosen.SlowShare, r.IdleInstanceHours, fr.IdleInstanceHours, r.IdleInstanceHours/fr.IdleInstanceHours, 100*slowShareOf(r, goal), r.P95)
			}
		}
	}
	for k, a := range sums {
		fmt.Printf("mean over %d weeks: %-20s ratio %.2f, slow %.2f %%\n", len(pairs), k, a.ratio/float64(len(pairs)), 100*a.slow/float64(len(pairs)))
	}
}

// weekPair is a judged week, the week before it and the replay of the week's hindsight schedule.
type weekPair struct {
	seed         uint64
	week, before []jobtrace.Job
	fixed        *Result
}

// measurePairs are the judged week of the measured kind (seed 1, the week before seed 2) and m
// fresh pairs (seeds 2001..., the weeks before 3001...).
func measurePairs(t *testing.T, m int) []weekPair {
	if os.Getenv("RUNNERPOOL_MEASURE") == "" {
		t.Skip("a measurement: RUNNERPOOL_MEASURE=1")
	}
	classes, label := measureKind(t)
	var out []weekPair
	for i := range m + 1 {
		seed, hseed := uint64(1), uint64(2)
		if i > 0 {
			seed, hseed = uint64(2000+i), uint64(3000+i)
		}
		week, before := generated(classes, label, seed, 0), generated(classes, label, hseed, -7)
		_, fr, err := SearchFixed(week, measureModel, 5*time.Second, 0.95, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, weekPair{seed, week, before, fr})
	}
	return out
}
