// The workflow runs of an autoscaled pool, for the policy's pre-warm of fan-outs
// (autoscale.Live.Runs, autoscale.Input.Fanouts): a matrix that needs an earlier job of its run is
// queued only when that job completes, so a workflow whose past runs fanned out to N jobs after
// their first gets N hot from the moment a new run's first job is queued.
//
// Where it comes from: every pool job's ledger record carries its run (run id and attempt, the
// workflow_job webhook's workflow_job.run_id/run_attempt, a scale set job message's workflowRunId)
// and its workflow (the webhook's workflow_job.workflow_name, a scale set message's
// jobWorkflowRef), written by the receiver (Enqueue); the ledger lists a pool's jobs in progress
// in one query (store.PoolJobs, which the waiting jobs come from too). Only run records count:
// the listing drops any item of an agent's partition, so nothing a job on a runner can write
// reaches here, and a record whose values no receiver writes is left out, logged.
//
// What is kept, in the pool's autoscale item so a new leader continues (store.AutoscaleState.Runs):
// the runs in progress (each one's workflow, first job and its jobs' arrivals, counted once: a
// job counts when its record's creation passes the cut, the time up to which records were
// counted), and per workflow the fan-out learned from its completed runs (autoscale.LearnFanouts,
// run by run: the most later jobs, the earliest and latest arrival), forgotten after four weeks
// without a run that fanned out. A run is over when none of its jobs was in progress for
// runQuiet, or runWindow after its first job.
package poolsize

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

const (
	// runWindow is how long after its first job a run is followed (the simulator's RunWindow).
	runWindow = 2 * time.Hour
	// runQuiet: a run none of whose jobs was in progress for this long is over (a matrix is
	// queued within seconds of the job it needs completing; a pass or two of gap is not an end).
	runQuiet = 5 * time.Minute
	// maxOpenRuns and maxFanouts bound the pool's item; fanoutMemory is how long a workflow's
	// fan-out is kept without a run that fanned out again.
	maxOpenRuns    = 1000
	maxFanouts     = 200
	fanoutMemory   = 28 * 24 * time.Hour
	maxWorkflowLen = 256
)

// runsKept is the encoding of store.AutoscaleState.Runs. Decoding is tolerant: unknown fields
// are ignored, missing ones are zero, and an entry no leader writes is dropped.
type runsKept struct {
	// Cut: records created up to it were counted.
	Cut     time.Time              `json:"cut"`
	Open    map[string]*runOpen    `json:"open,omitempty"`    // by run (repository, run id, attempt)
	Fanouts map[string]*fanoutKept `json:"fanouts,omitempty"` // by workflow (repository: name)
}

type runOpen struct {
	Workflow string    `json:"w"`
	First    time.Time `json:"f"`
	Seen     time.Time `json:"s"` // the last pass that listed one of its jobs in progress
	Arrivals []int64   `json:"a"` // its jobs' arrivals, milliseconds after First
}

type fanoutKept struct {
	First    int       `json:"first"`
	Jobs     int       `json:"jobs"`
	AfterMS  int64     `json:"after_ms"`
	WithinMS int64     `json:"within_ms"`
	Seen     time.Time `json:"seen"`
}

// runsSeen is what a pass hands the policy.
type runsSeen struct {
	runs    []autoscale.Run
	fanouts autoscale.Fanouts
	covered int // jobs counted this pass that a learned fan-out's pre-warm serves
}

// followRuns counts the pool's jobs in progress into its runs, learns the fan-outs of the runs
// that are over, and returns the runs in progress and the fan-outs. Jobs not listed this pass:
// nothing counted, nothing ended. lead is a cold start and a pass (LearnFanouts).
func (c *Converger) followRuns(pool string, st *store.AutoscaleState, live liveDemand, now time.Time, lead time.Duration) runsSeen {
	k := decodeRuns(st.Runs, c.log.With("pool", pool))
	var out runsSeen
	running := map[string]int{}
	if jobs := live.jobs; live.listed {
		cut := now.Add(-clockSkew) // a record written just before now may not be listed yet
		learned := k.fanouts()
		for _, j := range jobs {
			run, workflow, err := runOf(j, now)
			if err != nil {
				c.log.Warn("autoscale: pool job left out of the runs in progress", "pool", pool, "job", j.Key, "reason", err)
				continue
			}
			if run == "" {
				continue // its source did not say its workflow
			}
			running[run]++
			if !j.CreatedAt.After(k.Cut) || j.CreatedAt.After(cut) || now.Sub(j.CreatedAt) > runWindow {
				continue // counted already, or at the next pass
			}
			r := k.Open[run]
			if r == nil {
				r = &runOpen{Workflow: workflow, First: j.CreatedAt}
				k.Open[run] = r
			}
			after := r.arrive(j.CreatedAt)
			if learned.Covers(r.Workflow, after) {
				out.covered++
			}
		}
		for run := range running {
			if r := k.Open[run]; r != nil {
				r.Seen = now
			}
		}
		k.Cut = cut
		k.end(now, lead)
	}
	out.fanouts = k.fanouts()
	for run, r := range k.Open {
		out.runs = append(out.runs, autoscale.Run{Workflow: r.Workflow, Since: now.Sub(r.First), Jobs: len(r.Arrivals), Running: running[run]})
	}
	slices.SortFunc(out.runs, func(a, b autoscale.Run) int { return cmp.Compare(b.Since, a.Since) })
	b, _ := json.Marshal(k)
	st.Runs = string(b)
	return out
}

