// Table tests of schedule evaluation (precedence, midnight-crossing ranges, weekends, DST in
// Europe/Paris and America/New_York), NextChange and validation; benchmarks of At and NextChange.
package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func rng(start, end string) TimeRange { return TimeRange{Start: start, End: end} }

func match(days []string, ranges ...TimeRange) *Match { return &Match{Days: days, Times: ranges} }

var everyDay = []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

// seedSpec is the warm-pool example of the issue: a default, nights every day, weekends.
func seedSpec(tz string) Spec {
	return Spec{Timezone: tz, Schedules: []Schedule{
		{Name: "default", Hot: 1, Stopped: 2},
		{Name: "nights", Match: match(everyDay, rng("22:00", "06:00")), Hot: 0, Stopped: 2},
		{Name: "weekends", Match: match([]string{"saturday", "sunday"}), Hot: 0, Stopped: 1},
	}}
}

func TestAt(t *testing.T) {
	t.Parallel()
	type probe struct {
		at   string // UTC instant
		want string // schedule name; "" for none
	}
	cases := []struct {
		name   string
		spec   Spec
		probes []probe
	}{
		{
			name: "seed example in Paris (CET, UTC+1)",
			spec: seedSpec("Europe/Paris"),
			probes: []probe{
				{"2025-03-28T20:59:59Z", "default"}, // Friday 21:59:59 CET
				{"2025-03-28T21:00:00Z", "nights"},  // Friday 22:00 CET
				{"2025-03-29T04:59:00Z", "nights"},  // Saturday 05:59 CET: declared before weekends
				{"2025-03-29T05:00:00Z", "weekends"},
				{"2025-03-29T12:00:00Z", "weekends"},
				{"2025-03-31T03:30:00Z", "nights"},  // Monday 05:30 CEST, the range began on Sunday
				{"2025-03-31T04:00:00Z", "default"}, // Monday 06:00 CEST: end is exclusive
			},
		},
		{
			name: "a midnight-crossing range belongs to the day it starts on",
			spec: Spec{Timezone: "UTC", Schedules: []Schedule{
				{Name: "friday-night", Match: match([]string{"friday"}, rng("22:00", "06:00")), Hot: 3},
			}},
			probes: []probe{
				{"2025-06-06T21:59:00Z", ""},             // Friday 21:59
				{"2025-06-06T22:00:00Z", "friday-night"}, // Friday 22:00
				{"2025-06-07T05:59:00Z", "friday-night"}, // Saturday 05:59
				{"2025-06-07T06:00:00Z", ""},             // Saturday 06:00
				{"2025-06-06T05:00:00Z", ""},             // Friday 05:00 belongs to Thursday's range
				{"2025-06-07T22:30:00Z", ""},             // Saturday night is not listed
			},
		},
		{
			name: "crossing the week boundary: saturday and sunday nights",
			spec: Spec{Schedules: []Schedule{
				{Name: "sat", Match: match([]string{"saturday"}, rng("23:00", "01:00")), Hot: 1},
				{Name: "sun", Match: match([]string{"sunday"}, rng("22:00", "02:00")), Hot: 2},
			}},
			probes: []probe{
				{"2025-06-08T00:30:00Z", "sat"}, // Sunday 00:30, started Saturday
				{"2025-06-08T01:00:00Z", ""},    // Sunday 01:00
				{"2025-06-08T22:00:00Z", "sun"}, // Sunday 22:00
				{"2025-06-09T01:59:00Z", "sun"}, // Monday 01:59, started Sunday
				{"2025-06-09T02:00:00Z", ""},
				{"2025-06-07T00:30:00Z", ""}, // Saturday 00:30 would belong to Friday
			},
		},
		{
			name: "24:00 ends the day and a range ending at 00:00 stops at midnight",
			spec: Spec{Schedules: []Schedule{
				{Name: "evening", Match: match([]string{"friday"}, rng("18:00", "24:00")), Hot: 1},
				{Name: "late", Match: match([]string{"saturday"}, rng("20:00", "00:00")), Hot: 2},
				{Name: "whole", Match: match([]string{"monday"}, rng("00:00", "24:00")), Hot: 3},
			}},
			probes: []probe{
				{"2025-06-06T23:59:59Z", "evening"},
				{"2025-06-07T00:00:00Z", ""},
				{"2025-06-07T23:59:00Z", "late"},
				{"2025-06-08T00:00:00Z", ""},
				{"2025-06-09T00:00:00Z", "whole"},
				{"2025-06-09T23:59:59Z", "whole"},
				{"2025-06-10T00:00:00Z", ""},
			},
		},
		{
			name: "times without days match every day; first match in declared order wins",
			spec: Spec{Schedules: []Schedule{
				{Name: "base", Hot: 1},
				{Name: "lunch", Match: match(nil, rng("12:00", "13:00"), rng("18:00", "19:00")), Hot: 5},
				{Name: "weekdays", Match: match([]string{"monday", "tuesday", "wednesday", "thursday", "friday"}, rng("08:00", "18:30")), Hot: 10},
			}},
			probes: []probe{
				{"2025-06-09T12:30:00Z", "lunch"}, // Monday: both match, lunch declared first
				{"2025-06-09T18:15:00Z", "lunch"},
				{"2025-06-09T13:00:00Z", "weekdays"},
				{"2025-06-08T12:30:00Z", "lunch"}, // Sunday
				{"2025-06-08T09:00:00Z", "base"},
			},
		},
		{
			name: "spring forward in Paris: 02:00-03:00 does not exist on 2025-03-30",
			spec: Spec{Timezone: "Europe/Paris", Schedules: []Schedule{
				{Name: "in-gap", Match: match([]string{"sunday"}, rng("02:00", "02:45")), Hot: 1},
				{Name: "around-gap", Match: match([]string{"sunday"}, rng("01:30", "03:30")), Hot: 2},
			}},
			probes: []probe{
				{"2025-03-30T00:29:00Z", ""},           // 01:29 CET
				{"2025-03-30T00:30:00Z", "around-gap"}, // 01:30 CET
				{"2025-03-30T00:59:59Z", "around-gap"}, // 01:59:59 CET, the last second before the gap
				{"2025-03-30T01:00:00Z", "around-gap"}, // 03:00 CEST: the wall clock jumped over in-gap
				{"2025-03-30T01:29:00Z", "around-gap"}, // 03:29 CEST
				{"2025-03-30T01:30:00Z", ""},           // 03:30 CEST: one real hour after 01:30
				{"2025-03-23T01:15:00Z", "in-gap"},     // a week before, 02:15 CET exists
			},
		},
		{
			name: "fall back in Paris: 02:00-03:00 happens twice on 2025-10-26",
			spec: Spec{Timezone: "Europe/Paris", Schedules: []Schedule{
				{Name: "repeated", Match: match([]string{"sunday"}, rng("02:00", "02:30")), Hot: 1},
				{Name: "night", Match: match([]string{"saturday"}, rng("22:00", "06:00")), Hot: 2},
			}},
			probes: []probe{
				{"2025-10-25T19:59:00Z", ""},         // Saturday 21:59 CEST
				{"2025-10-25T20:00:00Z", "night"},    // Saturday 22:00 CEST
				{"2025-10-26T00:15:00Z", "repeated"}, // 02:15 CEST, first time
				{"2025-10-26T00:45:00Z", "night"},    // 02:45 CEST
				{"2025-10-26T01:15:00Z", "repeated"}, // 02:15 CET, second time
				{"2025-10-26T04:59:00Z", "night"},    // 05:59 CET
				{"2025-10-26T05:00:00Z", ""},         // 06:00 CET: the night lasted 9 real hours
			},
		},
		{
			name: "spring forward in New York: 02:00-03:00 does not exist on 2025-03-09",
			spec: Spec{Timezone: "America/New_York", Schedules: []Schedule{
				{Name: "in-gap", Match: match([]string{"sunday"}, rng("02:00", "03:00")), Hot: 1},
				{Name: "into-gap", Match: match([]string{"sunday"}, rng("01:00", "02:30")), Hot: 2},
				{Name: "default", Hot: 9},
			}},
			probes: []probe{
				{"2025-03-09T05:59:00Z", "default"},  // 00:59 EST
				{"2025-03-09T06:00:00Z", "into-gap"}, // 01:00 EST
				{"2025-03-09T06:59:59Z", "into-gap"}, // 01:59:59 EST
				{"2025-03-09T07:00:00Z", "default"},  // 03:00 EDT: neither range exists past the gap
				{"2025-03-02T07:30:00Z", "in-gap"},   // a week before: 02:30 EST
			},
		},
		{
			name: "fall back in New York: 01:00-02:00 happens twice on 2025-11-02",
			spec: Spec{Timezone: "America/New_York", Schedules: []Schedule{
				{Name: "repeated", Match: match([]string{"sunday"}, rng("01:00", "02:00")), Hot: 1},
				{Name: "default", Hot: 9},
			}},
			probes: []probe{
				{"2025-11-02T04:59:00Z", "default"},  // 00:59 EDT
				{"2025-11-02T05:30:00Z", "repeated"}, // 01:30 EDT
				{"2025-11-02T06:30:00Z", "repeated"}, // 01:30 EST, second time
				{"2025-11-02T07:00:00Z", "default"},  // 02:00 EST
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cal, err := tc.spec.Compile()
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			byName := map[string]Schedule{}
			for _, s := range tc.spec.Schedules {
				byName[s.Name] = s
			}
			for _, p := range tc.probes {
				got := cal.At(utc(p.at))
				s := byName[p.want]
				want := Target{Schedule: p.want, Default: p.want == "" || s.IsDefault(), Hot: s.Hot, Stopped: s.Stopped}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("At(%s = %s local) (-want +got):\n%s", p.at, utc(p.at).In(cal.Location()).Format("Mon 15:04 MST"), diff)
				}
			}
		})
	}
}

