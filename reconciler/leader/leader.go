// Package leader keeps the reconciler's leader lease: one replica at a time runs the cron jobs
// (refresh, warm-pool convergence). The lease is an item in the state table taken with a
// conditional put that succeeds only when nobody holds it, the holder's lease has expired, or the
// caller already holds it (store.AcquireLease). The holder renews it every third of its TTL; a
// replica that cannot renew stops leading at the end of the TTL it last secured, before anyone else
// can take the lease; a follower tries again as soon as the holder's lease expires, so a dead
// holder is replaced within about one TTL.
//
// Correctness never depends on the lease: every state change is a conditional write, so two
// replicas that both believed they lead (clock skew, a paused process) would only do a sweep twice.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Store is the part of *store.Store the elector uses.
type Store interface {
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error)
	ReleaseLease(ctx context.Context, name, holder string) error
	CurrentLease(ctx context.Context, name string) (store.Lease, error)
}

// Options configure an Elector.
type Options struct {
	Name   string        // lease name (required)
	Holder string        // this replica's name (required, unique per replica)
	TTL    time.Duration // lease lifetime (required, at least 100 ms)
	// OnChange is called (from the elector's goroutine) whenever leadership is gained or lost.
	OnChange func(leading bool)
	// OnError is called when an attempt to take or renew the lease failed for another reason
	// than another replica holding it (DynamoDB unreachable, throttled).
	OnError func(err error)
	Now     func() time.Time
	Logger  *slog.Logger
}

// Status is what the elector last saw of the lease.
type Status struct {
	Leading   bool
	Name      string
	Holder    string    // the holder last seen (this replica while Leading)
	ExpiresAt time.Time // of the holder's lease as last seen
	LastError error     // of the last attempt, if it failed
}

// Elector acquires and renews one lease.
type Elector struct {
	st   Store
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	leading   bool
	deadline  time.Time // local end of leadership: start of the last successful acquire + TTL
	leadCtx   context.Context
	leadStop  context.CancelFunc
	watchdog  *time.Timer
	status    Status
	abandoned bool
}

// New checks the options and returns an Elector; Run starts it.
func New(st Store, o Options) (*Elector, error) {
	if o.Name == "" || o.Holder == "" || o.TTL < 100*time.Millisecond {
		return nil, fmt.Errorf("leader election: name, holder and a TTL of at least 100ms are required (got %q, %q, %s)", o.Name, o.Holder, o.TTL)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	e := &Elector{st: st, opts: o, log: o.Logger.With("lease", o.Name, "holder", o.Holder)}
	e.status.Name = o.Name
	return e, nil
}

// Leading returns a context that is cancelled when this replica stops leading, and whether it
// leads now. Jobs run under that context, so they stop when leadership is lost.
func (e *Elector) Leading() (context.Context, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading && e.opts.Now().Before(e.deadline) {
		return e.leadCtx, true
	}
	return nil, false
}

// Status returns what the elector last saw.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.status
	s.Leading = e.leading && e.opts.Now().Before(e.deadline)
	return s
}

// Abandon makes Run return without releasing the lease, as a crashed process would: another replica
// takes over only once the lease expires. For tests and demos of failover.
func (e *Elector) Abandon() {
	e.mu.Lock()
	e.abandoned = true
	e.mu.Unlock()
}

// Run acquires and renews the lease until ctx ends; it then stops leading and releases the lease
// (unless Abandon was called), so another replica can take over at once.
func (e *Elector) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			e.stop()
			return
		case <-timer.C:
		}
		timer.Reset(e.attempt(ctx))
	}
}

