// Package schedule decides how many hot and stopped instances a warm pool should hold at a given
// moment: a pool has a timezone and a list of schedules, each matching days of the week and/or
// wall-clock time ranges, and one optional default schedule without a match.
//
// # Rules
//
//   - Precedence: the first schedule in declared order whose match applies wins. The default
//     schedule (the one with neither days nor time ranges) applies when no other schedule matches,
//     wherever it is declared. With no default and no match the target is zero hot, zero stopped.
//   - Days are lower-case English weekday names ("monday" ... "sunday"). Days alone match those days
//     entirely; time ranges alone match every day; both match the ranges on those days.
//   - Time ranges are "HH:MM" wall-clock times in the pool's timezone, start inclusive, end
//     exclusive. "24:00" is allowed as an end (end of the day); "00:00"-"24:00" is the whole day.
//     A range whose end is earlier than its start crosses midnight and belongs to the day it STARTS
//     on: friday "22:00"-"06:00" matches Friday 22:00 to Saturday 06:00, not Friday 00:00-06:00.
//   - Daylight saving time: ranges are wall-clock times, so "08:00" is 08:00 local time on both sides
//     of a change. In the spring-forward gap (for example 02:00-03:00 in Europe/Paris on the last
//     Sunday of March) those wall-clock minutes do not exist, so a range inside the gap does not match
//     that day; in the fall-back overlap the repeated hour is matched both times it happens.
//   - An empty timezone means UTC. "Local" is refused: it would make the answer depend on the machine.
//
// The zone database is embedded (time/tzdata) so evaluation works on machines and containers
// without /usr/share/zoneinfo; the system database is still preferred where present.
package schedule

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // schedules must evaluate the same on hosts without a zone database
)

// DefaultName is the conventional name of the default schedule. A schedule of that name must not
// have days or time ranges.
const DefaultName = "default"

// MaxCount bounds hot and stopped counts of one schedule: a typo such as 1000 instead of 10 should
// fail validation, not launch a fleet.
const MaxCount = 1000

// MaxSchedules bounds the number of schedules of one pool.
const MaxSchedules = 64

// MaxRanges bounds the number of time ranges of one schedule.
const MaxRanges = 16

// Spec is the schedule configuration of a warm pool, as stored in its JSON spec.
type Spec struct {
	// Timezone is an IANA zone name such as "Europe/Paris"; empty means UTC.
	Timezone  string     `json:"timezone"`
	Schedules []Schedule `json:"schedules"`
}

// Schedule is one named target. Without a match it is the default schedule.
type Schedule struct {
	Name    string `json:"name"`
	Match   *Match `json:"match,omitempty"`
	Hot     int    `json:"hot"`
	Stopped int    `json:"stopped"`
}

// Match says when a schedule applies.
type Match struct {
	Days  []string    `json:"days,omitempty"`
	Times []TimeRange `json:"times,omitempty"`
}

// TimeRange is a wall-clock range "HH:MM" to "HH:MM"; see the package comment for its rules.
type TimeRange struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// IsDefault reports whether the schedule is a default schedule (no days, no time ranges).
func (s Schedule) IsDefault() bool {
	return s.Match == nil || (len(s.Match.Days) == 0 && len(s.Match.Times) == 0)
}

// Target is what a pool should hold at one moment.
type Target struct {
	// Schedule is the name of the schedule in force; empty when nothing matches and there is no
	// default schedule.
	Schedule string
	// Default is true when the default schedule (or, without one, nothing) applies.
	Default bool
	Hot     int
	Stopped int
}

// Calendar is a validated Spec, ready to evaluate.
type Calendar struct {
	loc     *time.Location
	entries []entry // non-default schedules in declared order
	def     *entry
}

type entry struct {
	name         string
	days         uint8 // bit per time.Weekday; 0 means every day
	ranges       []minuteRange
	hot, stopped int
}

// minuteRange is [start, end) in minutes since local midnight; start > end crosses midnight.
type minuteRange struct{ start, end int }