// runOf is a job record's run and workflow keys ("" when its source did not say its workflow), or
// why the record is not one a receiver writes.
func runOf(j store.PoolJob, now time.Time) (run, workflow string, err error) {
	id, perr := strconv.ParseInt(j.RunID, 10, 64)
	owner, name, ok := strings.Cut(j.Repository, "/")
	switch {
	case perr != nil || id <= 0:
		return "", "", fmt.Errorf("run id %q is not a positive number", j.RunID)
	case j.Attempt < 1:
		return "", "", fmt.Errorf("run attempt %d", j.Attempt)
	case !ok || owner == "" || name == "" || !printable(j.Repository, 200):
		return "", "", fmt.Errorf("repository %q is not owner/name", j.Repository)
	case !printable(j.Workflow, maxWorkflowLen):
		return "", "", fmt.Errorf("workflow of %d bytes, or not printable", len(j.Workflow))
	case j.CreatedAt.IsZero() || j.CreatedAt.After(now.Add(clockSkew)):
		return "", "", fmt.Errorf("created at %v, after now", j.CreatedAt)
	case j.Workflow == "":
		return "", "", nil
	}
	return fmt.Sprintf("%s#%d-%d", j.Repository, id, j.Attempt), j.Repository + ": " + j.Workflow, nil
}

func printable(s string, maxLen int) bool {
	return len(s) <= maxLen && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// arrive counts a job of the run created at t and returns its arrival after the run's first job.
func (r *runOpen) arrive(t time.Time) time.Duration {
	if t.Before(r.First) { // listed late (the index is eventually consistent): the run began earlier
		shift := r.First.Sub(t).Milliseconds()
		for i := range r.Arrivals {
			r.Arrivals[i] += shift
		}
		r.First = t
	}
	after := t.Sub(r.First)
	r.Arrivals = append(r.Arrivals, after.Milliseconds())
	return after
}

// end learns the fan-outs of the runs that are over and forgets what the item need not keep.
func (k *runsKept) end(now time.Time, lead time.Duration) {
	for run, r := range k.Open {
		if now.Sub(r.Seen) < runQuiet && now.Sub(r.First) < runWindow {
			continue
		}
		delete(k.Open, run)
		h := autoscale.RunHistory{Workflow: r.Workflow}
		for _, ms := range r.Arrivals {
			h.Arrivals = append(h.Arrivals, time.Duration(ms)*time.Millisecond)
		}
		for w, f := range autoscale.LearnFanouts([]autoscale.RunHistory{h}, lead) {
			learned := k.fanouts()
			learned.Add(w, f)
			g := learned[w]
			k.Fanouts[w] = &fanoutKept{First: g.First, Jobs: g.Jobs, AfterMS: g.After.Milliseconds(), WithinMS: g.Within.Milliseconds(), Seen: now}
		}
	}
	for w, f := range k.Fanouts {
		if now.Sub(f.Seen) > fanoutMemory {
			delete(k.Fanouts, w)
		}
	}
	trim(k.Open, maxOpenRuns, func(r *runOpen) time.Time { return r.First })
	trim(k.Fanouts, maxFanouts, func(f *fanoutKept) time.Time { return f.Seen })
}

// trim drops the oldest entries of m (by at) beyond n.
func trim[V any](m map[string]V, n int, at func(V) time.Time) {
	if len(m) <= n {
		return
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return at(m[a]).Compare(at(m[b])) })
	for _, key := range keys[:len(m)-n] {
		delete(m, key)
	}
}

// fanouts are the learned fan-outs as the policy takes them.
func (k *runsKept) fanouts() autoscale.Fanouts {
	out := autoscale.Fanouts{}
	for w, f := range k.Fanouts {
		out[w] = autoscale.Fanout{First: f.First, Jobs: f.Jobs, After: time.Duration(f.AfterMS) * time.Millisecond, Within: time.Duration(f.WithinMS) * time.Millisecond}
	}
	return out
}

// decodeRuns reads the kept runs; what no leader writes is dropped, logged.
func decodeRuns(s string, log *slog.Logger) *runsKept {
	k := &runsKept{}
	if s != "" {
		if err := json.Unmarshal([]byte(s), k); err != nil {
			log.Warn("autoscale: kept runs unreadable, starting afresh", "err", err)
			k = &runsKept{}
		}
	}
	if k.Open == nil {
		k.Open = map[string]*runOpen{}
	}
	if k.Fanouts == nil {
		k.Fanouts = map[string]*fanoutKept{}
	}
	for run, r := range k.Open {
		if r == nil || r.First.IsZero() || !printable(r.Workflow, 2*maxWorkflowLen) || slices.ContainsFunc(r.Arrivals, func(ms int64) bool { return ms < 0 }) {
			log.Warn("autoscale: a kept run no leader writes, dropped", "run", run)
			delete(k.Open, run)
		}
	}
	for w, f := range k.Fanouts {
		if f == nil || f.First < 0 || f.Jobs < autoscale.MinFanout || f.AfterMS < 0 || f.WithinMS < f.AfterMS || f.Jobs > 100000 {
			log.Warn("autoscale: a kept fan-out no leader writes, dropped", "workflow", w)
			delete(k.Fanouts, w)
		}
	}
	return k
}
