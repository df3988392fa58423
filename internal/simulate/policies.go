// The three policies a replay compares: cold starts only, a fixed schedule (the cheapest constant
// hot count per hour meeting the goal, found by search) and the autoscaler.
package simulate

import (
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// ColdOnly keeps no pool: every job waits for a cold start, and its instance is terminated after.
type ColdOnly struct{}

func (ColdOnly) Name() string                   { return "cold only" }
func (ColdOnly) Targets(Observation) (int, int) { return 0, 0 }
func (ColdOnly) Reuse() bool                    { return false }

// Fixed is a schedule as a platform team writes one: a hot count per hour of the day, one set for
// weekdays and one for weekends, in the pool's timezone.
// Windows begin Lead early (a team starts a window early enough for its instances to be warm when
// it opens).
type Fixed struct {
	Hot  [2][24]int // [0] weekdays, [1] weekends
	Loc  *time.Location
	Lead time.Duration
}

func (f *Fixed) Name() string { return "fixed schedule" }
func (f *Fixed) Reuse() bool  { return true }
func (f *Fixed) Targets(o Observation) (int, int) {
	d, h := f.slot(o.Now)
	nd, nh := f.slot(o.Now.Add(f.Lead))
	return max(f.Hot[d][h], f.Hot[nd][nh]), 0
}

func (f *Fixed) slot(t time.Time) (day, hour int) {
	if f.Loc != nil {
		t = t.In(f.Loc)
	}
	if wd := t.Weekday(); wd == time.Saturday || wd == time.Sunday {
		day = 1
	}
	return day, t.Hour()
}

// Autoscaler runs autoscale.Decide at every pass, from a profile recorded beforehand (and, with
// Fanouts, the runs in progress).
type Autoscaler struct {
	Label    string // the policy's name; default "autoscaler"
	Profile  *autoscale.Profile
	Plan     *autoscale.WeekPlan
	Fanouts  autoscale.Fanouts
	Base     autoscale.Input // Starts, Prices, Bounds, Goal, Budget, Interval, Cooldown
	Loc      *time.Location
	state    autoscale.State
	Last     autoscale.Decision
	Decision func(at time.Time, d autoscale.Decision) // optional, sees every decision
}

func (a *Autoscaler) Name() string {
	if a.Label != "" {
		return a.Label
	}
	return "autoscaler"
}
func (a *Autoscaler) Reuse() bool { return true }

// WantsRuns: the replay follows runs for an autoscaler that learned fan-outs.
func (a *Autoscaler) WantsRuns() bool { return a.Fanouts != nil }
func (a *Autoscaler) Targets(o Observation) (int, int) {
	in := a.Base
	in.Profile, in.Plan, in.Prev, in.Fanouts = a.Profile, a.Plan, a.state, a.Fanouts
	in.Slot = autoscale.SlotOf(o.Now, a.Loc)
	local := o.Now
	if a.Loc != nil {
		local = o.Now.In(a.Loc)
	}
	in.Into = time.Duration(local.Minute()%15)*time.Minute + time.Duration(local.Second())*time.Second
	in.Live = autoscale.Live{Arrived: o.Arrived}
	if a.Fanouts != nil {
		in.Live.Runs = o.Runs
	}
	d := autoscale.Decide(in)
	a.state, a.Last = d.Next, d
	if a.Decision != nil {
		a.Decision(o.Now, d)
	}
	return d.Hot, d.Stopped
}

// Runs are a history's runs (jobs with a run id): each one's workflow and its jobs' arrivals
// after its first job's.
func Runs(jobs []jobtrace.Job) []autoscale.RunHistory {
	at := map[int64]int{}
	var out []autoscale.RunHistory
	first := map[int64]time.Time{}
	for _, j := range jobs { // sorted by creation
		if j.RunID == 0 {
			continue
		}
		i, ok := at[j.RunID]
		if !ok {
			i, first[j.RunID] = len(out), j.Created
			at[j.RunID] = i
			out = append(out, autoscale.RunHistory{Workflow: j.Workflow})
		}
		out[i].Arrivals = append(out[i].Arrivals, j.Created.Sub(first[j.RunID]))
	}
	return out
}

// Uncovered are the jobs a pre-warm for fanouts would not serve: the demand the week plan is for.
func Uncovered(jobs []jobtrace.Job, fanouts autoscale.Fanouts) []jobtrace.Job {
	if len(fanouts) == 0 {
		return jobs
	}
	first := map[int64]time.Time{}
	var out []jobtrace.Job
	for _, j := range jobs {
		if j.RunID != 0 {
			if _, ok := first[j.RunID]; !ok {
				first[j.RunID] = j.Created
			}
			if fanouts.Covers(j.Workflow, j.Created.Sub(first[j.RunID])) {
				continue
			}
		}
		out = append(out, j)
	}
	return out
}

// Record is the demand profile of a history: for every minute from the first job's to the last
// job's, how many jobs arrived, in the slot of loc it fell in.
func Record(jobs []jobtrace.Job, loc *time.Location) *autoscale.Profile {
	p := &autoscale.Profile{}
	if len(jobs) == 0 {
		return p
	}
	start := jobs[0].Created.Truncate(time.Minute)
	end := jobs[len(jobs)-1].Created.Truncate(time.Minute)
	i := 0
	for m := start; !m.After(end); m = m.Add(time.Minute) {
		n := 0
		for i < len(jobs) && jobs[i].Created.Before(m.Add(time.Minute)) {
			n++
			i++
		}
		p.Record(autoscale.SlotOf(m, loc), n)
	}
	return p
}
