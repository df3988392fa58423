// An autoscaled pool's queue time against its goal: every start the leader measures (a pool job's
// creation at GitHub to its runner's registration, autoscale_inputs.go) is also a queue time. They
// wait in memory for the pool's next autoscale write, which keeps those of the last QueueWindow
// (at most maxQueueTimes, the newest) in the pool's item and their p95 in the decision: what
// `runnerpool status`, the dashboard's pools page and the metrics compare with the goal.
package poolsize

import (
	"slices"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// QueueWindow is how far back an autoscaled pool's queue time is measured.
const QueueWindow = time.Hour

// maxQueueTimes bounds the queue times an item keeps (the item is written every pass).
const maxQueueTimes = 200

// noteQueueTime keeps a measured queue time of pool for its next autoscale write.
func (c *Converger) noteQueueTime(pool string, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queued == nil {
		c.queued = map[string][]time.Duration{}
	}
	c.queued[pool] = append(c.queued[pool], wait)
}

// takeQueueTimes adds the queue times measured since the pool's last write to st's, dated now,
// drops those QueueWindow old or older (or dated after now: a clock gone back) and returns the p95
// of those kept and how many there are.
func (c *Converger) takeQueueTimes(pool string, st *store.AutoscaleState, now time.Time) (time.Duration, int) {
	c.mu.Lock()
	pending := c.queued[pool]
	delete(c.queued, pool)
	c.mu.Unlock()
	kept := slices.DeleteFunc(slices.Clone(st.QueueTimes), func(q store.QueueTime) bool {
		return !q.At.After(now.Add(-QueueWindow)) || q.At.After(now)
	})
	for _, w := range pending {
		kept = append(kept, store.QueueTime{At: now, Wait: w})
	}
	st.QueueTimes = kept[max(0, len(kept)-maxQueueTimes):]
	return queueP95(st.QueueTimes), len(st.QueueTimes)
}

// queueP95 is the nearest-rank 95th percentile of the waits (0 when none).
func queueP95(qs []store.QueueTime) time.Duration {
	if len(qs) == 0 {
		return 0
	}
	w := make([]time.Duration, len(qs))
	for i, q := range qs {
		w[i] = q.Wait
	}
	slices.Sort(w)
	rank := (95*len(w) + 99) / 100 // ceil(0.95 n), 1-based
	return w[rank-1]
}
