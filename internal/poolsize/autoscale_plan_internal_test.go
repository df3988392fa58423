package poolsize

import (
	"compress/gzip"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/simulate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// The reconciler plans as `runnerpool simulate` plans: autoscale.ChoosePlan at the goal's p95 less
// the margin, judged by the recorded demand (it keeps no jobs to replay), not a fixed 1 % slack.
// The demand is the committed week before's; at every hour of a weekday the decision's level is the
// chosen plan's, which holds less than the old 1 % plan in some of them.
func TestAutoscalePlansAtTheGoalsPercentile(t *testing.T) {
	f, err := os.Open("../jobtrace/testdata/week-before.csv.gz")
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
	prof := simulate.Record(jobs, time.UTC)
	ch, err := autoscale.ChoosePlan(prof, 0.05, autoscale.Target(GoalPercentile, 0, false), autoscale.ModelJudge(prof))
	if err != nil {
		t.Fatal(err)
	}
	// Judged by the demand, the target's share is spent to the full (docs/autoscale.md: the
	// replay of the same week's jobs picks 1.78 %).
	if ch.Chosen.Name != "week plan, slack 2.50 %" {
		t.Errorf("the plan chosen: %s, want the week plan at slack 2.50 %%", ch.Chosen.Name)
	}
	old := autoscale.PlanWeek(prof, 0.01)
	monday := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	lower := 0
	for h := range 24 {
		now := monday.Add(time.Duration(h) * time.Hour)
		slot := autoscale.SlotOf(now, time.UTC)
		mem := &memAutoscale{items: map[string]store.AutoscaleState{"p": {Pool: "p", Profile: prof.Encode(), Version: 1}}}
		c := &Converger{opts: Options{Autoscale: AutoscaleOptions{Store: mem}}, log: slog.New(slog.DiscardHandler)}
		spec := warmpool.PoolSpec{Name: "p", Hot: 1000, Autoscale: &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}}
		rep := c.autoscale(t.Context(), &spec, nil, categories{}, now)
		if rep.Err != nil {
			t.Fatal(rep.Err)
		}
		if want := ch.Chosen.Plan.Level[slot]; rep.Level != want {
			t.Errorf("%02d:00: level %d, want the chosen plan's %d (%s; the 1 %% plan's %d)", h, rep.Level, want, ch.Chosen.Name, old.Level[slot])
		}
		if rep.Level < old.Level[slot] {
			lower++
		}
	}
	if lower == 0 {
		t.Errorf("no hour below the 1 %% plan: the case does not tell the two apart")
	}
}
