// Package simulate replays a job history through a discrete-event model of one runnerpool warm
// pool, under a sizing policy, and measures what developers wait and what idle capacity costs.
//
// The model is the warm pool's as built (internal/warmpool, seed 002): a job takes an idle hot
// instance (start Starts.Hot: registration), else starts a stopped one (Starts.Stopped), else
// overflows to a cold start (Starts.Cold); jobs never wait for an instance still warming. Every
// Interval a convergence pass sets the targets the policy decides: hot and stopped beyond them are
// terminated, what is missing is created and joins the pool, hot first, once warmed (Starts.Cold).
// A finished job's instance goes back to the pool hot (reuse) unless the policy says otherwise, and
// the next pass trims it if it is beyond the target.
package simulate

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
)

// Model is what the simulation assumes of the machines.
type Model struct {
	Starts   autoscale.Starts
	Prices   autoscale.Prices
	Interval time.Duration // between convergence passes
}

// Observation is what a policy sees at a pass.
type Observation struct {
	Now     time.Time
	Arrived int // jobs since the previous pass
	// Pool now: idle hot, stopped, warming, busy.
	Hot, Stopped, Warming, Busy int
	// Runs are the workflow runs whose first job arrived within RunWindow (jobs with a run id).
	Runs []autoscale.Run
}

// RunWindow is how long after its first job a run is shown to the policy.
const RunWindow = 2 * time.Hour

// Policy decides the targets of each pass.
type Policy interface {
	Name() string
	Targets(o Observation) (hot, stopped int)
	// Reuse reports whether a finished job's instance returns to the pool.
	Reuse() bool
}

// Point is one pass of the timeline, for charts.
type Point struct {
	At                time.Time
	Arrived           int
	TargetHot         int
	TargetStopped     int
	Hot, Stopped      int
	MaxQueue          time.Duration // the longest queue time of the jobs since the previous pass
	SlowJobs, AllJobs int
}

// Result is a replay's outcome.
type Result struct {
	Policy        string
	Jobs          int
	P50, P95, P99 time.Duration
	// IdleInstanceHours is running time that served no job: idle hot and warming instances.
	IdleInstanceHours    float64
	StoppedInstanceHours float64
	BusyInstanceHours    float64
	// IdleCost is the idle and stopped hours at their prices; Cost adds the busy hours.
	IdleCost, Cost float64
	Timeline       []Point
	queue          []time.Duration
}

// QueueTimes are the jobs' queue times, in arrival order.
func (r *Result) QueueTimes() []time.Duration { return r.queue }

// event is a job's completion.
type event struct {
	at  time.Time
	seq int
	run int64 // the job's run, 0 for none
}

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	return h[i].at.Before(h[j].at) || (h[i].at.Equal(h[j].at) && h[i].seq < h[j].seq)
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// pool is the simulated state.
type pool struct {
	m                        Model
	pol                      Policy
	now                      time.Time
	hot, stopped, busy       int
	warmAt                   []time.Time // warming instances' ready times, oldest first
	targetHot, targetStopped int
	idleH, stoppedH, busyH   float64
	ev                       events
	seq                      int
	res                      *Result
	arrived, slow, all       int
	maxQueue                 time.Duration
	runs                     map[int64]*runSeen
}

// runSeen is a run in progress: its workflow, its first job's arrival and its jobs so far.
type runSeen struct {
	workflow      string
	first         time.Time
	jobs, running int
}

// advance accounts the time until t.
func (p *pool) advance(t time.Time) {
	if t.After(p.now) {
		h := t.Sub(p.now).Hours()
		p.idleH += float64(p.hot+len(p.warmAt)) * h
		p.stoppedH += float64(p.stopped) * h
		p.busyH += float64(p.busy) * h
		p.now = t
	}
}

func (p *pool) push(at time.Time, run int64) {
	p.seq++
	heap.Push(&p.ev, event{at: at, seq: p.seq, run: run})
}

// Run replays jobs under pol from shortly before the first job to the last job's completion.
func Run(jobs []jobtrace.Job, m Model, pol Policy, goal time.Duration) (*Result, error) {
	if len(jobs) == 0 {
		return nil, fmt.Errorf("no jobs to replay")
	}
	if m.Interval <= 0 {
		return nil, fmt.Errorf("the pass interval must be positive")
	}
	p := &pool{m: m, pol: pol, res: &Result{Policy: pol.Name(), Jobs: len(jobs)}, runs: map[int64]*runSeen{}}
	// The pool runs before the first job, long enough for the policy's first targets to be warm.
	p.now = jobs[0].Created.Add(-2 * (m.Starts.Cold + m.Interval)).Truncate(m.Interval)
	next := p.now
	for i := 0; i < len(jobs) || p.ev.Len() > 0; {
		// The next thing to happen: a pass, a job, or an event (ties: events, passes, jobs).
		at, what := next, "pass"
		if len(p.warmAt) > 0 && !p.warmAt[0].After(at) {
			at, what = p.warmAt[0], "warm"
		}
		if p.ev.Len() > 0 && !p.ev[0].at.After(at) {
			at, what = p.ev[0].at, "event"
		}
		if i < len(jobs) && jobs[i].Created.Before(at) {
			at, what = jobs[i].Created, "job"
		}
		p.advance(at)
		switch what {
		case "pass":
			p.pass(goal)
			next = next.Add(m.Interval)
		case "event":
			p.done()
		case "warm":
			p.warmed()
		case "job":
			p.job(jobs[i], goal)
			i++
		}
	}
	p.finish()
	return p.res, nil
}

