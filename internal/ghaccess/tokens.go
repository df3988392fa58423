// This file holds the reuse of registration and remove tokens. GitHub's tokens are valid for one
// hour and may register (or remove) any number of runners of their scope, so minting one per runner
// spends five secondary-limit points per runner for nothing. A token is reused until TokenMargin
// before it expires; from twice the margin one background mint refreshes it, so callers do not wait.
// Concurrent callers of a scope without a usable token share one mint.

package ghaccess

import (
	"context"
	"strings"
	"sync"
	"time"
)

type tokenCache struct {
	c  *Client
	mu sync.Mutex
	m  map[string]*tokenEntry // by kind and lower-case scope
}

type tokenEntry struct {
	tok    RunnerToken
	flight *mintFlight // the mint under way, nil when none
}

// mintFlight is one mint that concurrent callers wait for.
type mintFlight struct {
	done chan struct{}
	tok  RunnerToken
	err  error
}

func newTokenCache(c *Client) *tokenCache {
	return &tokenCache{c: c, m: map[string]*tokenEntry{}}
}

// get returns the cached token of kind for scope, or mints one (sharing a mint under way).
func (tc *tokenCache) get(ctx context.Context, kind, scope string, mint func(context.Context) (RunnerToken, error)) (RunnerToken, error) {
	key := kind + "\x00" + strings.ToLower(scope)
	margin := tc.c.cfg.TokenMargin
	tc.mu.Lock()
	e := tc.m[key]
	if e == nil {
		e = &tokenEntry{}
		tc.m[key] = e
	}
	now := tc.c.now()
	if !e.tok.ExpiresAt.IsZero() && now.Before(e.tok.ExpiresAt.Add(-margin)) {
		if e.flight == nil && !now.Before(e.tok.ExpiresAt.Add(-2*margin)) {
			f := tc.startLocked(e)
			go tc.refresh(key, kind, scope, f, mint)
		}
		tok := e.tok
		tc.mu.Unlock()
		return tok, nil
	}
	f, mine := e.flight, false
	if f == nil {
		f, mine = tc.startLocked(e), true
	}
	tc.mu.Unlock()
	if mine {
		tok, err := mint(ctx)
		tc.finish(e, f, tok, err)
		return tok, err
	}
	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		return RunnerToken{}, ctx.Err()
	}
}

func (tc *tokenCache) startLocked(e *tokenEntry) *mintFlight {
	e.flight = &mintFlight{done: make(chan struct{})}
	return e.flight
}

func (tc *tokenCache) finish(e *tokenEntry, f *mintFlight, tok RunnerToken, err error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	f.tok, f.err = tok, err
	e.flight = nil
	if err == nil && !tok.ExpiresAt.IsZero() {
		e.tok = tok
	}
	close(f.done)
}

// refresh mints ahead of expiry, on its own deadline: no caller waits for it.
func (tc *tokenCache) refresh(key, kind, scope string, f *mintFlight, mint func(context.Context) (RunnerToken, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), tc.c.cfg.MaxRetryWait+time.Minute)
	defer cancel()
	tok, err := mint(ctx)
	if err != nil {
		tc.c.log.Warn("github: refreshing a runner token ahead of expiry failed; the current one is used meanwhile", "kind", kind, "scope", scope, "err", err)
	}
	tc.mu.Lock()
	e := tc.m[key]
	tc.mu.Unlock()
	tc.finish(e, f, tok, err)
}
