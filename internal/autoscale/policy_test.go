package autoscale

import (
	"strings"
	"testing"
	"time"
)

// week records the same minutes into every slot: n jobs in each of the slot's 15 minutes, plus one
// burst minute of burst jobs at the given slots.
func week(n int, bursts map[int]int) *Profile {
	p := &Profile{}
	for s := range SlotsPerWeek {
		for m := range 15 {
			if b, ok := bursts[s]; ok && m == 0 {
				p.Record(s, b)
				continue
			}
			p.Record(s, n)
		}
	}
	return p
}

var anchors = Starts{Hot: 2 * time.Second, Stopped: 14 * time.Second, Cold: 27 * time.Second}
var prices = Prices{HotPerHour: 0.085, StoppedPerHour: 0.004}

func base(p *Profile, slack float64) Input {
	return Input{
		Plan: PlanWeek(p, slack), Profile: p, Starts: anchors, Prices: prices, Goal: 5 * time.Second,
		Interval: 30 * time.Second, Cooldown: 5 * time.Minute,
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	steady := week(2, nil)
	burst := week(1, map[int]int{36: 100}) // Monday 09:00
	tests := []struct {
		name        string
		in          func() Input
		hot, stop   int
		conflict    string
		reasonMatch string
	}{
		{"steady demand keeps its level hot", func() Input { return base(steady, 0) }, 2, 0, "", ""},
		{"a recurring burst is ready before its quarter-hour", func() Input {
			in := base(burst, 0)
			in.Slot, in.Into = 33, 14*time.Minute+30*time.Second
			return in
		}, 100, 0, "", "ready before it begins"},
		{"the burst's slot itself keeps its level", func() Input {
			in := base(burst, 0)
			in.Slot = 36
			return in
		}, 100, 0, "", ""},
		{"a p95 goal buys no stopped instance for the burst its slack leaves slow", func() Input {
			in := base(burst, 0.05)
			in.Slot = 36
			return in
		}, 1, 0, "", "meets no p99 goal"},
		{"a p99 goal keeps stopped as the tail's buffer", func() Input {
			in := base(burst, 0.05)
			in.Slot, in.GoalP99 = 36, 30*time.Second
			return in
		}, 1, 99, "", "tail's buffer for the p99 goal 30s"},
		{"a p99 goal tighter than a stopped start keeps no stopped", func() Input {
			in := base(burst, 0.05)
			in.Slot, in.GoalP99 = 36, 10*time.Second
			return in
		}, 1, 0, "", "meets no p99 goal"},
		{"the plan's own step down is taken at once", func() Input {
			in := base(steady, 0)
			in.Prev = State{Hot: 10, Level: 10, LowFor: time.Minute}
			return in
		}, 2, 0, "", ""},
		{"live demand above the plan is held for the cooldown", func() Input {
			in := base(steady, 0)
			in.Prev = State{Hot: 10, Level: 4, LowFor: time.Minute}
			return in
		}, 8, 0, "", "holding 8 hot"},
		{"live demand above the forecast scales up at once", func() Input {
			in := base(steady, 0)
			in.Live = Live{Arrived: 10, Waiting: 6, InFlight: 2}
			return in
		}, 6, 0, "", "4 waiting jobs"},
		{"scale-down waits for the cooldown", func() Input {
			in := base(steady, 0)
			in.Prev = State{Hot: 10, LowFor: time.Minute}
			return in
		}, 10, 0, "", "holding 10 hot"},
		{"scale-down after the cooldown", func() Input {
			in := base(steady, 0)
			in.Prev = State{Hot: 10, LowFor: 5 * time.Minute}
			return in
		}, 2, 0, "", "scaling down"},
		{"bounds: max caps the goal and says so", func() Input {
			in := base(burst, 0)
			in.Slot, in.Bounds = 36, Bounds{MaxHot: 20}
			return in
		}, 20, 0, "max is 20", ""},
		{"bounds: min holds an idle pool", func() Input {
			in := base(week(0, nil), 0)
			in.Bounds = Bounds{MinHot: 3, MinStopped: 1}
			return in
		}, 3, 1, "", "minimum"},
		{"budget cuts stopped first", func() Input {
			in := base(burst, 0.05)
			in.Slot, in.Budget, in.GoalP99 = 36, 0.2, 30*time.Second
			return in
		}, 1, 28, "", "stopped cut"},
		{"a goal the budget cannot pay for is a conflict", func() Input {
			in := base(burst, 0)
			in.Slot, in.Budget = 36, 1
			return in
		}, 11, 0, "budget $1.00/h pays for 11", ""},
		{"stopped within the goal replaces hot beyond the mean", func() Input {
			in := base(burst, 0)
			in.Slot, in.Goal = 36, 20*time.Second
			return in
		}, 8, 92, "", "within the goal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := Decide(tt.in())
			if d.Hot != tt.hot || d.Stopped != tt.stop {
				t.Errorf("targets %d hot, %d stopped; want %d, %d (reasons %q)", d.Hot, d.Stopped, tt.hot, tt.stop, d.Reasons)
			}
			if !strings.Contains(d.Conflict, tt.conflict) || (tt.conflict == "") != (d.Conflict == "") {
				t.Errorf("conflict %q, want %q", d.Conflict, tt.conflict)
			}
			if tt.reasonMatch != "" && !strings.Contains(strings.Join(d.Reasons, "; "), tt.reasonMatch) {
				t.Errorf("reasons %q lack %q", d.Reasons, tt.reasonMatch)
			}
		})
	}
}

