package poolsize

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// The half-life's clock: started by the first pass, restarted (never aged) when it reads a time
// ahead of now, and a gap longer than maxHalvings half-lives empties the profile once.
func TestAgeProfileClock(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		halvedAt   time.Time
		now        time.Time
		halvings   int
		wantAt     time.Time
		wantMinute uint32
	}{
		{"first pass", time.Time{}, t0, 0, t0, 64},
		{"within the week", t0, t0.Add(ProfileHalfLife - time.Second), 0, t0, 64},
		{"two weeks", t0, t0.Add(2*ProfileHalfLife + time.Hour), 2, t0.Add(2 * ProfileHalfLife), 16},
		{"clock gone back", t0.Add(time.Hour), t0, 0, t0, 64},
		{"no leader for a year", t0, t0.Add(52 * ProfileHalfLife), maxHalvings, t0.Add(52 * ProfileHalfLife), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prof := &autoscale.Profile{}
			for range 64 {
				prof.Record(0, 1)
			}
			st := store.AutoscaleState{HalvedAt: tc.halvedAt}
			n := ageProfile(&st, prof, tc.now)
			minutes := uint32(0)
			for _, m := range prof.Slots[0].Minutes {
				minutes += m
			}
			if n != tc.halvings || !st.HalvedAt.Equal(tc.wantAt) || minutes != tc.wantMinute {
				t.Errorf("halved %d times to %d minutes, clock at %v; want %d, %d, %v", n, minutes, st.HalvedAt, tc.halvings, tc.wantMinute, tc.wantAt)
			}
		})
	}
}
