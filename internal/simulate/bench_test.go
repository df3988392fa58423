package simulate

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// BenchmarkCompareBigWeek is `runnerpool simulate`'s three policies on a week of about 160,000
// jobs (jobtrace.BigParams), the week before as history.
func BenchmarkCompareBigWeek(b *testing.B) {
	p := jobtrace.BigParams()
	week := jobtrace.Generate(p, 1)
	p.Start = p.Start.AddDate(0, 0, -7)
	before := jobtrace.Generate(p, 2)
	b.Logf("%d jobs, %d in the week before", len(week), len(before))
	for b.Loop() {
		if _, err := Compare(Options{Jobs: week, History: before, Model: model, Goal: 5 * time.Second, Percentile: 0.95, Loc: time.UTC}); err != nil {
			b.Fatal(err)
		}
	}
}
