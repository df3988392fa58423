package simulate

import (
	"compress/gzip"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// The measurements behind docs/autoscale.md's "Why 1.29" and the held-out weeks' margins: every
// week plan of the week before, replayed on the week, and the chosen plan against the hindsight
// schedule hour by hour. They print tables, they judge nothing; run with
//
//	RUNNERPOOL_MEASURE=1 go test -count=1 -v -run 'TestMeasure' ./internal/simulate
//
// (RUNNERPOOL_MEASURE_WEEK=week-asia RUNNERPOOL_MEASURE_LABEL=pool=ci for a held-out week).

var measureModel = Model{
	Starts:   autoscale.Starts{Hot: 2 * time.Second, Stopped: 14 * time.Second, Cold: 27 * time.Second},
	Prices:   autoscale.Prices{HotPerHour: 0.085, StoppedPerHour: 0.0033},
	Interval: 30 * time.Second,
}

func measureWeeks(t *testing.T) (week, before []jobtrace.Job) {
	if os.Getenv("RUNNERPOOL_MEASURE") == "" {
		t.Skip("a measurement: RUNNERPOOL_MEASURE=1")
	}
	name := os.Getenv("RUNNERPOOL_MEASURE_WEEK")
	if name == "" {
		name = "week"
	}
	read := func(file string) []jobtrace.Job {
		f, err := os.Open("../jobtrace/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		jobs, _, err := jobtrace.Read(z)
		if err != nil {
			t.Fatal(err)
		}
		if l := os.Getenv("RUNNERPOOL_MEASURE_LABEL"); l != "" {
			jobs = jobtrace.WithLabel(jobs, l)
		}
		return jobs
	}
	return read(name + ".csv.gz"), read(name + "-before.csv.gz")
}

func slowShareOf(r *Result, goal time.Duration) float64 {
	n := 0
	for _, q := range r.queue {
		if q > goal {
			n++
		}
	}
	return float64(n) / float64(len(r.queue))
}

func TestMeasureMarginCurve(t *testing.T) {
	week, before := measureWeeks(t)
	goal := 5 * time.Second
	o := Options{Model: measureModel, Goal: goal, Percentile: 0.95, Loc: time.UTC, Cooldown: 2 * time.Minute}
	_, fr, err := SearchFixed(week, measureModel, goal, 0.95, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("hindsight schedule: idle %.0f inst-h, %.2f %% slow\n", fr.IdleInstanceHours, 100*slowShareOf(fr, goal))
	fmt.Println("| slack | slow on the history (replay) | slow on this week | idle inst-h on this week | ratio |")
	pl := &planner{o: o, hist: before, prof: Record(before, time.UTC)}
	for _, slack := range []float64{0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05} {
		plan := autoscale.PlanWeek(pl.prof, slack)
		r, err := Run(week, measureModel, pl.autoscaler(plan, nil), goal)
		if err != nil {
			t.Fatal(err)
		}
		h, err := pl.try("", plan)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("| %.2f %% | %.2f %% | %.2f %% | %.0f | %.2f |\n", 100*slack, 100*h.SlowShare, 100*slowShareOf(r, goal), r.IdleInstanceHours, r.IdleInstanceHours/fr.IdleInstanceHours)
	}
}

func TestMeasureHourByHour(t *testing.T) {
	week, before := measureWeeks(t)
	goal := 5 * time.Second
	o := Options{Model: measureModel, Goal: goal, Percentile: 0.95, Loc: time.UTC, Cooldown: 2 * time.Minute}
	_, fr, err := SearchFixed(week, measureModel, goal, 0.95, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	pl := &planner{o: o, hist: before, prof: Record(before, time.UTC)}
	ch, err := pl.choose(autoscale.Target(0.95, 0, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	ar, err := Run(week, measureModel, pl.autoscaler(ch.Chosen.Plan, nil), goal)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("plan %s: idle %.0f, %.2f %% slow; hindsight schedule: idle %.0f\n", ch.Chosen.Name, ar.IdleInstanceHours, 100*slowShareOf(ar, goal), fr.IdleInstanceHours)
	type hour struct {
		idle, level [2]float64 // the plan's, the schedule's
		slow        [2]int
		jobs        int
	}
	var hs [7 * 24]hour
	start := week[0].Created.UTC().Truncate(24 * time.Hour)
	for k, r := range []*Result{ar, fr} {
		for _, p := range r.Timeline {
			if i := int(p.At.Sub(start) / time.Hour); i >= 0 && i < len(hs) {
				passes := float64(time.Hour / measureModel.Interval)
				hs[i].idle[k] += float64(p.Hot) / passes
				hs[i].level[k] += float64(p.TargetHot) / passes
				hs[i].slow[k] += p.SlowJobs
				if k == 0 {
					hs[i].jobs += p.AllJobs
				}
			}
		}
	}
	week1, hist := Record(week, time.UTC), pl.prof
	biggest := func(p *autoscale.Profile, i int) int {
		top := 0
		for s := i * 4; s < i*4+4; s++ {
			for b, m := range p.Slots[s].Minutes {
				if m > 0 {
					top = max(top, int(p.Slots[s].Jobs[b]/m))
				}
			}
		}
		return top
	}
	var idle, slow [3]float64
	var n [3]int
	bigWeek, bigHist, bigBoth := 0, 0, 0
	for i, h := range hs {
		k := 2
		switch {
		case h.level[0] > h.level[1]+5:
			k = 0
		case h.level[0] < h.level[1]-5:
			k = 1
		}
		idle[k] += h.idle[0] - h.idle[1]
		slow[k] += float64(h.slow[0] - h.slow[1])
		n[k]++
		bw, bh := biggest(week1, i), biggest(hist, i)
		if bw >= 100 {
			bigWeek++
			if bh >= 100 {
				bigBoth++
			}
		}
		if bh >= 100 {
			bigHist++
		}
		if h.jobs > 0 {
			fmt.Printf("%s %02d:00 jobs %4d | plan level %5.1f idle %5.1f slow %3d | schedule level %5.1f idle %5.1f slow %3d | biggest minute: week %3d, history %3d\n",
				start.Add(time.Duration(i) * time.Hour).Weekday().String()[:3], i%24, h.jobs, h.level[0], h.idle[0], h.slow[0], h.level[1], h.idle[1], h.slow[1], bw, bh)
		}
	}
	for k, what := range []string{"the plan more than 5 above the schedule", "the plan more than 5 below it", "within 5"} {
		fmt.Printf("%s: %d hours, idle %+.0f inst-h, slow %+.0f jobs\n", what, n[k], idle[k], slow[k])
	}
	fmt.Printf("hours with a minute of 100 or more arrivals: this week %d, the week before %d, both %d\n", bigWeek, bigHist, bigBoth)
}
