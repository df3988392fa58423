package history_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
)

func filePrices(_ context.Context, typ, usage, _ string) (float64, string) {
	if typ == "c6i.large" && usage == "on-demand" {
		return 0.36, "price-file" // 0.0001 USD a second
	}
	return 0, history.PriceUnknown
}

// TestBuild: per-runner instance-seconds from provision start to release end, unknown prices kept
// apart, totals per repository and class, the warm pools' standing cost from samples, and savings
// against the median provision that created.
func TestBuild(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	run := func(key, repo string, start time.Time, held time.Duration, total time.Duration, sources ...string) history.Run {
		r := history.Run{Provision: history.Provision{RunKey: key, Repository: repo, RunnerClass: "linux", StartedAt: start, Status: "succeeded", Steps: history.Steps{Total: total}}}
		for i, s := range sources {
			typ := "c6i.large"
			if s == "spot" {
				typ, s = "m7i.large", history.SourceCreated
			}
			r.Runners = append(r.Runners, history.Runner{InstanceID: key + string(rune('a'+i)), InstanceType: typ, UsageClass: "on-demand", Source: s})
		}
		if held > 0 {
			r.ReleasedAt = start.Add(held)
		}
		return r
	}
	runs := []history.Run{
		run("r1", "acme/api", t0, 100*time.Second, 60*time.Second, history.SourceCreated, history.SourceCreated),
		run("r2", "acme/api", t0.Add(time.Minute), 100*time.Second, 2*time.Second, history.SourceReused),
		run("r3", "acme/web", t0.Add(2*time.Minute), 0, 40*time.Second, history.SourceCreated, "spot"),
	}
	samples := []history.Sample{
		{At: t0, Pools: []history.PoolCount{{RunnerClass: "linux", Pool: "hot", Billed: map[string]int{"c6i.large/on-demand": 2}}}},
		{At: t0.Add(time.Minute), Pools: []history.PoolCount{
			{RunnerClass: "linux", Pool: "hot", Billed: map[string]int{"c6i.large/on-demand": 1}},
			{RunnerClass: "linux", Billed: map[string]int{"c6i.large/on-demand": 1}}, // a released runner idle in the pool
			{RunnerClass: "linux", Pool: "cold", States: map[string]int{"stopped": 4}},
		}},
	}
	to := t0.Add(10 * time.Minute)
	rep := history.Build(t.Context(), runs, samples, time.Minute, filePrices, t0, to)

	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if c := rep.Runs[0]; c.InstanceSeconds != 200 || !near(c.Cost, 0.02) || c.SourceNote() != "price-file" {
		t.Errorf("r1 = %+v, want 200 s, $0.02, price-file", c.Line)
	}
	// r3 is open: counted until the report's end (8 minutes), its m7i runner unpriced.
	if c := rep.Runs[2]; !c.Open || c.InstanceSeconds != 960 || c.UnpricedSeconds != 480 || !near(c.Cost, 0.048) || c.SourceNote() != "price-file + unknown" {
		t.Errorf("r3 = %+v open=%v", c.Line, c.Open)
	}
	if len(rep.Repositories) != 2 || rep.Repositories[0].Name != "acme/web" || rep.Repositories[1].Runs != 2 {
		t.Errorf("repositories %+v: want acme/web (dearer) first, acme/api with 2 runs", rep.Repositories)
	}
	// Pool: 2 instances for the 60 s to the next sample, then 1 for at most two intervals (120 s).
	// The idle runner: 1 for two intervals. A pool of stopped instances bills nothing here.
	if len(rep.Pools) != 2 || rep.Pools[0].Name != "hot" || rep.Pools[0].InstanceSeconds != 240 || !near(rep.Pools[0].Cost, 0.024) ||
		rep.Pools[1].Name != "linux (idle runners)" || rep.Pools[1].InstanceSeconds != 120 {
		t.Errorf("pools %+v, want hot: 240 s, $0.024; linux (idle runners): 120 s", rep.Pools)
	}
	if want := 200.0 + 100 + 960 + 240 + 120; rep.Total.InstanceSeconds != want || rep.Total.Runs != 3 {
		t.Errorf("total %+v, want %v s over 3 runs", rep.Total, want)
	}
	// Baseline: median of r1 (60 s) and r3 (40 s) = index 1 of [40 60] = 60 s. r2 waited 2 s.
	s := rep.Savings
	if s.Baseline != 60*time.Second || s.BaselineRuns != 2 || s.ReusedRunners != 1 || s.TimeSaved != 58*time.Second || !near(s.MoneySaved, 0.006) {
		t.Errorf("savings %+v", s)
	}
}

// TestComputeRejectsEmptyWindow: a window that ends before it starts is an error, not a zero report.
func TestComputeRejectsEmptyWindow(t *testing.T) {
	t.Parallel()
	now := time.Now()
	if _, err := history.Compute(t.Context(), nil, filePrices, now, now); err == nil {
		t.Error("an empty window gave no error")
	}
}
