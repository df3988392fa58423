package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
)

// The pools page shows an autoscaled pool's decision: forecast, window, target against actual,
// the measured queue time against the goal (marked when missed), the conflict and the reasons;
// a pool without a decision yet says so, and a pool without the block shows none of it.
func TestPoolsPageAutoscaled(t *testing.T) {
	t.Parallel()
	st, h := fixture(20, 40)
	d, err := dashboard.New(dashboard.Options{
		Store: st, History: h, Price: price, Now: func() time.Time { return t0 },
		Targets: func(context.Context, time.Time) ([]history.PoolCount, error) {
			return []history.PoolCount{
				{RunnerClass: "linux", Pool: "hot", TargetHot: 12, TargetStop: 3, Autoscale: &history.PoolAutoscale{
					DecidedAt: t0.Add(-20 * time.Second), Forecast: 6.5, WindowHot: 12, WindowStopped: 6,
					Goal: 5 * time.Second, QueueP95: 7500 * time.Millisecond, QueueJobs: 42,
					Conflict: "the goal needs 15 hot; the schedule's max is 12", Reasons: []string{"next quarter-hour needs 15 hot: ready before it begins", "3 stopped as the tail's buffer"},
				}},
				{RunnerClass: "linux", Pool: "calm", TargetHot: 1, Autoscale: &history.PoolAutoscale{Goal: 5 * time.Second}},
				{RunnerClass: "linux", Pool: "plain", TargetHot: 2},
			}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	code, body := serve(d.Handler(), "GET", "/pools")
	if code != 200 {
		t.Fatalf("GET /pools: %d\n%s", code, body)
	}
	section := func(pool string) string {
		_, s, _ := strings.Cut(body, `id="pool-linux-`+pool+`"`)
		s, _, _ = strings.Cut(s, "<figure>") // the counts table
		return s
	}
	hot := section("hot")
	for _, want := range []string{
		"decided 2026-11-25 11:59:40 UTC; forecast 6.50 jobs/min; window max 12 hot, 6 stopped",
		"<td>12 hot, 3 stopped</td>", "hot 12 / 4, stopped 3 / 4", // the latest sample's counts: 4 ready, 4 stopped
		`<tr class="autoscale warn"><th>queue time p95 / goal</th><td>7.5s (42 jobs, last hour) / 5.0s: goal missed</td></tr>`,
		`<tr class="autoscale warn"><th>conflict</th><td>the goal needs 15 hot; the schedule&#39;s max is 12</td></tr>`,
		"<li>next quarter-hour needs 15 hot: ready before it begins</li><li>3 stopped as the tail&#39;s buffer</li>",
	} {
		if !strings.Contains(hot, want) {
			t.Errorf("the autoscaled pool lacks %q:\n%s", want, hot)
		}
	}
	calm := section("calm")
	for _, want := range []string{"no decision yet", "— (no job measured in the last hour) / 5.0s"} {
		if !strings.Contains(calm, want) {
			t.Errorf("the pool without a decision lacks %q:\n%s", want, calm)
		}
	}
	if strings.Contains(calm, "goal missed") || strings.Contains(calm, "conflict") {
		t.Errorf("the pool without a decision shows a miss or a conflict:\n%s", calm)
	}
	if plain := section("plain"); plain == "" || strings.Contains(plain, "autoscale") {
		t.Errorf("the pool without an autoscale block:\n%s", plain)
	}
}
