package runnerversion_test

import (
	"errors"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

func TestCheckFloor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		below   bool
		invalid bool
	}{
		{in: "2.319.0", below: true},
		{in: "2.328.9", below: true},
		{in: "2.329.0"},
		{in: "v2.336.0"},
		{in: "3.0.0"},
		{in: "2.336", invalid: true},
		{in: "latest", invalid: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			_, err := runnerversion.CheckFloor(tc.in)
			if got := errors.Is(err, runnerversion.ErrBelowFloor); got != tc.below {
				t.Errorf("CheckFloor(%q) = %v, below floor want %v", tc.in, err, tc.below)
			}
			if tc.invalid != (err != nil && !tc.below) {
				t.Errorf("CheckFloor(%q) = %v, invalid want %v", tc.in, err, tc.invalid)
			}
		})
	}
}

// The compiled-in release must be one GitHub registers (the 2.319.0 it replaced was refused).
func TestDefaultReleaseIsAboveTheFloor(t *testing.T) {
	t.Parallel()
	if err := runnerversion.Default.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestAssignable(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	rel := func(v string, age time.Duration, security bool) runnerversion.Release {
		return runnerversion.Release{Version: v, Published: now.Add(-age), Security: security}
	}
	for _, tc := range []struct {
		name      string
		installed string
		releases  []runnerversion.Release
		ok        bool
	}{
		{"newest", "2.336.0", []runnerversion.Release{rel("2.336.0", 100*day, false)}, true},
		{"newer within 30 days", "2.335.0", []runnerversion.Release{rel("2.335.0", 90*day, false), rel("2.336.0", 29*day, false)}, true},
		{"newer over 30 days", "2.335.0", []runnerversion.Release{rel("2.336.0", 31*day, false), rel("2.335.0", 90*day, false)}, false},
		{"security release", "2.335.0", []runnerversion.Release{rel("2.336.0", time.Minute, true)}, false},
		{"not yet published", "2.335.0", []runnerversion.Release{rel("2.336.0", -day, true)}, true},
		{"below the floor", "2.328.0", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := runnerversion.Assignable(tc.installed, tc.releases, now)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, runnerversion.ErrTooOld)) {
				t.Errorf("Assignable = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	cur := runnerversion.Release{Version: "2.337.0", Published: now.Add(-8 * day)}
	sec := runnerversion.Release{Version: "2.337.0", Published: now.Add(-time.Hour), Security: true}
	fresh := runnerversion.Release{Version: "2.337.0", Published: now.Add(-time.Hour)}
	for _, tc := range []struct {
		name      string
		installed string
		current   runnerversion.Release
		due       bool
	}{
		{"current", "2.337.0", cur, false},
		{"behind past the lag", "2.336.0", cur, true},
		{"behind within the lag", "2.336.0", fresh, false},
		{"behind a security release", "2.336.0", sec, true},
		{"unreadable", "garbage", fresh, true},
		{"newer than current", "2.338.0", cur, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := runnerversion.Due(tc.installed, tc.current, runnerversion.DefaultLag, now); got != tc.due {
				t.Errorf("Due = %v, want %v", got, tc.due)
			}
		})
	}
}

func TestCheckLag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   time.Duration
		want time.Duration
		bad  bool
	}{
		{0, runnerversion.DefaultLag, false},
		{24 * time.Hour, 24 * time.Hour, false},
		{28 * 24 * time.Hour, 28 * 24 * time.Hour, false},
		{29 * 24 * time.Hour, 0, true},
		{-time.Hour, 0, true},
	} {
		got, err := runnerversion.CheckLag(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("CheckLag(%s) = %s, %v; want %s, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
