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
	// Slow of them started later than the goal (counted in a replay that keeps queue times).
	Slow int
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

// event is a job's completion, at a time in nanoseconds since the Unix epoch (the replay keeps
// its clock as int64: time.Time's comparisons and the heap's interface boxing were most of a
// replay's time).
type event struct {
	at  int64
	seq int32
	run int32 // the job's run (index into pool.runs), -1 for none
}

// events is a min-heap of completions by time, then by the order they were pushed.
type events []event

func (h events) less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].seq < h[j].seq)
}

func (h *events) push(e event) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *events) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// pool is the simulated state.
type pool struct {
	m                         Model
	pol                       Policy
	now                       int64
	hot, stopped, busy        int
	warmAt                    []int64 // warming instances' ready times, oldest first
	targetHot, targetStopped  int
	idleNs, stoppedNs, busyNs float64 // instance-nanoseconds
	ev                        events
	seq                       int32
	res                       *Result
	arrived, slow, all        int
	maxQueue                  time.Duration
	// With a policy that looks at runs: the runs seen, by index, and their ids' indexes.
	wantRuns bool
	runs     []runSeen
	runIndex map[int64]int32
	open     []int32 // runs whose first job arrived within RunWindow, oldest first
	// In a search's replay (fast): no timeline and no queue times kept; fast jobs are counted
	// per group instead.
	fast     bool
	group    []int8 // per job, its group (-1: none)
	fastJobs []int  // per group, jobs within the goal
	// slowJobs counts a fast replay's jobs beyond the goal; past slowLimit (when >= 0) the replay
	// stops early: its schedule has failed.
	slowJobs, slowLimit int
	gaveUp              bool
	// created and ran are the jobs' creation (ns since the epoch) and run time, computed once.
	created, ran []int64
	// With capture, a fast replay saves its state there before the first pass markAt accepts.
	capture *mark
	markAt  func(at int64) bool
}

// mark is a fast replay's state before a pass: a search's next replay of a schedule that differs
// only from that pass on continues from it instead of replaying the week before it again.
type mark struct {
	ok                                           bool
	i                                            int
	next, now                                    int64
	hot, stopped, busy, targetHot, targetStopped int
	warmAt                                       []int64
	idleNs, stoppedNs, busyNs                    float64
	ev                                           events
	seq                                          int32
	arrived, slow, all, slowJobs                 int
	maxQueue                                     time.Duration
	fastJobs                                     []int
}

func (p *pool) save(m *mark, i int, next int64) {
	*m = mark{ok: true, i: i, next: next, now: p.now, hot: p.hot, stopped: p.stopped, busy: p.busy,
		targetHot: p.targetHot, targetStopped: p.targetStopped, warmAt: append(m.warmAt[:0], p.warmAt...),
		idleNs: p.idleNs, stoppedNs: p.stoppedNs, busyNs: p.busyNs, ev: append(m.ev[:0], p.ev...), seq: p.seq,
		arrived: p.arrived, slow: p.slow, all: p.all, slowJobs: p.slowJobs, maxQueue: p.maxQueue,
		fastJobs: append(m.fastJobs[:0], p.fastJobs...)}
}

func (p *pool) restore(m *mark) (i int, next int64) {
	p.now, p.hot, p.stopped, p.busy, p.targetHot, p.targetStopped = m.now, m.hot, m.stopped, m.busy, m.targetHot, m.targetStopped
	p.warmAt, p.ev = append(p.warmAt[:0], m.warmAt...), append(p.ev[:0], m.ev...)
	p.idleNs, p.stoppedNs, p.busyNs, p.seq = m.idleNs, m.stoppedNs, m.busyNs, m.seq
	p.arrived, p.slow, p.all, p.slowJobs, p.maxQueue = m.arrived, m.slow, m.all, m.slowJobs, m.maxQueue
	copy(p.fastJobs, m.fastJobs)
	p.gaveUp = false
	return m.i, m.next
}

