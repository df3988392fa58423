// Runs: a matrix that `needs:` an earlier job of its run is queued only when that job completes
// (https://docs.github.com/actions/using-jobs/using-jobs-in-a-workflow#defining-prerequisite-jobs),
// and every job carries its run's id and workflow name (the workflow_job webhook's run_id and
// workflow_name, the scale set's job messages' workflowRunId, the jobs REST API's run_id and
// workflow_name). A workflow's matrix is written in its file
// (https://docs.github.com/actions/using-jobs/using-a-matrix-for-your-jobs), so its runs fan out
// alike: remembering, per workflow, how many jobs came how long after a run's first job lets the
// pool warm them when the first job is queued, minutes before the matrix.
package autoscale

import (
	"fmt"
	"strings"
	"time"
)

// Run is a workflow run in progress as the reconciler sees it: its first job arrived Since ago,
// Jobs of its jobs have arrived so far and Running of those are queued or running still.
type Run struct {
	Workflow      string
	Since         time.Duration
	Jobs, Running int
}

// Fanout is what a workflow's runs did in the history: First jobs arrived with the run's first
// job (within a lead time of it); up to Jobs more came later, the earliest After the run's first
// job, the latest Within.
type Fanout struct {
	First, Jobs   int
	After, Within time.Duration
}

// Fanouts are the learned fan-outs by workflow name.
type Fanouts map[string]Fanout

// RunHistory is one past run: its workflow and its jobs' arrivals after its first job's.
type RunHistory struct {
	Workflow string
	Arrivals []time.Duration
}

// MinFanout is the fewest later jobs a workflow's run must have had for LearnFanouts to keep it:
// a run's few later jobs are the plan's to cover, not worth a pre-warm's warm-up.
const MinFanout = 5

// LearnFanouts keeps, per workflow, the runs whose later jobs (arriving at least lead after the
// run's first job: a pre-warm asked for at the first job is ready for them) numbered at least
// MinFanout: the most later jobs one run had, the earliest and latest of their arrivals, and the
// most jobs that came with the first one. Pure: the caller reads the history.
func LearnFanouts(runs []RunHistory, lead time.Duration) Fanouts {
	out := Fanouts{}
	for _, r := range runs {
		first, later := 0, 0
		var after, within time.Duration
		for _, a := range r.Arrivals {
			if a < lead {
				first++
				continue
			}
			if later == 0 || a < after {
				after = a
			}
			within = max(within, a)
			later++
		}
		if later < MinFanout || r.Workflow == "" {
			continue
		}
		out.Add(r.Workflow, Fanout{First: first, Jobs: later, After: after, Within: within})
	}
	return out
}

// Add merges f, learned from more runs of workflow, into what fs knows of it: the most jobs, the
// earliest and the latest arrival (a caller learning run by run, as the reconciler does, keeps
// the same fan-outs LearnFanouts finds at once).
func (fs Fanouts) Add(workflow string, f Fanout) {
	g, seen := fs[workflow]
	if !seen {
		fs[workflow] = f
		return
	}
	g.First, g.Jobs = max(g.First, f.First), max(g.Jobs, f.Jobs)
	g.After, g.Within = min(g.After, f.After), max(g.Within, f.Within)
	fs[workflow] = g
}

// Covers reports whether a job of workflow arriving at after its run's first job is one a
// pre-warm serves: such jobs are left out of the recorded demand, or the plan would hold their
// level hot all week as well.
func (f Fanouts) Covers(workflow string, after time.Duration) bool {
	w, ok := f[workflow]
	return ok && after >= w.After
}

// prewarm is how many hot instances the runs in progress need ready for their fan-outs: a run of
// a learned workflow whose later jobs have not all arrived, from its first job (a setup job's
// length varies from run to run: the earliest matrix seen is no promise) while its jobs run or
// until the latest its later jobs came (a run whose matrix was skipped, say because its build
// failed, stops asking).
func prewarm(in Input, d *Decision) int {
	n := 0
	var names []string
	for _, r := range in.Live.Runs {
		f, ok := in.Fanouts[r.Workflow]
		if !ok || (r.Running == 0 && r.Since > f.Within+in.Interval) {
			continue
		}
		if pending := min(f.Jobs, f.First+f.Jobs-r.Jobs); pending > 0 {
			n += pending
			names = append(names, r.Workflow)
		}
	}
	if n > 0 {
		d.Reasons = append(d.Reasons, fmt.Sprintf("%d hot for the fan-outs of %d runs in progress (%s)", n, len(names), strings.Join(names, ", ")))
	}
	return n
}
