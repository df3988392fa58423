// The live demand of an autoscaled pool, beside what its profile forecasts: the jobs waiting for it
// now and the instances on their way to them. Waiting are the pool's ledger records not yet
// served (webhook and scale set jobs alike: one query, store.PoolJobs, which lists the served too), its job instances not
// yet running, and, per scale set serving the pool, what the Actions service counts beyond those
// (its statistics, kept in the table by the scale set's listener wherever it runs). In flight are
// the pool's job instances (claimed or being created for a job) and its warming instances.
package poolsize

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// LiveStore is where an autoscaled pool's live signals are read; *store.Store satisfies it. An
// AutoscaleStore that is not one leaves a pool's own records as its only live signal.
type LiveStore interface {
	PoolJobs(ctx context.Context, pool string) ([]store.PoolJob, error)
	ScaleSetStatsOf(ctx context.Context, pool string) ([]store.ScaleSetStats, []error, error)
}

const (
	// maxWaitingAge: a ledger record waiting longer is a job GitHub cancelled (it cancels jobs
	// queued for 24 h) that the worker abandons when it next meets it, not demand.
	maxWaitingAge = 24 * time.Hour
	// maxStatsAge: a scale set's statistics older than this are no reading of now (its listener
	// stopped, or the scale set serves another pool).
	maxStatsAge = 10 * time.Minute
	// maxStatsJobs bounds a believable job count of one scale set's statistics.
	maxStatsJobs = 100000
)

// liveDemand is what the pool's decision reads as live.
type liveDemand struct {
	waiting, inFlight int
	queued            int // ledger records waiting (in waiting)
	service           int // the scale sets' statistics' waiting jobs
	// jobs are the pool's jobs in progress as the ledger lists them (listed: read this pass): its
	// runs in progress are read from them (autoscale_runs.go).
	jobs   []store.PoolJob
	listed bool
}

// live reads the pool's live demand. A signal that cannot be read or is not believable is left out
// with a logged reason: the pool's own records still count.
func (c *Converger) live(ctx context.Context, pool string, cat categories, now time.Time) liveDemand {
	d := liveDemand{inFlight: len(cat.jobs) + len(cat.warming)}
	table := map[int64]int{} // waiting jobs the table knows, by scale set id (0: webhook jobs)
	for _, in := range cat.jobs {
		table[scaleSetOfKey(strings.TrimPrefix(in.RunID, warmpool.JobRunPrefix))]++
	}
	service := map[int64]int{}
	if ls, ok := c.opts.Autoscale.Store.(LiveStore); ok {
		var err error
		d.jobs, err = ls.PoolJobs(ctx, pool)
		if d.listed = err == nil; err != nil {
			c.log.Warn("autoscale: pool jobs not read: the pool's job instances stand in", "pool", pool, "err", err)
		}
		d.queued = waitingJobs(d.jobs, now, table)
		service = c.scaleSetWaiting(ctx, ls, pool, now)
	}
	for id, n := range table {
		if id == 0 {
			d.waiting += n
		} else {
			d.waiting += max(n, service[id]) // the same jobs seen from both ends: the larger count
		}
	}
	for id, n := range service {
		d.service += n
		if _, ok := table[id]; !ok {
			d.waiting += n
		}
	}
	return d
}

// waitingJobs adds the pool's waiting ledger records (those not served yet) among jobs to table
// and returns how many there were.
func waitingJobs(jobs []store.PoolJob, now time.Time, table map[int64]int) int {
	n := 0
	for _, j := range jobs {
		if age := now.Sub(j.CreatedAt); age > maxWaitingAge || j.Status == warmpool.JobServed {
			continue
		}
		table[scaleSetOfKey(strings.TrimPrefix(j.Key, "pooljob:"))]++
		n++
	}
	return n
}

// scaleSetWaiting is, per scale set serving the pool, the jobs its latest statistics count as
// waiting for a runner: those offered (GHES), and those assigned beyond the running ones.
func (c *Converger) scaleSetWaiting(ctx context.Context, ls LiveStore, pool string, now time.Time) map[int64]int {
	out := map[int64]int{}
	stats, bad, err := ls.ScaleSetStatsOf(ctx, pool)
	if err != nil {
		c.log.Warn("autoscale: scale set statistics not read", "pool", pool, "err", err)
		return out
	}
	for _, err := range bad {
		c.log.Warn("autoscale: scale set statistics ignored", "pool", pool, "reason", err)
	}
	for _, st := range stats {
		reason := ""
		switch {
		case st.ScaleSetID <= 0:
			reason = "no scale set id"
		case min(st.Available, st.Acquired, st.Assigned, st.Running) < 0 || max(st.Available, st.Acquired, st.Assigned, st.Running) > maxStatsJobs:
			reason = "a job count not between 0 and " + strconv.Itoa(maxStatsJobs)
		case st.At.After(now.Add(clockSkew)):
			reason = "dated after now"
		case now.Sub(st.At) > maxStatsAge:
			c.log.Debug("autoscale: scale set statistics too old to count", "pool", pool, "scale_set", st.ScaleSet, "at", st.At)
			continue
		}
		if reason != "" {
			c.log.Warn("autoscale: scale set statistics ignored", "pool", pool, "scale_set", st.ScaleSet, "reason", reason)
			continue
		}
		out[st.ScaleSetID] += st.Available + max(0, st.Assigned-st.Running)
	}
	return out
}

// scaleSetOfKey is the scale set id of a pool job's key ("ss<id>-<job>", Job.key), 0 for a
// webhook job's.
func scaleSetOfKey(key string) int64 {
	rest, ok := strings.CutPrefix(key, "ss")
	if !ok {
		return 0
	}
	id, _, _ := strings.Cut(rest, "-")
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
