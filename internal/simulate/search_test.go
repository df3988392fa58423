package simulate

import (
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// TestSearchContinuesFromTheMark: while one hour's count is searched, a replay continues from the
// state a replay left before the first pass that reads that hour; it must count exactly what a
// replay of the whole week counts, for every count tried, passing or failing.
func TestSearchContinuesFromTheMark(t *testing.T) {
	t.Parallel()
	jobs := jobtrace.Generate(jobtrace.DefaultParams(), 1)
	f := &Fixed{Loc: time.UTC, Lead: model.Starts.Cold + model.Interval}
	f.Hot = peakPerHour(jobs, f, 2*f.Lead)
	s, err := newSearch(jobs, model, f, 5*time.Second, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		fast          []int
		slow          int
		gaveUp, meets bool
	}
	for _, g := range []struct{ d, h int }{{0, 10}, {0, 0}, {1, 14}, {0, 23}} {
		peak := f.Hot[g.d][g.h]
		counts := []int{peak / 2, 0, peak, peak / 4, 2 * peak}
		var marked []outcome
		s.searching(g.d, g.h)
		for _, n := range counts {
			f.Hot[g.d][g.h] = n
			s.replay()
			marked = append(marked, outcome{slices.Clone(s.p.fastJobs), s.p.slowJobs, s.p.gaveUp, s.meets()})
		}
		if !s.mark.ok {
			t.Fatalf("hour %v: no mark was left", g)
		}
		s.hour = -1
		for k, n := range counts {
			f.Hot[g.d][g.h] = n
			s.replay()
			whole := outcome{slices.Clone(s.p.fastJobs), s.p.slowJobs, s.p.gaveUp, s.meets()}
			if !slices.Equal(whole.fast, marked[k].fast) || whole.slow != marked[k].slow || whole.gaveUp != marked[k].gaveUp || whole.meets != marked[k].meets {
				t.Errorf("hour %v at %d: from the mark %+v, the whole week %+v", g, n, marked[k], whole)
			}
		}
		f.Hot[g.d][g.h] = peak
	}
}