// attempt tries to take or renew the lease once and returns when to try next.
func (e *Elector) attempt(ctx context.Context) time.Duration {
	ttl := e.opts.TTL
	renewEvery := ttl / 3
	start := e.opts.Now()
	actx, cancel := context.WithTimeout(ctx, renewEvery)
	l, err := e.st.AcquireLease(actx, e.opts.Name, e.opts.Holder, ttl)
	cancel()
	switch {
	case err == nil && !e.opts.Now().Before(start.Add(ttl)):
		// The answer came after the lease it secured had run out (a process paused, a call that
		// hung): another replica may hold the lease by now. Not leading; ask again at once.
		e.lose(fmt.Errorf("the lease secured at %s expired before its answer arrived", start.Format(time.RFC3339Nano)))
		return 0
	case err == nil:
		e.gain(start.Add(ttl), l)
		return renewEvery
	case ctx.Err() != nil:
		return 0
	case errors.Is(err, store.ErrConflict):
		// Another replica holds a valid lease. Try again right after it expires (renewals by
		// the holder push that out), and never less often than every third of the TTL.
		e.lose(errors.New("another replica holds the lease"))
		rctx, rcancel := context.WithTimeout(ctx, renewEvery)
		cur, cerr := e.st.CurrentLease(rctx, e.opts.Name)
		rcancel()
		e.mu.Lock()
		if cerr == nil {
			e.status.Holder, e.status.ExpiresAt = cur.Holder, cur.ExpiresAt
		}
		e.status.LastError = nil
		e.mu.Unlock()
		if cerr != nil {
			return renewEvery
		}
		wait := cur.ExpiresAt.Sub(e.opts.Now()) + 10*time.Millisecond
		return min(max(wait, ttl/20), renewEvery)
	default:
		// DynamoDB is unreachable or throttling: keep leading until the TTL already secured
		// runs out (Leading checks the deadline), and retry sooner.
		e.log.Warn("leader lease: acquiring failed", "error", err)
		if e.opts.OnError != nil {
			e.opts.OnError(err)
		}
		e.mu.Lock()
		e.status.LastError = err
		expired := e.leading && !e.opts.Now().Before(e.deadline)
		e.mu.Unlock()
		if expired {
			e.lose(err)
		}
		return max(ttl/10, 10*time.Millisecond)
	}
}

func (e *Elector) gain(deadline time.Time, l store.Lease) {
	e.mu.Lock()
	was := e.leading
	e.leading, e.deadline = true, deadline
	e.status.Holder, e.status.ExpiresAt, e.status.LastError = l.Holder, l.ExpiresAt, nil
	if !was {
		e.leadCtx, e.leadStop = context.WithCancel(context.Background())
	}
	// Leadership ends at the deadline unless a renewal moves it: the watchdog stops the jobs
	// even when the renewal call itself hangs.
	wait := deadline.Sub(e.opts.Now())
	if e.watchdog == nil {
		e.watchdog = time.AfterFunc(wait, e.checkDeadline)
	} else {
		e.watchdog.Reset(wait)
	}
	e.mu.Unlock()
	if !was {
		e.log.Info("leader lease acquired", "expires_at", l.ExpiresAt)
		if e.opts.OnChange != nil {
			e.opts.OnChange(true)
		}
	}
}

// checkDeadline ends leadership once the secured TTL has run out without a renewal.
func (e *Elector) checkDeadline() {
	e.mu.Lock()
	expired := e.leading && !e.opts.Now().Before(e.deadline)
	e.mu.Unlock()
	if expired {
		e.lose(errors.New("not renewed within the lease TTL"))
	}
}

func (e *Elector) lose(cause error) {
	e.mu.Lock()
	was := e.leading
	e.leading = false
	if e.leadStop != nil {
		e.leadStop()
	}
	if e.watchdog != nil {
		e.watchdog.Stop()
	}
	e.mu.Unlock()
	if was {
		if cause != nil {
			e.log.Warn("leader lease lost", "error", cause)
		} else {
			e.log.Info("stopped leading")
		}
		if e.opts.OnChange != nil {
			e.opts.OnChange(false)
		}
	}
}

// stop ends leadership and releases the lease unless abandoned.
func (e *Elector) stop() {
	e.mu.Lock()
	held, abandoned := e.leading, e.abandoned
	e.mu.Unlock()
	e.lose(nil)
	if !held || abandoned {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.st.ReleaseLease(ctx, e.opts.Name, e.opts.Holder); err != nil {
		e.log.Warn("leader lease: releasing failed; it expires by itself", "error", err)
		return
	}
	e.mu.Lock()
	e.status.Holder, e.status.ExpiresAt = "", time.Time{}
	e.mu.Unlock()
	e.log.Info("leader lease released")
}
