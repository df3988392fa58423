// Package autoscale sizes a warm pool to a queue-time goal: from the demand recorded per slot of
// the week (a compact job-weighted histogram of jobs arriving per minute), live signals and the
// measured start times and prices, it decides how many hot and stopped instances the convergence
// loop keeps, and why. Everything here is a pure function of its inputs: no clock, no I/O.
package autoscale

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// SlotsPerWeek is the resolution of the recorded demand: quarter-hours of the week, Monday 00:00
// first, in the pool's timezone. A hand-written schedule of 672 windows is out of reach; a learned
// one is not, and a burst that recurs at 09:00 needs the pool for its quarter-hour, not its hour.
const (
	SlotLength   = 15 * time.Minute
	SlotsPerWeek = 7 * 24 * 4
)

// levels are the upper bounds of the histogram's buckets of jobs arriving in one minute: 0, then
// about a quarter of a power of two apart up to 1024, then everything above. A bucket is the
// precision the policy sizes a pool to (a burst of 150 is sized as 181, of 40 as 45).
var levels = func() []int {
	l := []int{0}
	for v := 1.0; v < 1024; v *= math.Sqrt2 {
		if n := int(math.Round(v)); n > l[len(l)-1] {
			l = append(l, n)
		}
	}
	return append(l, 1024, math.MaxInt32)
}()

// Buckets is the number of histogram buckets per slot.
var Buckets = len(levels)

// Slot is the demand recorded in one slot of the week: for each bucket, how many minutes had that
// many arrivals and how many jobs arrived in those minutes.
type Slot struct {
	Minutes []uint32 // per bucket
	Jobs    []uint32 // per bucket
}

// Profile is the recorded demand of one pool: a Slot per quarter-hour of the week.
type Profile struct {
	Slots [SlotsPerWeek]Slot
}

// SlotOf is the slot of a time in loc (UTC when nil).
func SlotOf(t time.Time, loc *time.Location) int {
	if loc != nil {
		t = t.In(loc)
	}
	day := (int(t.Weekday()) + 6) % 7 // Monday first
	return day*96 + t.Hour()*4 + t.Minute()/15
}

func bucketOf(n int) int {
	for b, top := range levels {
		if n <= top {
			return b
		}
	}
	return len(levels) - 1
}

// Record adds one observed minute of the slot in which n jobs arrived.
func (p *Profile) Record(slot, n int) {
	s := &p.Slots[slot%SlotsPerWeek]
	if s.Minutes == nil {
		s.Minutes, s.Jobs = make([]uint32, Buckets), make([]uint32, Buckets)
	}
	b := bucketOf(n)
	s.Minutes[b]++
	s.Jobs[b] += uint32(n)
}

// Halve ages the profile: every count is halved (rounded down), so recent weeks weigh more. The
// caller decides when (for example once a week).
func (p *Profile) Halve() {
	for i := range p.Slots {
		for b := range p.Slots[i].Minutes {
			p.Slots[i].Minutes[b] /= 2
			p.Slots[i].Jobs[b] /= 2
		}
	}
}

// minutes and jobs of a slot.
func (s Slot) totals() (minutes, jobs float64) {
	for b := range s.Minutes {
		minutes += float64(s.Minutes[b])
		jobs += float64(s.Jobs[b])
	}
	return minutes, jobs
}

// Mean is the slot's mean arrivals per minute (0 for a slot never observed).
func (s Slot) Mean() float64 {
	m, j := s.totals()
	if m == 0 {
		return 0
	}
	return j / m
}

// slowJobs is how many of the slot's jobs per observed week would find no hot instance if the
// pool held level idle ones at the start of each minute: in a minute with n > level arrivals,
// n - level. weeks scales the counts to one week.
func (s Slot) slowJobs(level int, weeks float64) float64 {
	slow := 0.0
	for b := range s.Minutes {
		if s.Minutes[b] == 0 {
			continue
		}
		mean := float64(s.Jobs[b]) / float64(s.Minutes[b])
		if mean > float64(level) {
			slow += (mean - float64(level)) * float64(s.Minutes[b])
		}
	}
	return slow / weeks
}

// Level is the smallest bucket bound covering a fraction q of the slot's jobs (job-weighted: a
// minute with 100 arrivals weighs 100 times one with 1).
func (s Slot) Level(q float64) int {
	_, jobs := s.totals()
	if jobs == 0 {
		return 0
	}
	acc := 0.0
	for b := range s.Jobs {
		acc += float64(s.Jobs[b])
		if acc >= q*jobs && s.Jobs[b] > 0 {
			return s.top(b)
		}
	}
	return s.top(len(s.Jobs) - 1)
}

// top is the level bucket b stands for: its mean minute, rounded up (the bucket's bound when it
// saw no minute). Buckets are narrow enough (a factor of 1.41) that the mean is within a fifth of
// every minute in it.
func (s Slot) top(b int) int {
	if s.Minutes[b] == 0 {
		return levels[b]
	}
	return int(math.Ceil(float64(s.Jobs[b]) / float64(s.Minutes[b])))
}

// Encode is the profile's compact form for the state table: the non-empty buckets only, as
// varints, base64. An empty profile encodes as "".
func (p *Profile) Encode() string {
	var buf []byte
	for i, s := range p.Slots {
		for b := range s.Minutes {
			if s.Minutes[b] == 0 {
				continue
			}
			buf = binary.AppendUvarint(buf, uint64(i*Buckets+b))
			buf = binary.AppendUvarint(buf, uint64(s.Minutes[b]))
			buf = binary.AppendUvarint(buf, uint64(s.Jobs[b]))
		}
	}
	return base64.RawStdEncoding.EncodeToString(buf)
}

// DecodeProfile reads what Encode wrote; anything else is an error naming the problem.
func DecodeProfile(s string) (*Profile, error) {
	buf, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decoding demand profile: %w", err)
	}
	p := &Profile{}
	for len(buf) > 0 {
		var v [3]uint64
		for k := range v {
			x, n := binary.Uvarint(buf)
			if n <= 0 {
				return nil, errors.New("decoding demand profile: truncated")
			}
			v[k], buf = x, buf[n:]
		}
		slot, b := int(v[0])/Buckets, int(v[0])%Buckets
		if slot >= SlotsPerWeek || v[1] > math.MaxUint32 || v[2] > math.MaxUint32 {
			return nil, fmt.Errorf("decoding demand profile: entry %d out of range", v[0])
		}
		s := &p.Slots[slot]
		if s.Minutes == nil {
			s.Minutes, s.Jobs = make([]uint32, Buckets), make([]uint32, Buckets)
		}
		s.Minutes[b], s.Jobs[b] = uint32(v[1]), uint32(v[2])
	}
	return p, nil
}
