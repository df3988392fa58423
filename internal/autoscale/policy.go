// The decision of one convergence pass: hot and stopped targets from the week plan, the live
// signals, the start times and prices, the bounds and the budget, with the reasons.
package autoscale

import (
	"fmt"
	"math"
	"time"
)

// Starts are the measured times from a job's arrival to its runner picking it up, by where the
// instance comes from.
type Starts struct {
	Hot, Stopped, Cold time.Duration
}

// Prices are hourly prices in USD: a running instance, and a stopped one (its volume).
type Prices struct {
	HotPerHour, StoppedPerHour float64
}

// Bounds are the schedule window's limits on the targets. Max values of 0 mean no limit.
type Bounds struct {
	MinHot, MaxHot, MinStopped, MaxStopped int
}

// Live is what the reconciler sees now.
type Live struct {
	// Arrived is how many jobs arrived for the pool since the previous decision (reported beside
	// the forecast).
	Arrived int
	// Waiting is how many jobs wait without a runner: queued webhooks not yet served plus the
	// scale sets' totalAssignedJobs beyond the runners serving them.
	Waiting int
	// InFlight is how many instances are being started or created for waiting jobs.
	InFlight int
	// Runs are the workflow runs in progress (their jobs carry run id and workflow name): a run of
	// a workflow in Input.Fanouts is warmed for before its matrix is queued.
	Runs []Run
}

// State is what a decision carries to the next one (hysteresis): the targets the forecast and
// the waiting jobs asked for, before the runs' pre-warm, the bounds and the budget. The caller
// passes Decision.Next back as the next Input.Prev.
type State struct {
	Hot, Stopped int
	// LowFor is how long the wanted targets have stayed below Hot/Stopped.
	LowFor time.Duration
	// Level is the week plan's level Hot was decided from. The plan's own steps down are taken at
	// once (a plan does not flap: it changes at quarter-hours, and holding its level longer is
	// what it was planned without); the cooldown holds what the live signals added above it.
	// 0 (a caller that does not keep it): every step down waits for the cooldown.
	Level int
}

// Input is everything a decision depends on. The caller measures; Decide only computes.
type Input struct {
	Slot    int           // slot of the week now (SlotOf)
	Into    time.Duration // time since the slot began
	Plan    *WeekPlan
	Profile *Profile
	// Fanouts are the workflows whose runs fan out after their first job (LearnFanouts); nil: runs
	// are not looked at.
	Fanouts Fanouts
	Live    Live
	Prev    State
	Starts  Starts
	Prices  Prices
	Bounds  Bounds
	Goal    time.Duration // the queue-time goal (p95)
	// GoalP99, when set, is a tail goal: 99 % of jobs start within it. Only then are stopped
	// instances kept as the tail's buffer (when their start is within it); a p95 goal alone asks
	// nothing of the jobs beyond its 95 %.
	GoalP99  time.Duration
	Budget   float64       // most USD per hour of idle capacity; 0: none
	Interval time.Duration // time between decisions
	Cooldown time.Duration // how long wanted targets stay lower before the pool shrinks
}

// Decision is a pass's targets and why.
type Decision struct {
	Hot, Stopped int
	// Forecast is the mean arrivals per minute expected in the slot; Level the hot level the
	// week plan gives the next lead time (the forecast's spread: bursts included).
	Forecast float64
	Level    int
	Reasons  []string
	// Conflict, when set, says why the goal cannot be met (budget or bounds).
	Conflict string
	// Prewarm is how many hot instances the fan-outs of the runs in progress asked for (before
	// the bounds and the budget).
	Prewarm int
	Next    State
}

// Decide is one pass's decision.
func Decide(in Input) Decision {
	d := Decision{}
	lead := in.Starts.Cold + in.Interval // a hot instance asked for now is ready this much later
	slot, next := in.Slot%SlotsPerWeek, (in.Slot+1)%SlotsPerWeek
	if in.Profile != nil {
		d.Forecast = in.Profile.Slots[slot].Mean()
	}
	level, peak := 0, 0
	if in.Plan != nil {
		level, peak = in.Plan.Level[slot], in.Plan.Peak[slot]
		if in.Into+lead >= SlotLength && in.Plan.Level[next] > level {
			level, peak = in.Plan.Level[next], max(peak, in.Plan.Peak[next])
			d.Reasons = append(d.Reasons, fmt.Sprintf("next quarter-hour needs %d hot: ready before it begins", level))
		}
	}
	d.Level = level
	hot := level
	// Jobs waiting with nothing on its way for them are demand the forecast missed: the pool
	// grows by them at once. (Jobs that arrived and were served, from the pool or by overflow, ask
	// for nothing more: a fan-out is over when it has arrived.)
	if unserved := max(0, in.Live.Waiting-in.Live.InFlight); unserved > 0 {
		hot += unserved
		d.Reasons = append(d.Reasons, fmt.Sprintf("%d waiting jobs without an instance on its way: above the forecast level %d", unserved, level))
	}
	hot, stopped := mix(in, hot, peak, &d)
	hot, stopped = hysteresis(in, hot, stopped, level, &d)
	d.Next.Hot, d.Next.Stopped, d.Next.Level = hot, stopped, level
	// A run's pre-warm is not held by the cooldown: once its matrix has arrived, the instances
	// are busy and the level it asked for is spent.
	d.Prewarm = prewarm(in, &d)
	hot += d.Prewarm
	hot, stopped = bound(in, hot, stopped, &d)
	hot, stopped = budget(in, hot, stopped, &d)
	d.Hot, d.Stopped = hot, stopped
	return d
}

