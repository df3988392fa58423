package claim

import (
	"slices"
	"testing"
	"time"
)

// reads runs a subscription's schedule from its start t0 and returns the offsets of its reads
// up to until, each read taken when due.
func reads(s *subscription, t0 time.Time, until time.Duration) []time.Duration {
	var out []time.Duration
	for s.due.Sub(t0) <= until {
		out = append(out, s.due.Sub(t0))
		s.schedule(s.due)
	}
	return out
}

func ms(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, f := range v {
		out[i] = time.Duration(f * float64(time.Millisecond))
	}
	return out
}

// The poll of a claim reads at the expected registration and then every ClaimPollInterval for
// expectedReads reads before backing off again, where the back-off alone had grown to 112-250 ms
// by then (each of those intervals waited out by the job). Without an expectation the schedule is
// the plain back-off.
func TestScheduleReadsAtTheExpectedRegistration(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first, most := 50*time.Millisecond, 250*time.Millisecond
	sub := func(expect time.Duration) *subscription {
		s := &subscription{first: first, every: first, max: most, due: t0.Add(first)}
		if expect > 0 {
			s.expected = t0.Add(expect)
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		expect time.Duration
		want   []time.Duration
	}{
		{"no expectation", 0, ms(50, 100, 175, 287.5, 456.25, 706.25, 956.25, 1206.25)},
		{"expected at 400 ms", 400 * time.Millisecond, ms(50, 100, 175, 287.5, 400, 450, 500, 550, 600, 650, 725, 837.5, 1006.25)},
		// A read within the round's slack of the expected time is the one at it.
		{"expected at a read", 105 * time.Millisecond, ms(50, 100, 150, 200, 250, 300, 350, 400, 475)},
		{"expected after two seconds", 2100 * time.Millisecond, ms(50, 100, 175, 287.5, 456.25, 706.25, 956.25, 1206.25, 1456.25, 1706.25, 1956.25, 2100, 2150, 2200, 2250, 2300, 2350)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			last := tc.want[len(tc.want)-1]
			if got := reads(sub(tc.expect), t0, last); !slices.Equal(got, tc.want) {
				t.Errorf("reads at %v, want %v", got, tc.want)
			}
		})
	}
}

// The expectation is the median of the last regSamples lower bounds, and none before
// regMinSamples: a few waits do not shape every later one.
func TestRegTimesMedianOfRecentBounds(t *testing.T) {
	t.Parallel()
	var rt regTimes
	for i, d := range ms(120, 90, 150) {
		rt.add(d)
		if got := rt.expect(); got != 0 {
			t.Fatalf("after %d samples: expect %v, want none yet", i+1, got)
		}
	}
	rt.add(100 * time.Millisecond)
	if got, want := rt.expect(), 120*time.Millisecond; got != want {
		t.Errorf("expect of 90, 100, 120, 150 = %v, want %v (the upper median)", got, want)
	}
	// Registrations that became slower replace the older bounds.
	for range regSamples {
		rt.add(2 * time.Second)
	}
	if got, want := rt.expect(), 2*time.Second; got != want {
		t.Errorf("after %d slower registrations: expect %v, want %v", regSamples, got, want)
	}
}