func TestNextChange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		spec     Spec
		at       string
		wantAt   string // "" for never
		wantName string
	}{
		{"to nights in Paris", seedSpec("Europe/Paris"), "2025-03-28T20:10:30Z", "2025-03-28T21:00:00Z", "nights"},
		{"nights to weekends", seedSpec("Europe/Paris"), "2025-03-29T01:00:00Z", "2025-03-29T05:00:00Z", "weekends"},
		// Sunday 22:00 CEST the day the clocks sprang forward: the night starts at 20:00 UTC.
		{"after spring forward", seedSpec("Europe/Paris"), "2025-03-30T12:00:00Z", "2025-03-30T20:00:00Z", "nights"},
		{"night ends across fall back", Spec{Timezone: "Europe/Paris", Schedules: []Schedule{
			{Name: "night", Match: match([]string{"saturday"}, rng("22:00", "06:00")), Hot: 2},
		}}, "2025-10-25T21:00:00Z", "2025-10-26T05:00:00Z", ""},
		{"never changes", Spec{Schedules: []Schedule{{Name: "default", Hot: 1}}}, "2025-01-01T00:00:00Z", "", "default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cal, err := tc.spec.Compile()
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			gotAt, got := cal.NextChange(utc(tc.at))
			var wantAt time.Time
			if tc.wantAt != "" {
				wantAt = utc(tc.wantAt)
			}
			if !gotAt.Equal(wantAt) || got.Schedule != tc.wantName {
				t.Errorf("NextChange(%s) = %s %q, want %s %q", tc.at, gotAt.UTC().Format(time.RFC3339), got.Schedule, tc.wantAt, tc.wantName)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Schedule{Name: "day", Match: match([]string{"monday"}, rng("08:00", "18:00")), Hot: 1}
	cases := []struct {
		name string
		spec Spec
		want []string // "path: substring" per problem, in order
	}{
		{"valid seed", seedSpec("Europe/Paris"), nil},
		{"valid empty", Spec{}, nil},
		{"unknown timezone", Spec{Timezone: "Mars/Olympus_Mons", Schedules: []Schedule{ok}},
			[]string{`timezone: timezone "Mars/Olympus_Mons" is not a known IANA zone`}},
		{"Local timezone", Spec{Timezone: "Local"}, []string{`timezone: timezone "Local" depends on the machine`}},
		{"bad day names", Spec{Schedules: []Schedule{{Name: "x", Match: match([]string{"Monday", "funday", "tue"})}}},
			[]string{
				`schedules[0].match.days[0]: day "Monday" is not a day name (did you mean "monday"?)`,
				`schedules[0].match.days[1]: day "funday" is not a day name: use monday`,
				`schedules[0].match.days[2]: day "tue" is not a day name (did you mean "tuesday"?)`,
			}},
		{"duplicate day", Spec{Schedules: []Schedule{{Name: "x", Match: match([]string{"monday", "monday"})}}},
			[]string{`schedules[0].match.days[1]: day "monday" is listed twice`}},
		{"bad times", Spec{Schedules: []Schedule{{Name: "x", Match: match(nil,
			rng("8:00", "25:00"), rng("24:00", "10:00"), rng("10:60", "24:01"), rng("", "noon"))}}},
			[]string{
				`schedules[0].match.times[0].start: time "8:00": use 24-hour HH:MM`,
				`schedules[0].match.times[0].end: time "25:00": hours go from 00 to 23`,
				`schedules[0].match.times[1].start: time "24:00": 24:00 is allowed only as the end`,
				`schedules[0].match.times[2].start: time "10:60": minutes go from 00 to 59`,
				`schedules[0].match.times[2].end: time "24:01": hours go from 00 to 23`,
				`schedules[0].match.times[3].start: time "": use 24-hour HH:MM`,
				`schedules[0].match.times[3].end: time "noon": use 24-hour HH:MM`,
			}},
		{"empty ranges", Spec{Schedules: []Schedule{{Name: "x", Match: match(nil, rng("08:00", "08:00"), rng("00:00", "00:00"))}}},
			[]string{
				`schedules[0].match.times[0].end: time range 08:00-08:00 is empty`,
				`schedules[0].match.times[1].end: time range 00:00-00:00 is empty`,
			}},
		{"negative and huge counts", Spec{Schedules: []Schedule{{Name: "x", Hot: -1, Stopped: MaxCount + 1}}},
			[]string{
				`schedules[0].hot: count -1: must be between 0 and 1000`,
				`schedules[0].stopped: count 1001: must be between 0 and 1000`,
			}},
		{"duplicate names", Spec{Schedules: []Schedule{ok, {Name: "day", Match: match([]string{"friday"})}}},
			[]string{`schedules[1].name: schedule name "day" is used by schedules 0 and 1`}},
		{"bad names", Spec{Schedules: []Schedule{{Name: ""}, {Name: "has space", Match: match([]string{"friday"})}}},
			[]string{`schedules[0].name: schedule name "": use 1-63 letters`, `schedules[1].name: schedule name "has space"`}},
		{"two defaults", Spec{Schedules: []Schedule{{Name: "default"}, ok, {Name: "other", Match: &Match{}}}},
			[]string{`schedules[2]: schedules "default" and "other" both have neither days nor time ranges: only one default`}},
		{"default with a match", Spec{Schedules: []Schedule{{Name: "default", Match: match([]string{"friday"})}}},
			[]string{`schedules[0].name: the schedule named "default" is the default schedule and must have neither`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.spec.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: unexpected error %v", err)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Validate = %v, want Errors", err)
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate found %d problems, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

func TestLoadLocationCached(t *testing.T) {
	t.Parallel()
	a, err := LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("LoadLocation returned two locations for one name")
	}
	if l, _ := LoadLocation(""); l != time.UTC {
		t.Errorf(`LoadLocation("") = %v, want UTC`, l)
	}
}

func BenchmarkAt(b *testing.B) {
	cal, err := seedSpec("Europe/Paris").Compile()
	if err != nil {
		b.Fatal(err)
	}
	t0 := utc("2025-03-28T20:10:30Z")
	for i := 0; b.Loop(); i++ {
		cal.At(t0.Add(time.Duration(i) * time.Minute))
	}
}

func BenchmarkNextChange(b *testing.B) {
	cal, err := seedSpec("Europe/Paris").Compile()
	if err != nil {
		b.Fatal(err)
	}
	t0 := utc("2025-03-28T06:10:30Z") // 16 local hours before the next change
	for b.Loop() {
		cal.NextChange(t0)
	}
}
