package poolsize

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// The kept queue times are the window's, at most maxQueueTimes of the newest, and their p95 is the
// nearest rank.
func TestTakeQueueTimes(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		kept    []store.QueueTime
		pending []time.Duration
		p95     time.Duration
		n       int
	}{
		{"none", nil, nil, 0, 0},
		{"one", nil, []time.Duration{3 * time.Second}, 3 * time.Second, 1},
		{"twenty: the 19th", nil, secondsUpTo(20), 19 * time.Second, 20},
		{"older than the window dropped", []store.QueueTime{{At: t0.Add(-QueueWindow - time.Second), Wait: time.Hour}, {At: t0.Add(-time.Minute), Wait: time.Second}}, nil, time.Second, 1},
		{"dated after now dropped", []store.QueueTime{{At: t0.Add(time.Minute), Wait: time.Hour}}, []time.Duration{time.Second}, time.Second, 1},
		{"capped to the newest", nil, append(repeat(time.Hour, 50), repeat(time.Second, maxQueueTimes)...), time.Second, maxQueueTimes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Converger{}
			for _, w := range tc.pending {
				c.noteQueueTime("p", w)
			}
			st := store.AutoscaleState{QueueTimes: tc.kept}
			p95, n := c.takeQueueTimes("p", &st, t0)
			if p95 != tc.p95 || n != tc.n || len(st.QueueTimes) != n {
				t.Errorf("p95 %s of %d (%d kept); want %s of %d", p95, n, len(st.QueueTimes), tc.p95, tc.n)
			}
			if _, again := c.takeQueueTimes("p", &store.AutoscaleState{}, t0); again != 0 {
				t.Errorf("pending queue times taken twice")
			}
		})
	}
}

func secondsUpTo(n int) []time.Duration {
	var out []time.Duration
	for i := 1; i <= n; i++ {
		out = append(out, time.Duration(i)*time.Second)
	}
	return out
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}