func TestPlanWeekSpendsSlackWhereItSavesMost(t *testing.T) {
	t.Parallel()
	// One burst of 100 on Monday 09:00 among 1 job a minute elsewhere: the burst is 100 of
	// ~10,000 jobs a week, so a 5 % slack leaves it to the tail, and no slack covers it.
	p := week(1, map[int]int{36: 100})
	if got := PlanWeek(p, 0).Level[36]; got < 100 {
		t.Errorf("no slack: burst slot level %d, want at least 100", got)
	}
	plan := PlanWeek(p, 0.05)
	ones := 0
	for _, l := range plan.Level {
		if l == 1 {
			ones++
		}
	}
	// The slack (~509 jobs) pays for the burst (99) first, then for ~27 quiet slots at 0.
	if plan.Level[36] > 1 || ones < SlotsPerWeek-30 {
		t.Errorf("5%% slack: burst slot level %d, want at most 1; %d quiet slots at 1, want at least %d", plan.Level[36], ones, SlotsPerWeek-30)
	}
	if plan.SlowShare > 0.05 || plan.SlowShare == 0 {
		t.Errorf("slow share %.4f, want in (0, 0.05]", plan.SlowShare)
	}
}

func TestProfileEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	p := week(3, map[int]int{5: 2000, 600: 40})
	enc := p.Encode()
	got, err := DecodeProfile(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Encode() != enc {
		t.Error("decoded profile encodes differently")
	}
	if l := got.Slots[5].Level(1); l != 2000 {
		t.Errorf("open bucket level %d, want the largest minute 2000", l)
	}
	if len(enc) > 8000 {
		t.Errorf("a week of two buckets per slot encodes to %d bytes; the table item must stay compact", len(enc))
	}
	for _, bad := range []string{"!!", "gA"} {
		if _, err := DecodeProfile(bad); err == nil {
			t.Errorf("DecodeProfile(%q) accepted", bad)
		}
	}
}

func TestSlotOf(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		at   time.Time
		loc  *time.Location
		want int
	}{
		{time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), nil, 0},     // Monday
		{time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC), nil, 671}, // Sunday
		{time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC), paris, 36},  // 09:00 in Paris
	} {
		if got := SlotOf(tt.at, tt.loc); got != tt.want {
			t.Errorf("SlotOf(%s) = %d, want %d", tt.at, got, tt.want)
		}
	}
}
