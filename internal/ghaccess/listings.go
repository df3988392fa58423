// This file holds the sharing of runner listings. A release (or a rollback, or the invariant
// checker) confirms with GitHub that an instance's runner is gone once the agent signalled it:
// listing the whole scope per instance costs a page of the scope's runners per instance. Instead a
// caller joins the next listing of its scope that starts after it asked, so that what it reads is
// never older than its question, and every caller that asked meanwhile shares that listing: a burst
// of releases of a scope costs one or two listings, not one per runner.

package ghaccess

import (
	"context"
	"strings"
	"sync"
	"time"
)

type listings struct {
	c  *Client
	mu sync.Mutex
	m  map[string]*listState // by lower-case scope
}

// listState is a scope's listing under way and the one that starts after it.
type listState struct {
	cur, next *listFlight
}

type listFlight struct {
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
		go l.run(key, scope, f)
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

// run makes one listing, then starts the one its waiters queued meanwhile. A listing runs on its
// own deadline (callers are bounded by theirs while they wait), so that one caller giving up does
// not fail the others.
func (l *listings) run(key, scope string, f *listFlight) {
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.MaxRetryWait+time.Minute)
	f.runners, f.err = l.c.listRunners(ctx, scope)
	cancel()
	l.mu.Lock()
	st := l.m[key]
	st.cur, st.next = st.next, nil
	if st.cur != nil {
		go l.run(key, scope, st.cur)
	} else {
		delete(l.m, key)
	}
	l.mu.Unlock()
	close(f.done)
}
