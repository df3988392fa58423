// The week plan: how many idle hot instances each slot of the week needs so that, over the week,
// the share of jobs that find none stays within the goal's slack, at the least instance-hours.
package autoscale

import (
	"container/heap"
)

// WeekPlan is the hot level per slot of the week, and the largest minute seen per slot (the
// stopped buffer's reach).
type WeekPlan struct {
	Level [SlotsPerWeek]int
	Peak  [SlotsPerWeek]int
	// SlowShare is the share of the week's jobs the plan expects to find no idle hot instance.
	SlowShare float64
}

// PlanWeek spreads the goal's slack over the week: every slot starts at the level that serves all
// its recorded minutes hot, then levels come down where a step saves the most instance-hours for
// the fewest jobs left without a hot instance, until those jobs reach slack (a share of the week's
// jobs, such as 0.05 × a safety factor for a p95 goal). slowJobs is convex in the level, so taking
// the cheapest step first is optimal over the buckets.
//
// A slot is planned from its neighbours as well as itself (Pooled): a matrix fan-out seen on
// Tuesday at 10:20 may come any weekday near that time, and one week of history is thin.
func PlanWeek(p *Profile, slack float64) *WeekPlan {
	plan := &WeekPlan{}
	total := 0.0
	weeks := make([]float64, SlotsPerWeek)
	h := &steps{}
	pooled := Pooled(p)
	for i, s := range pooled.Slots {
		m, j := s.totals()
		if m == 0 {
			continue
		}
		weeks[i] = max(1, m/SlotLength.Minutes())
		total += j / weeks[i]
		b := lastBucket(s)
		plan.Level[i], plan.Peak[i] = s.top(b), s.top(b)
		h.pushNext(s, i, b, weeks[i])
	}
	heap.Init(h)
	budget, used := slack*total, 0.0
	for h.Len() > 0 {
		st := heap.Pop(h).(step)
		if used+st.slow > budget {
			continue // this slot stays; a cheaper step elsewhere may still fit
		}
		used += st.slow
		plan.Level[st.slot] = pooled.Slots[st.slot].top(st.to)
		h.pushNextHeap(pooled.Slots[st.slot], st.slot, st.to, weeks[st.slot])
	}
	if total > 0 {
		plan.SlowShare = used / total
	}
	return plan
}

func lastBucket(s Slot) int {
	for b := len(s.Minutes) - 1; b > 0; b-- {
		if s.Minutes[b] > 0 {
			return b
		}
	}
	return 0
}

// step lowers one slot's level from bucket from to bucket to: saved instance-hours per week, at
// the cost of slow more jobs per week.
type step struct {
	slot, to   int
	saved      float64
	slow       float64
	costPerJob float64
}

type steps []step

func (h steps) Len() int           { return len(h) }
func (h steps) Less(i, j int) bool { return h[i].costPerJob < h[j].costPerJob }
func (h steps) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *steps) Push(x any)        { *h = append(*h, x.(step)) }
func (h *steps) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// nextStep is the step from bucket b of slot i one bucket down, if any.
func nextStep(s Slot, i, b int, weeks float64) (step, bool) {
	if b == 0 {
		return step{}, false
	}
	from, to := s.top(b), s.top(b-1)
	slow := s.slowJobs(to, weeks) - s.slowJobs(from, weeks)
	saved := float64(from-to) * SlotLength.Hours()
	return step{slot: i, to: b - 1, saved: saved, slow: slow, costPerJob: slow / saved}, true
}

func (h *steps) pushNext(s Slot, i, b int, weeks float64) {
	if st, ok := nextStep(s, i, b, weeks); ok {
		*h = append(*h, st)
	}
}

func (h *steps) pushNextHeap(s Slot, i, b int, weeks float64) {
	if st, ok := nextStep(s, i, b, weeks); ok {
		heap.Push(h, st)
	}
}

// Neighbours is how many slots either side of a slot, on every day of the same kind (weekdays, or
// Saturday and Sunday), Pooled adds to it.
const Neighbours = 2

// Pooled is p with each slot's histogram summed with its neighbours'.
func Pooled(p *Profile) *Profile {
	out := &Profile{}
	const perDay = SlotsPerWeek / 7
	for i := range SlotsPerWeek {
		day, t := i/perDay, i%perDay
		for d := range 7 {
			if (d >= 5) != (day >= 5) {
				continue
			}
			for k := -Neighbours; k <= Neighbours; k++ {
				src := p.Slots[(d*perDay+t+k+SlotsPerWeek)%SlotsPerWeek]
				dst := &out.Slots[i]
				for b := range src.Minutes {
					if dst.Minutes == nil {
						dst.Minutes, dst.Jobs = make([]uint32, Buckets), make([]uint32, Buckets)
					}
					dst.Minutes[b] += src.Minutes[b]
					dst.Jobs[b] += src.Jobs[b]
				}
			}
		}
	}
	return out
}