// runSeen is a run in progress: its workflow, its first job's arrival and its jobs so far.
type runSeen struct {
	workflow      string
	first         int64
	jobs, running int
}

// advance accounts the time until t.
func (p *pool) advance(t int64) {
	if t > p.now {
		d := float64(t - p.now)
		p.idleNs += float64(p.hot+len(p.warmAt)) * d
		p.stoppedNs += float64(p.stopped) * d
		p.busyNs += float64(p.busy) * d
		p.now = t
	}
}

func (p *pool) push(at int64, run int32) {
	p.seq++
	p.ev.push(event{at: at, seq: p.seq, run: run})
}

// RunsPolicy is a Policy that looks at Observation.Runs; the replay follows runs only for one.
type RunsPolicy interface {
	WantsRuns() bool
}

// Run replays jobs under pol from shortly before the first job to the last job's completion.
func Run(jobs []jobtrace.Job, m Model, pol Policy, goal time.Duration) (*Result, error) {
	p, err := newPool(jobs, m, pol)
	if err != nil {
		return nil, err
	}
	p.res.queue = make([]time.Duration, 0, len(jobs))
	p.replay(jobs, goal, nil)
	p.finish()
	return p.res, nil
}

func newPool(jobs []jobtrace.Job, m Model, pol Policy) (*pool, error) {
	if len(jobs) == 0 {
		return nil, fmt.Errorf("no jobs to replay")
	}
	if m.Interval <= 0 {
		return nil, fmt.Errorf("the pass interval must be positive")
	}
	p := &pool{m: m, pol: pol, res: &Result{Policy: pol.Name(), Jobs: len(jobs)}}
	p.created, p.ran = make([]int64, len(jobs)), make([]int64, len(jobs))
	for i, j := range jobs {
		p.created[i], p.ran[i] = j.Created.UnixNano(), int64(j.Duration())
	}
	if rp, ok := pol.(RunsPolicy); ok && rp.WantsRuns() {
		p.wantRuns, p.runIndex = true, map[int64]int32{}
	}
	return p, nil
}

// replay runs the events of jobs (converge's passes, arrivals, completions, warm-ups), from the
// start or, with from, from a mark a replay left.
func (p *pool) replay(jobs []jobtrace.Job, goal time.Duration, from *mark) {
	m := p.m
	interval := int64(m.Interval)
	var i int
	var next int64
	if from != nil {
		i, next = p.restore(from)
	} else {
		// The pool runs before the first job, long enough for the policy's first targets to be warm.
		p.now = jobs[0].Created.Add(-2 * (m.Starts.Cold + m.Interval)).Truncate(m.Interval).UnixNano()
		next = p.now
	}
	for i < len(jobs) || len(p.ev) > 0 {
		// The next thing to happen: a pass, a job, or an event (ties: events, passes, jobs).
		at, what := next, 0 // 0 pass, 1 warm, 2 event, 3 job
		if len(p.warmAt) > 0 && p.warmAt[0] <= at {
			at, what = p.warmAt[0], 1
		}
		if len(p.ev) > 0 && p.ev[0].at <= at {
			at, what = p.ev[0].at, 2
		}
		if i < len(jobs) && p.created[i] < at {
			at, what = p.created[i], 3
		}
		if what == 0 && p.capture != nil && p.markAt(at) {
			p.save(p.capture, i, next)
			p.capture = nil
		}
		if p.fast && p.slowLimit >= 0 && p.slowJobs > p.slowLimit {
			p.gaveUp = true
			return
		}
		p.advance(at)
		switch what {
		case 0:
			p.pass()
			next += interval
		case 1:
			p.warmed()
		case 2:
			p.done()
		case 3:
			p.job(i, &jobs[i], goal)
			i++
		}
	}
}