// Compile validates the spec and returns its calendar. The error is an Errors listing every
// problem found.
func (s Spec) Compile() (*Calendar, error) {
	var errs Errors
	loc, err := LoadLocation(s.Timezone)
	if err != nil {
		errs = append(errs, &FieldError{Schedule: -1, Field: "timezone", Item: -1, Err: err})
	}
	if len(s.Schedules) > MaxSchedules {
		errs = append(errs, &FieldError{Schedule: -1, Field: "schedules", Item: -1,
			Err: fmt.Errorf("%d schedules: at most %d are allowed", len(s.Schedules), MaxSchedules)})
	}
	c := &Calendar{loc: loc}
	names := map[string]int{}
	defaultAt := -1
	for i, sc := range s.Schedules {
		fe := func(field string, item int, part string, err error) {
			errs = append(errs, &FieldError{Schedule: i, Field: field, Item: item, Part: part, Err: err})
		}
		if err := ValidateName(sc.Name); err != nil {
			fe("name", -1, "", err)
		} else if j, dup := names[sc.Name]; dup {
			fe("name", -1, "", fmt.Errorf("schedule name %q is used by schedules %d and %d: names must be unique", sc.Name, j, i))
		} else {
			names[sc.Name] = i
		}
		if err := ValidateCount(sc.Hot); err != nil {
			fe("hot", -1, "", err)
		}
		if err := ValidateCount(sc.Stopped); err != nil {
			fe("stopped", -1, "", err)
		}
		e := entry{name: sc.Name, hot: sc.Hot, stopped: sc.Stopped}
		if sc.IsDefault() {
			switch {
			case defaultAt >= 0:
				fe("", -1, "", fmt.Errorf("schedules %q and %q both have neither days nor time ranges: only one default schedule is allowed; give the others days or time ranges",
					s.Schedules[defaultAt].Name, sc.Name))
			default:
				defaultAt = i
				c.def = &e
			}
			continue
		}
		if sc.Name == DefaultName {
			fe("name", -1, "", fmt.Errorf("the schedule named %q is the default schedule and must have neither days nor time ranges; rename it or remove its match", DefaultName))
		}
		seen := map[time.Weekday]bool{}
		for j, d := range sc.Match.Days {
			wd, err := ParseDay(d)
			if err != nil {
				fe("days", j, "", err)
				continue
			}
			if seen[wd] {
				fe("days", j, "", fmt.Errorf("day %q is listed twice", d))
			}
			seen[wd] = true
			e.days |= 1 << wd
		}
		if len(sc.Match.Times) > MaxRanges {
			fe("times", -1, "", fmt.Errorf("%d time ranges: at most %d are allowed", len(sc.Match.Times), MaxRanges))
		}
		for j, tr := range sc.Match.Times {
			r, rerrs := parseRange(tr)
			for _, re := range rerrs {
				fe("times", j, re.part, re.err)
			}
			if len(rerrs) == 0 {
				e.ranges = append(e.ranges, r)
			}
		}
		c.entries = append(c.entries, e)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// Validate reports every problem of the spec as an Errors, or nil.
func (s Spec) Validate() error {
	_, err := s.Compile()
	return err
}

type rangeErr struct {
	part string
	err  error
}

func parseRange(tr TimeRange) (minuteRange, []rangeErr) {
	var errs []rangeErr
	start, err := ParseClock(tr.Start, false)
	if err != nil {
		errs = append(errs, rangeErr{"start", err})
	}
	end, err := ParseClock(tr.End, true)
	if err != nil {
		errs = append(errs, rangeErr{"end", err})
	}
	if len(errs) == 0 {
		if err := ValidateRange(tr.Start, tr.End); err != nil {
			errs = append(errs, rangeErr{"end", err})
		}
	}
	return minuteRange{start, end}, errs
}

// Location is the calendar's timezone.
func (c *Calendar) Location() *time.Location { return c.loc }

// At returns the target in force at t.
func (c *Calendar) At(t time.Time) Target {
	lt := t.In(c.loc)
	wd := lt.Weekday()
	m := lt.Hour()*60 + lt.Minute()
	for i := range c.entries {
		if c.entries[i].matches(wd, m) {
			e := &c.entries[i]
			return Target{Schedule: e.name, Hot: e.hot, Stopped: e.stopped}
		}
	}
	if c.def != nil {
		return Target{Schedule: c.def.name, Default: true, Hot: c.def.hot, Stopped: c.def.stopped}
	}
	return Target{Default: true}
}

// horizon bounds NextChange: every spec repeats weekly, so a target that has not changed in a week
// and a day never will.
const horizon = 8 * 24 * time.Hour

// NextChange returns the first whole minute after t at which the target differs from At(t), and
// the target from then on. It returns the zero time when the target never changes.
func (c *Calendar) NextChange(t time.Time) (time.Time, Target) {
	cur := c.At(t)
	start := t.Truncate(time.Minute)
	// Whole-minute steps in absolute time: every zone in use has an offset of whole minutes, so
	// these are also the local minutes, including across DST changes.
	for u := start.Add(time.Minute); u.Sub(start) <= horizon; u = u.Add(time.Minute) {
		if next := c.At(u); next != cur {
			return u, next
		}
	}
	return time.Time{}, cur
}

func (e *entry) matches(wd time.Weekday, m int) bool {
	if len(e.ranges) == 0 {
		return e.onDay(wd)
	}
	for _, r := range e.ranges {
		if r.start < r.end {
			if e.onDay(wd) && m >= r.start && m < r.end {
				return true
			}
			continue
		}
		// Crossing midnight: the evening part belongs to today, the morning part to the range
		// that started yesterday.
		if (e.onDay(wd) && m >= r.start) || (e.onDay((wd+6)%7) && m < r.end) {
			return true
		}
	}
	return false
}

func (e *entry) onDay(wd time.Weekday) bool { return e.days == 0 || e.days&(1<<wd) != 0 }

// Days lists the accepted day names, Sunday first as in time.Weekday.
var Days = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// ParseDay parses a lower-case English weekday name.
func ParseDay(s string) (time.Weekday, error) {
	for i, d := range Days {
		if s == d {
			return time.Weekday(i), nil
		}
	}
	hint := ""
	for _, d := range Days {
		if strings.EqualFold(s, d) || (len(s) >= 3 && strings.HasPrefix(d, strings.ToLower(s))) {
			hint = fmt.Sprintf(" (did you mean %q?)", d)
			break
		}
	}
	return 0, fmt.Errorf("day %q is not a day name%s: use monday, tuesday, wednesday, thursday, friday, saturday or sunday", s, hint)
}

var clockRE = regexp.MustCompile(`^([0-9]{2}):([0-9]{2})$`)

// ParseClock parses "HH:MM" (24-hour, two digits each) into minutes since midnight. "24:00" is
// accepted only when allow24 is set (as the end of a range).
func ParseClock(s string, allow24 bool) (int, error) {
	m := clockRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("time %q: use 24-hour HH:MM, such as 08:00 or 22:30", s)
	}
	h := int(m[1][0]-'0')*10 + int(m[1][1]-'0')
	mm := int(m[2][0]-'0')*10 + int(m[2][1]-'0')
	switch {
	case h == 24 && mm == 0:
		if !allow24 {
			return 0, fmt.Errorf("time %q: 24:00 is allowed only as the end of a range; a range starts at 00:00 to 23:59", s)
		}
		return 24 * 60, nil
	case h > 23:
		return 0, fmt.Errorf("time %q: hours go from 00 to 23 (24:00 only as an end)", s)
	case mm > 59:
		return 0, fmt.Errorf("time %q: minutes go from 00 to 59", s)
	}
	return h*60 + mm, nil
}

// ValidateRange checks a range whose start and end parse: it must not be empty. An end earlier
// than the start crosses midnight.
func ValidateRange(start, end string) error {
	s, err := ParseClock(start, false)
	if err != nil {
		return err
	}
	e, err := ParseClock(end, true)
	if err != nil {
		return err
	}
	if s == e {
		return fmt.Errorf("time range %s-%s is empty: start and end must differ (00:00-24:00 is the whole day)", start, end)
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$`)

// ValidateName checks a schedule name: 1-63 letters, digits, '-' or '_', starting with a letter or digit.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("schedule name %q: use 1-63 letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

// ValidateCount checks a hot or stopped count.
func ValidateCount(n int) error {
	if n < 0 || n > MaxCount {
		return fmt.Errorf("count %d: must be between 0 and %d", n, MaxCount)
	}
	return nil
}

var locations sync.Map // name -> *time.Location; LoadLocation reads and parses a file each call

// LoadLocation loads an IANA timezone; "" is UTC and "Local" is refused.
func LoadLocation(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, errors.New(`timezone "Local" depends on the machine evaluating the schedule: use an IANA name such as "Europe/Paris" or "UTC"`)
	}
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("timezone %q is not a known IANA zone name (such as \"Europe/Paris\", \"America/New_York\" or \"UTC\")", name)
	}
	locations.Store(name, loc)
	return loc, nil
}
