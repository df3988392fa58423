// This file holds the sharing of runner listings. A release (or a rollback, or the invariant
// checker) confirms with GitHub that an instance's runner is gone once the agent signalled it:
// listing the whole scope per instance costs a page of the scope's runners per instance. Instead a
// caller joins the next listing of its scope that starts after it asked, so that what it reads is
// never older than its question, and every caller that asked meanwhile shares that listing: a burst
// of releases of a scope costs one or two listings, not one per runner. Two bounds keep the cost
// per unit of time rather than per runner: a scope's listings start at least ListingInterval apart
// (the checks that arrive meanwhile gather on the next one), and the pages of all scopes together
// draw on one budget (ListingPagesPerMinute), so that a burst over GitHub's limit slows down and
// gathers more checks per listing instead of being refused.

package ghaccess

import (
	"context"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

type listings struct {
	c        *Client
	interval time.Duration
	pages    *rate.Limiter // every scope's listing pages
	mu       sync.Mutex
	m        map[string]*listState // by lower-case scope
}

func newListings(c *Client, interval time.Duration, pagesPerMinute int) *listings {
	l := &listings{c: c, interval: max(interval, 0), pages: rate.NewLimiter(rate.Inf, 0), m: map[string]*listState{}}
	if pagesPerMinute > 0 {
		// A burst of a tenth of the minute's budget: a quiet deployment lists at once.
		l.pages = rate.NewLimiter(rate.Limit(float64(pagesPerMinute)/60), max(pagesPerMinute/10, 1))
	}
	return l
}

// listState is a scope's listing under way, the one that starts after it, and when the last one
// started.
type listState struct {
	cur, next *listFlight
	started   time.Time
}

type listFlight struct {
	began   bool // its request went out (under listings.mu): later callers wait for the next one
	done    chan struct{}
	runners []Runner
	err     error
}

// get returns a listing of scope that started after get was called.
func (l *listings) get(ctx context.Context, scope string) ([]Runner, error) {
	key := strings.ToLower(scope)
	l.mu.Lock()
	st := l.m[key]
	if st == nil {
		st = &listState{}
		l.m[key] = st
	}
	var f *listFlight
	switch {
	case st.cur == nil:
		f = &listFlight{done: make(chan struct{})}
		st.cur = f
		go l.run(scope, st, f)
	case !st.cur.began:
		f = st.cur // still waiting out the interval: it starts after this call
	case st.next == nil:
		st.next = &listFlight{done: make(chan struct{})}
		f = st.next
	default:
		f = st.next
	}
	l.mu.Unlock()
	select {
	case <-f.done:
		return f.runners, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run makes one listing, no sooner than the interval after the scope's last one started, then
// starts the one its waiters queued meanwhile. A listing runs on its own deadline (callers are
// bounded by theirs while they wait), so that one caller giving up does not fail the others.
func (l *listings) run(scope string, st *listState, f *listFlight) {
	if wait := time.Until(st.started.Add(l.interval)); wait > 0 {
		time.Sleep(wait)
	}
	l.mu.Lock()
	st.started, f.began = time.Now(), true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.MaxRetryWait+time.Minute)
	f.runners, f.err = l.c.listRunners(ctx, scope)
	cancel()
	l.mu.Lock()
	// The scope's state stays (its start time spaces the next listing): one small entry per scope
	// of the deployment's allow-list.
	st.cur, st.next = st.next, nil
	if st.cur != nil {
		go l.run(scope, st, st.cur)
	}
	l.mu.Unlock()
	close(f.done)
}
