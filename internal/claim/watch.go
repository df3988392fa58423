// watch.go: the verification of claims and fresh instances without congestion collapse. One poller
// per Registrar (one per replica) reads the agents' reports of every instance being waited on, all
// of them in one BatchGetItem per round, and each instance on its own back-off schedule: a claimed
// instance is read first after ClaimPollInterval, then at intervals growing by half up to
// PollInterval. A fixed 50 ms poll per claimed instance made the table's read load grow with the
// number of waits and their length, and the waits grow with the table's load; here a burst of 60
// claims costs a handful of requests per round, and each wait about ten item reads for a 2 s
// registration.
package claim

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// watchSlack coalesces rounds: a subscription due within it is read with the round that is due now.
const watchSlack = 15 * time.Millisecond

// watchReadTimeout bounds one round's read.
const watchReadTimeout = 10 * time.Second

// watcher is the shared poller. It runs while there is a subscription, and stops when the last one
// goes.
type watcher struct {
	st  Store
	log *slog.Logger

	mu      sync.Mutex
	subs    map[*subscription]struct{}
	running bool
	wake    chan struct{} // a new subscription: recompute the next round
}

// subscription is one wait's interest in one instance's reports.
type subscription struct {
	id    string
	first time.Duration // the interval to the first read
	every time.Duration // the interval to the next read (grows by half up to max)
	max   time.Duration
	due   time.Time
	// expected, when set, is when the reports will likely show what the wait is for (a
	// registration, expect.go): the read due past it is moved to it and the back-off starts over
	// from first there, so the read that sees the report comes soon after it rather than up to max
	// later. It shapes the schedule only; nothing is decided from it.
	expected time.Time
	flat     int         // reads left at the first interval, from the expected time on (expectedReads)
	withAck  atomic.Bool // read the acknowledgement too
	reported chan observation
}

// observation is one round's read of one instance.
type observation struct {
	store.Report
	acked  bool      // the acknowledgement was read
	readAt time.Time // when the round's read was sent: the reports are at least this fresh
}

func newWatcher(st Store, log *slog.Logger) *watcher {
	return &watcher{st: st, log: log, subs: map[*subscription]struct{}{}, wake: make(chan struct{}, 1)}
}

// subscribe starts reading id's reports, first after first, then backing off by half up to max;
// expect, when longer than first, is when they will likely show what the wait is for (see
// subscription.expected).
func (w *watcher) subscribe(id string, first, maxEvery, expect time.Duration) *subscription {
	now := time.Now()
	s := &subscription{id: id, first: first, every: first, max: max(first, maxEvery), due: now.Add(first), reported: make(chan observation, 1)}
	if expect > first {
		s.expected = now.Add(expect)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs[s] = struct{}{}
	if !w.running {
		w.running = true
		go w.run()
		return s
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return s
}

func (w *watcher) unsubscribe(s *subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.subs, s)
}

// run is the poller: wait for the earliest due subscription, read every due one in one batch,
// hand each its observation.
func (w *watcher) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ok := w.next()
		if !ok {
			return
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-w.wake:
			timer.Stop() // go1.23 timers: no stale tick survives Stop or Reset
			continue
		}
		w.round(w.due(time.Now()))
	}
}

// next is the earliest due time; false (and the poller stops) when nobody is subscribed.
func (w *watcher) next() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.subs) == 0 {
		w.running = false
		return time.Time{}, false
	}
	var next time.Time
	for s := range w.subs {
		if next.IsZero() || s.due.Before(next) {
			next = s.due
		}
	}
	return next, true
}

// due takes the subscriptions due by now (plus the slack) and schedules their next read.
func (w *watcher) due(now time.Time) []*subscription {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*subscription
	for s := range w.subs {
		if s.due.After(now.Add(watchSlack)) {
			continue
		}
		out = append(out, s)
		s.schedule(now)
	}
	return out
}

// expectedReads is how many reads follow the expected time at the first interval before the
// back-off grows again: registrations spread around the expected time (the agent notices a claim
// within its own poll interval), and the read that sees one should come within first of it.
const expectedReads = 4

// schedule sets the next read after the one at now: every later, every growing by half up to max.
// A read that would come after the expected time comes at it instead (or first after now, when
// this read is the one at it), followed by expectedReads reads first apart; then the back-off
// starts over from first.
func (s *subscription) schedule(now time.Time) {
	switch {
	case !s.expected.IsZero() && !now.Add(s.every).Before(s.expected):
		at := s.expected
		if at.Before(now.Add(watchSlack)) {
			at = now.Add(s.first)
		}
		s.due, s.every, s.expected, s.flat = at, s.first, time.Time{}, expectedReads
		return
	case s.flat > 0:
		s.flat--
		s.due = now.Add(s.first)
		return
	}
	s.due = now.Add(s.every)
	s.every = min(s.every+s.every/2, s.max)
}

// round reads the reports of subs in one batch and hands them out. A subscription whose wait is
// still busy with the last observation misses this one: the next round brings a fresher one.
func (w *watcher) round(subs []*subscription) {
	if len(subs) == 0 {
		return
	}
	qs := make([]store.ReportQuery, 0, len(subs))
	acked := make([]bool, len(subs))
	for i, s := range subs {
		acked[i] = s.withAck.Load()
		qs = append(qs, store.ReportQuery{ID: s.id, Ack: acked[i]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchReadTimeout)
	defer cancel()
	sent := time.Now()
	reports, err := w.st.Reports(ctx, store.CredentialRegistration, qs)
	for i, s := range subs {
		o := observation{acked: acked[i], readAt: sent}
		if err != nil {
			o.SignalErr, o.AckErr = err, err
		} else {
			o.Report = reports[s.id]
		}
		select {
		case s.reported <- o:
		default:
		}
	}
	if err != nil {
		w.log.Debug("reading claimed instances' reports", "instances", len(subs), "err", err)
	}
}