// mix splits the need between hot and stopped instances by their start times and prices.
func mix(in Input, hot, peak int, d *Decision) (int, int) {
	s, p := in.Starts, in.Prices
	cheaper := p.StoppedPerHour < p.HotPerHour
	switch {
	case cheaper && s.Stopped <= in.Goal && hot > 0:
		// A stopped instance meets the goal too: keep hot only what the mean minute takes.
		base := min(hot, int(math.Ceil(d.Forecast)))
		d.Reasons = append(d.Reasons, fmt.Sprintf("stopped start %s within the goal %s: %d of %d as stopped", s.Stopped, in.Goal, hot-base, hot))
		return base, hot - base
	case cheaper && in.GoalP99 > 0 && s.Stopped <= in.GoalP99 && s.Stopped < s.Cold && peak > hot:
		d.Reasons = append(d.Reasons, fmt.Sprintf("%d stopped as the tail's buffer for the p99 goal %s (start %s against cold %s)", peak-hot, in.GoalP99, s.Stopped, s.Cold))
		return hot, peak - hot
	case s.Stopped > in.Goal && peak > hot:
		// Jobs beyond the plan's level are the share the goal lets be slow: a stopped instance
		// (slower than the goal) buys them nothing the goal asks for.
		d.Reasons = append(d.Reasons, fmt.Sprintf("no stopped: a stopped start (%s) is beyond the goal %s and meets no p99 goal", s.Stopped, in.Goal))
	}
	return hot, 0
}

// hysteresis grows at once and shrinks only once the lower wish has held for the cooldown; the
// week plan's own step down (prev.Level to level) is taken at once.
func hysteresis(in Input, hot, stopped, level int, d *Decision) (int, int) {
	prev := in.Prev
	if prev.Level > level {
		prev.Hot = max(hot, prev.Hot-(prev.Level-level))
	}
	if hot >= prev.Hot && stopped >= prev.Stopped {
		d.Next.LowFor = 0
		return hot, stopped
	}
	d.Next.LowFor = prev.LowFor + in.Interval
	if d.Next.LowFor < in.Cooldown {
		d.Reasons = append(d.Reasons, fmt.Sprintf("holding %d hot, %d stopped: lower for %s of the %s cooldown", prev.Hot, prev.Stopped, d.Next.LowFor, in.Cooldown))
		return max(hot, prev.Hot), max(stopped, prev.Stopped)
	}
	d.Next.LowFor = 0
	d.Reasons = append(d.Reasons, fmt.Sprintf("scaling down after %s below the targets", in.Cooldown))
	return hot, stopped
}

// bound clamps the targets to the schedule window's bounds.
func bound(in Input, hot, stopped int, d *Decision) (int, int) {
	b := in.Bounds
	if b.MaxHot > 0 && hot > b.MaxHot {
		d.Conflict = fmt.Sprintf("the goal needs %d hot; the schedule's max is %d", hot, b.MaxHot)
		hot = b.MaxHot
	}
	if b.MaxStopped > 0 && stopped > b.MaxStopped {
		stopped = b.MaxStopped
		d.Reasons = append(d.Reasons, fmt.Sprintf("stopped held to the schedule's max %d", b.MaxStopped))
	}
	if hot < b.MinHot || stopped < b.MinStopped {
		d.Reasons = append(d.Reasons, fmt.Sprintf("the schedule's minimum: %d hot, %d stopped", b.MinHot, b.MinStopped))
	}
	return max(hot, b.MinHot), max(stopped, b.MinStopped)
}

// budget caps the idle spend: stopped instances give way first, then hot ones, and a goal the
// budget cannot pay for is reported.
func budget(in Input, hot, stopped int, d *Decision) (int, int) {
	p := in.Prices
	if in.Budget <= 0 {
		return hot, stopped
	}
	spend := func(h, s int) float64 { return float64(h)*p.HotPerHour + float64(s)*p.StoppedPerHour }
	if spend(hot, stopped) <= in.Budget {
		return hot, stopped
	}
	want := hot
	for stopped > in.Bounds.MinStopped && spend(hot, stopped) > in.Budget {
		stopped--
	}
	for hot > in.Bounds.MinHot && spend(hot, stopped) > in.Budget {
		hot--
	}
	if hot < want {
		d.Conflict = fmt.Sprintf("the goal needs %d hot ($%.2f/h idle); the budget $%.2f/h pays for %d", want, spend(want, 0), in.Budget, hot)
	} else {
		d.Reasons = append(d.Reasons, fmt.Sprintf("stopped cut to %d by the budget $%.2f/h", stopped, in.Budget))
	}
	return hot, stopped
}