func (p *pool) job(i int, j *jobtrace.Job, goal time.Duration) {
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
	run := int32(-1)
	if p.wantRuns && j.RunID != 0 {
		r, ok := p.runIndex[j.RunID]
		if !ok {
			r = int32(len(p.runs))
			p.runIndex[j.RunID] = r
			p.runs = append(p.runs, runSeen{workflow: j.Workflow, first: p.now})
			p.open = append(p.open, r)
		}
		p.runs[r].jobs++
		p.runs[r].running++
		run = r
	}
	p.push(p.now+int64(q)+p.ran[i], run)
	p.arrived++
	if p.fast {
		if q > goal {
			p.slowJobs++
		} else if g := p.group[i]; g >= 0 {
			p.fastJobs[g]++
		}
		return
	}
	p.res.queue = append(p.res.queue, q)
	p.all++
	if q > goal {
		p.slow++
	}
	p.maxQueue = max(p.maxQueue, q)
}

// openRuns are the runs whose first job arrived within RunWindow; older ones are forgotten.
func (p *pool) openRuns() []autoscale.Run {
	if !p.wantRuns {
		return nil
	}
	k := 0
	for k < len(p.open) && p.now-p.runs[p.open[k]].first > int64(RunWindow) {
		k++
	}
	p.open = p.open[k:]
	out := make([]autoscale.Run, 0, len(p.open))
	for _, r := range p.open {
		s := p.runs[r]
		out = append(out, autoscale.Run{Workflow: s.workflow, Since: time.Duration(p.now - s.first), Jobs: s.jobs, Running: s.running})
	}
	return out
}

func (p *pool) done() {
	e := p.ev.pop()
	if e.run >= 0 {
		p.runs[e.run].running--
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
func (p *pool) pass() {
	now := time.Unix(0, p.now).UTC()
	o := Observation{Now: now, Arrived: p.arrived, Slow: p.slow, Hot: p.hot, Stopped: p.stopped, Warming: len(p.warmAt), Busy: p.busy, Runs: p.openRuns()}
	p.targetHot, p.targetStopped = p.pol.Targets(o)
	if !p.fast {
		p.res.Timeline = append(p.res.Timeline, Point{
			At: now, Arrived: p.arrived, TargetHot: p.targetHot, TargetStopped: p.targetStopped,
			Hot: p.hot, Stopped: p.stopped, MaxQueue: p.maxQueue, SlowJobs: p.slow, AllJobs: p.all,
		})
	}
	p.arrived, p.maxQueue, p.slow, p.all = 0, 0, 0, 0
	keepHot, keepStopped := min(p.hot, p.targetHot), min(p.stopped, p.targetStopped)
	p.hot, p.stopped = keepHot, keepStopped // the excess is terminated
	slots := p.targetHot + p.targetStopped - keepHot - keepStopped
	// Warming instances beyond the slots are terminated, the youngest first (least invested).
	p.warmAt = p.warmAt[:min(len(p.warmAt), max(0, slots))]
	for range slots - len(p.warmAt) {
		p.warmAt = append(p.warmAt, p.now+int64(p.m.Starts.Cold))
	}
}

func (p *pool) finish() {
	r := p.res
	r.IdleInstanceHours, r.StoppedInstanceHours, r.BusyInstanceHours = p.idleNs/nsPerHour, p.stoppedNs/nsPerHour, p.busyNs/nsPerHour
	r.IdleCost = r.IdleInstanceHours*p.m.Prices.HotPerHour + r.StoppedInstanceHours*p.m.Prices.StoppedPerHour
	r.Cost = r.IdleCost + r.BusyInstanceHours*p.m.Prices.HotPerHour
	sorted := slices.Clone(r.queue)
	slices.Sort(sorted)
	r.P50, r.P95, r.P99 = Percentile(sorted, 0.50), Percentile(sorted, 0.95), Percentile(sorted, 0.99)
}

const nsPerHour = float64(time.Hour)

// Percentile is the nearest-rank percentile of sorted values.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
