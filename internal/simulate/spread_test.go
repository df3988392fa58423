package simulate

// The week plan planned for bursts that come at random times, not at the times the history's came
// (tried for docs/autoscale.md, "Tried: spreading the bursts"; not kept). A matrix fan-out or a
// load test comes when someone pushes: the history says how large and how frequent such bursts
// are, not when the next one comes. A burst that recurs (seen in the same quarter-hour, give or
// take one, on most days of its kind: a nightly matrix, a merge wave, a release train) stays where
// it was; the others are taken out of their slots and spread over the week in proportion to the
// rest of the demand (a fan-out is one run in a few dozen, so it comes where runs come).

import (
	"math"
	"slices"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
)

// burstJobs is the smallest minute Spread counts as a burst.
const burstJobs = 10

// spreadScale is the factor Spread scales every count by, so that a slot's share of a burst
// (about 1/400 of it on a busy weekday quarter-hour) is still a whole number.
const spreadScale = 1024

// spreadProfile is p with its non-recurring burst minutes spread over the week by the rest of the
// demand. Every count is scaled by the same factor in every slot, so PlanWeek and ModelJudge,
// which scale a slot's counts to one week by its observed minutes, read it as they read p.
func spreadProfile(p *autoscale.Profile) *autoscale.Profile {
	const perDay = autoscale.SlotsPerWeek / 7
	var probe autoscale.Profile
	probe.Record(0, burstJobs)
	burstB := slices.IndexFunc(probe.Slots[0].Minutes, func(m uint32) bool { return m > 0 })
	// bursty[d][t]: day d had a burst minute in its slot t.
	var bursty [7][perDay]bool
	for i, s := range p.Slots {
		for b := burstB; b < len(s.Minutes); b++ {
			if s.Minutes[b] > 0 {
				bursty[i/perDay][i%perDay] = true
			}
		}
	}
	recurring := func(i int) bool {
		day, t := i/perDay, i%perDay
		n, days := 0, 0
		for d := range 7 {
			if (d >= 5) != (day >= 5) {
				continue
			}
			days++
			for k := -1; k <= 1; k++ {
				if tt := t + k; tt >= 0 && tt < perDay && bursty[d][tt] {
					n++
					break
				}
			}
		}
		return 2*n > days // on most days of its kind (weekdays: 3 of 5; weekends: both)
	}
	out := &autoscale.Profile{}
	var pool autoscale.Slot
	pool.Minutes, pool.Jobs = make([]uint32, autoscale.Buckets), make([]uint32, autoscale.Buckets)
	base := make([]float64, autoscale.SlotsPerWeek)
	totalBase := 0.0
	for i, s := range p.Slots {
		if s.Minutes == nil {
			continue
		}
		dst := &out.Slots[i]
		dst.Minutes, dst.Jobs = make([]uint32, autoscale.Buckets), make([]uint32, autoscale.Buckets)
		keep := recurring(i)
		for b := range s.Minutes {
			if b >= burstB && !keep {
				pool.Minutes[b] += s.Minutes[b]
				pool.Jobs[b] += s.Jobs[b]
				// The minute stays observed, as a quiet one.
				dst.Minutes[0] += s.Minutes[b] * spreadScale
				continue
			}
			dst.Minutes[b] += s.Minutes[b] * spreadScale
			dst.Jobs[b] += s.Jobs[b] * spreadScale
			if b < burstB {
				base[i] += float64(s.Jobs[b])
			}
		}
		totalBase += base[i]
	}
	if totalBase == 0 {
		return out
	}
	for i := range out.Slots {
		dst := &out.Slots[i]
		if dst.Minutes == nil || base[i] == 0 {
			continue
		}
		w := base[i] / totalBase * spreadScale
		added := uint32(0)
		for b := burstB; b < autoscale.Buckets; b++ {
			if pool.Minutes[b] == 0 {
				continue
			}
			m := uint32(math.Round(float64(pool.Minutes[b]) * w))
			if m == 0 {
				continue
			}
			dst.Minutes[b] += m
			dst.Jobs[b] += uint32(math.Round(float64(pool.Jobs[b]) * float64(m) / float64(pool.Minutes[b])))
			added += m
		}
		// The minutes a burst now takes were quiet ones: the slot's observed minutes stay.
		dst.Minutes[0] -= min(dst.Minutes[0], added)
	}
	return out
}
