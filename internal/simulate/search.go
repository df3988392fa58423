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
	s, err := newSearch(jobs, m, f, goal, q)
	if err != nil {
		return nil, nil, err
	}
	// The peaks serve nearly every job hot; where refills lag behind bursts, double them.
	for n := 0; ; n++ {
		if s.replay(); s.meets() {
			break
		}
		if n == 4 {
			r, _ := Run(jobs, m, f, goal)
			return nil, nil, fmt.Errorf("no fixed schedule up to %d times the busiest minutes meets the goal (p95 %s)", 1<<n, r.P95)
		}
		for d := range 2 {
			for h := range 24 {
				f.Hot[d][h] = max(1, 2*f.Hot[d][h])
			}
		}
	}
	for d := range 2 {
		for h := range 24 {
			s.lowest(d, h, func() bool { return s.meets() && s.meetsHour(d*24+h) })
		}
	}
	for range 48 {
		d, h := costliest(f, peak)
		if d < 0 {
			break
		}
		peak[d][h] = -1 // visited
		s.lower(d, h, s.meets)
	}
	r, err := Run(jobs, m, f, goal)
	return f, r, err
}

// search replays a schedule over and over: each replay keeps no timeline or queue times, only the
// jobs within the goal per hour of the schedule (weekday hours 0-23, weekend hours 24-47).
type search struct {
	jobs  []jobtrace.Job
	f     *Fixed
	p     *pool
	goal  time.Duration
	q     float64
	all   [48]int // jobs per hour
	total int
	// hour is the hour whose count is being searched (-1: none) and mark the replay's state
	// before the first pass that reads it.
	hour int
	mark mark
}

func newSearch(jobs []jobtrace.Job, m Model, f *Fixed, goal time.Duration, q float64) (*search, error) {
	p, err := newPool(jobs, m, f)
	if err != nil {
		return nil, err
	}
	s := &search{jobs: jobs, f: f, p: p, goal: goal, q: q, total: len(jobs), hour: -1}
	p.fast, p.group, p.fastJobs = true, make([]int8, len(jobs)), make([]int, 48)
	p.slowLimit = s.total - int(math.Ceil(q*float64(s.total)))
	for i, j := range jobs {
		d, h := f.slot(j.Created)
		p.group[i] = int8(d*24 + h)
		s.all[d*24+h]++
	}
	return s, nil
}

// replay replays the schedule as it is now. While one hour's count is searched (s.hour >= 0),
// the replay continues from the mark a replay left before the first pass that reads that hour:
// until then every count of it replays the same.
func (s *search) replay() {
	p := s.p
	if s.hour >= 0 && s.mark.ok {
		p.replay(s.jobs, s.goal, &s.mark)
		return
	}
	p.hot, p.stopped, p.busy, p.targetHot, p.targetStopped = 0, 0, 0, 0, 0
	p.warmAt, p.ev, p.seq = p.warmAt[:0], p.ev[:0], 0
	p.slowJobs, p.gaveUp = 0, false
	p.idleNs, p.stoppedNs, p.busyNs = 0, 0, 0
	p.arrived, p.slow, p.all, p.maxQueue = 0, 0, 0, 0
	clear(p.fastJobs)
	if s.hour >= 0 {
		d, h := s.hour/24, s.hour%24
		p.capture, p.markAt = &s.mark, func(at int64) bool {
			t := time.Unix(0, at)
			d1, h1 := s.f.slot(t)
			d2, h2 := s.f.slot(t.Add(s.f.Lead))
			return (d1 == d && h1 == h) || (d2 == d && h2 == h)
		}
	}
	p.replay(s.jobs, s.goal, nil)
	p.capture = nil
}

// searching starts the search of hour (d, h)'s count: the replays continue from its mark.
func (s *search) searching(d, h int) {
	s.hour, s.mark.ok = d*24+h, false
}

func (s *search) meets() bool {
	if s.p.gaveUp {
		return false
	}
	fast := 0
	for _, n := range s.p.fastJobs {
		fast += n
	}
	return fast >= int(math.Ceil(s.q*float64(s.total)))
}

func (s *search) meetsHour(g int) bool {
	return s.p.fastJobs[g] >= int(math.Ceil(s.q*float64(s.all[g])))
}

// lowest brings hour (d, h) down to the smallest count that still passes ok (the count it has
// passes: the caller's invariant).
func (s *search) lowest(d, h int, ok func() bool) {
	f := s.f
	s.searching(d, h)
	defer func() { s.hour = -1 }()
	lo, hi := 0, f.Hot[d][h]
	for lo < hi {
		mid := (lo + hi) / 2
		f.Hot[d][h] = mid
		if s.replay(); ok() {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	f.Hot[d][h] = hi
}

// lower is lowest searched from the top: the count less 1, 2, 4, ... until one fails, then
// bisection between the last that passed and the one that failed. After the first round most hours
// come down little or not at all, so most take one or two replays instead of a bisection from 0
// (the same count where the replays are monotone in the count).
func (s *search) lower(d, h int, ok func() bool) {
	f := s.f
	s.searching(d, h)
	defer func() { s.hour = -1 }()
	top := f.Hot[d][h]
	hi, lo := top, -1 // hi passes; lo fails (-1: none found yet)
	for step := 1; lo < 0 && hi > 0; step *= 2 {
		try := max(0, top-step)
		f.Hot[d][h] = try
		if s.replay(); ok() {
			hi = try
		} else {
			lo = try
		}
	}
	for lo >= 0 && lo+1 < hi {
		mid := (lo + hi) / 2
		f.Hot[d][h] = mid
		if s.replay(); ok() {
			hi = mid
		} else {
			lo = mid
		}
	}
	f.Hot[d][h] = hi
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
