// The search for the cheapest fixed schedule meeting the goal, with the replay itself as judge.
package simulate

import (
	"fmt"
	"math"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// Meets reports whether a share q of the queue times is within goal (nearest rank: the q
// percentile is at most goal).
func Meets(queue []time.Duration, goal time.Duration, q float64) bool {
	fast := 0
	for _, d := range queue {
		if d <= goal {
			fast++
		}
	}
	return fast >= int(math.Ceil(q*float64(len(queue))))
}

// SearchFixed finds the cheapest Fixed schedule whose replay meets the goal at percentile q,
// starting from the most jobs each hour saw in a minute. First each of the 48 hours (weekday and
// weekend) gets the smallest count that meets the goal for the jobs arriving in it and for the
// week, the others held; then, the costliest hours first, each comes down as far as the whole week
// still meets the goal. Every step is a full replay (reuse carries instances from one hour into the
// next). The search sees the very week it is judged on: it is the best a fixed schedule can do in
// hindsight, not what a team would guess.
func SearchFixed(jobs []jobtrace.Job, m Model, goal time.Duration, q float64, loc *time.Location) (*Fixed, *Result, error) {
	f := &Fixed{Loc: loc, Lead: m.Starts.Cold + m.Interval}
	peak := peakPerHour(jobs, f, 2*f.Lead)
	f.Hot = peak
	replay := func() (*Result, error) { return Run(jobs, m, f, goal) }
	// The peaks serve nearly every job hot; where refills lag behind bursts, double them.
	for n := 0; ; n++ {
		r, err := replay()
		if err != nil {
			return nil, nil, err
		}
		if Meets(r.queue, goal, q) {
			break
		}
		if n == 4 {
			return nil, nil, fmt.Errorf("no fixed schedule up to %d times the busiest minutes meets the goal (p95 %s)", 1<<n, r.P95)
		}
		for d := range 2 {
			for h := range 24 {
				f.Hot[d][h] = max(1, 2*f.Hot[d][h])
			}
		}
	}
	slotJobs := func(r *Result, d, h int) []time.Duration {
		var out []time.Duration
		for i, j := range jobs {
			if jd, jh := f.slot(j.Created); jd == d && jh == h {
				out = append(out, r.queue[i])
			}
		}
		return out
	}
	lowest := func(d, h int, ok func(*Result) bool) error {
		lo, hi := 0, f.Hot[d][h] // hi meets (checked by the caller's invariant)
		for lo < hi {
			mid := (lo + hi) / 2
			f.Hot[d][h] = mid
			r, err := replay()
			if err != nil {
				return err
			}
			if ok(r) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		f.Hot[d][h] = hi
		return nil
	}
	for d := range 2 {
		for h := range 24 {
			ok := func(r *Result) bool { return Meets(r.queue, goal, q) && Meets(slotJobs(r, d, h), goal, q) }
			if err := lowest(d, h, ok); err != nil {
				return nil, nil, err
			}
		}
	}
	for range 48 {
		d, h := costliest(f, peak)
		if d < 0 {
			break
		}
		peak[d][h] = -1 // visited
		if err := lowest(d, h, func(r *Result) bool { return Meets(r.queue, goal, q) }); err != nil {
			return nil, nil, err
		}
	}
	r, err := replay()
	return f, r, err
}

// costliest is the unvisited hour (peak >= 0) with the largest count.
func costliest(f *Fixed, peak [2][24]int) (int, int) {
	bd, bh, best := -1, -1, -1
	for d := range 2 {
		for h := range 24 {
			if peak[d][h] >= 0 && f.Hot[d][h] > best {
				bd, bh, best = d, h, f.Hot[d][h]
			}
		}
	}
	return bd, bh
}

// peakPerHour is, per hour of f, the most jobs that arrived within one window: a count that
// serves nearly every job hot.
func peakPerHour(jobs []jobtrace.Job, f *Fixed, window time.Duration) [2][24]int {
	var peak [2][24]int
	first := 0
	for i, j := range jobs {
		for jobs[first].Created.Add(window).Before(j.Created) {
			first++
		}
		d, h := f.slot(j.Created)
		peak[d][h] = max(peak[d][h], i-first+1)
	}
	return peak
}