func (p *pool) job(j jobtrace.Job, goal time.Duration) {
	s := p.m.Starts
	var q time.Duration
	switch {
	case p.hot > 0:
		p.hot--
		q = s.Hot
	case p.stopped > 0:
		p.stopped--
		q = s.Stopped
	default:
		q = s.Cold
	}
	p.busy++
	p.push(j.Created.Add(q+j.Duration()), j.RunID)
	p.res.queue = append(p.res.queue, q)
	p.arrived++
	p.all++
	if q > goal {
		p.slow++
	}
	p.maxQueue = max(p.maxQueue, q)
	if j.RunID != 0 {
		r, ok := p.runs[j.RunID]
		if !ok {
			r = &runSeen{workflow: j.Workflow, first: j.Created}
			p.runs[j.RunID] = r
		}
		r.jobs++
		r.running++
	}
}

// openRuns are the runs whose first job arrived within RunWindow; older ones are forgotten.
func (p *pool) openRuns() []autoscale.Run {
	var out []autoscale.Run
	for id, r := range p.runs {
		since := p.now.Sub(r.first)
		if since > RunWindow {
			delete(p.runs, id)
			continue
		}
		out = append(out, autoscale.Run{Workflow: r.workflow, Since: since, Jobs: r.jobs, Running: r.running})
	}
	slices.SortFunc(out, func(a, b autoscale.Run) int { return cmp.Compare(b.Since, a.Since) })
	return out
}

func (p *pool) done() {
	e := heap.Pop(&p.ev).(event)
	if r, ok := p.runs[e.run]; ok {
		r.running--
	}
	p.busy--
	if p.pol.Reuse() {
		p.hot++
	}
}

// warmed: a warmed-up instance becomes hot while the pool lacks hot ones, then stopped; else it is
// excess and terminated (converge step 5).
func (p *pool) warmed() {
	p.warmAt = p.warmAt[1:]
	switch {
	case p.hot < p.targetHot:
		p.hot++
	case p.stopped < p.targetStopped:
		p.stopped++
	}
}

// pass is one convergence pass (converge steps 6 and 7).
func (p *pool) pass(goal time.Duration) {
	o := Observation{Now: p.now, Arrived: p.arrived, Hot: p.hot, Stopped: p.stopped, Warming: len(p.warmAt), Busy: p.busy, Runs: p.openRuns()}
	p.targetHot, p.targetStopped = p.pol.Targets(o)
	p.res.Timeline = append(p.res.Timeline, Point{
		At: p.now, Arrived: p.arrived, TargetHot: p.targetHot, TargetStopped: p.targetStopped,
		Hot: p.hot, Stopped: p.stopped, MaxQueue: p.maxQueue, SlowJobs: p.slow, AllJobs: p.all,
	})
	p.arrived, p.maxQueue, p.slow, p.all = 0, 0, 0, 0
	keepHot, keepStopped := min(p.hot, p.targetHot), min(p.stopped, p.targetStopped)
	p.hot, p.stopped = keepHot, keepStopped // the excess is terminated
	slots := p.targetHot + p.targetStopped - keepHot - keepStopped
	// Warming instances beyond the slots are terminated, the youngest first (least invested).
	p.warmAt = p.warmAt[:min(len(p.warmAt), max(0, slots))]
	for range slots - len(p.warmAt) {
		p.warmAt = append(p.warmAt, p.now.Add(p.m.Starts.Cold))
	}
}

func (p *pool) finish() {
	r := p.res
	r.IdleInstanceHours, r.StoppedInstanceHours, r.BusyInstanceHours = p.idleH, p.stoppedH, p.busyH
	r.IdleCost = p.idleH*p.m.Prices.HotPerHour + p.stoppedH*p.m.Prices.StoppedPerHour
	r.Cost = r.IdleCost + p.busyH*p.m.Prices.HotPerHour
	sorted := slices.Clone(r.queue)
	slices.Sort(sorted)
	r.P50, r.P95, r.P99 = Percentile(sorted, 0.50), Percentile(sorted, 0.95), Percentile(sorted, 0.99)
}

// Percentile is the nearest-rank percentile of sorted values.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
