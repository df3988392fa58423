package leader_test

// "Never two leaders", judged in fake time (testing/synctest) over an in-memory lease that keeps
// store.AcquireLease's rule (nobody holds it, the holder's lease expired at the caller's clock, or
// the caller holds it). A monitor samples every replica many times per lease period and reports
// any moment where two replicas lead, or where one leads without holding an unexpired lease.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/leader"
)

// world is the lease item and the clock every replica reads (time.Now in the bubble, plus a jump
// that moves every clock at once without firing a timer: a process paused while time went on).
type world struct {
	mu      sync.Mutex
	holder  string
	expires time.Time
	jump    atomic.Int64
}

func (w *world) now() time.Time { return time.Now().Add(time.Duration(w.jump.Load())) }

// held reports whether holder holds an unexpired lease now.
func (w *world) held(holder string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holder == holder && w.now().Before(w.expires)
}

// replicaStore is one replica's view of the lease, with its faults: broken (every call fails
// before it is applied), lose (every acquisition is applied and its answer lost), pause (the
// next acquisition is applied and its answer held until the channel closes, whatever the
// caller's deadline: a process paused right after its call).
type replicaStore struct {
	w      *world
	broken atomic.Bool
	lose   atomic.Bool
	pause  atomic.Pointer[chan struct{}]
}

func (s *replicaStore) AcquireLease(_ context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if s.broken.Load() {
		return store.Lease{}, errors.New("connection refused")
	}
	s.w.mu.Lock()
	now := s.w.now()
	if s.w.holder != "" && s.w.holder != holder && !s.w.expires.Before(now) {
		s.w.mu.Unlock()
		return store.Lease{}, fmt.Errorf("lease %s held by %s: %w", name, s.w.holder, store.ErrConflict)
	}
	s.w.holder, s.w.expires = holder, now.Add(ttl)
	l := store.Lease{Name: name, Holder: holder, ExpiresAt: s.w.expires}
	s.w.mu.Unlock()
	if p := s.pause.Swap(nil); p != nil {
		<-*p
	}
	if s.lose.Load() {
		return store.Lease{}, errors.New("InternalServerError: answer lost after the write")
	}
	return l, nil
}

func (s *replicaStore) ReleaseLease(_ context.Context, _, holder string) error {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.holder == holder {
		s.w.holder = ""
	}
	return nil
}

func (s *replicaStore) CurrentLease(_ context.Context, name string) (store.Lease, error) {
	if s.broken.Load() {
		return store.Lease{}, errors.New("connection refused")
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.w.holder == "" {
		return store.Lease{}, store.ErrNotFound
	}
	return store.Lease{Name: name, Holder: s.w.holder, ExpiresAt: s.w.expires}, nil
}

// fakeReplica is one elector running in the bubble.
type fakeReplica struct {
	name  string
	st    *replicaStore
	e     *leader.Elector
	stop  context.CancelFunc
	gains atomic.Int32 // OnChange(true) calls
}

func (r *fakeReplica) leading() bool {
	_, ok := r.e.Leading()
	return ok
}

// cluster runs replicas and the monitor in one bubble.
type cluster struct {
	t        *testing.T
	w        *world
	ttl      time.Duration
	rmu      sync.Mutex // guards replicas: the monitor reads them while a scenario starts more
	replicas []*fakeReplica
	mu       sync.Mutex
	bad      []string
}

func (c *cluster) all() []*fakeReplica {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return slices.Clone(c.replicas)
}

func newCluster(t *testing.T, ttl time.Duration) *cluster {
	return &cluster{t: t, w: &world{}, ttl: ttl}
}

func (c *cluster) violation(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) < 10 {
		c.bad = append(c.bad, fmt.Sprintf("at +%s: ", time.Duration(c.w.jump.Load()))+fmt.Sprintf(format, args...))
	}
}

// start runs a replica; its OnChange(true) is judged at once: nobody else may lead then.
func (c *cluster) start(name string) *fakeReplica {
	r := &fakeReplica{name: name, st: &replicaStore{w: c.w}}
	e, err := leader.New(r.st, leader.Options{
		Name: "cron", Holder: name, TTL: c.ttl, Now: c.w.now, Logger: slog.New(slog.DiscardHandler),
		OnChange: func(leading bool) {
			if !leading {
				return
			}
			r.gains.Add(1)
			c.judge(name + " told it leads")
		},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	r.e = e
	ctx, cancel := context.WithCancel(c.t.Context())
	r.stop = cancel
	c.rmu.Lock()
	c.replicas = append(c.replicas, r)
	c.rmu.Unlock()
	go e.Run(ctx)
	return r
}

// judge checks the rule now: at most one replica leads, and one that leads holds an unexpired
// lease.
func (c *cluster) judge(when string) {
	var leaders []string
	for _, r := range c.all() {
		if r.leading() {
			leaders = append(leaders, r.name)
			if !c.w.held(r.name) {
				c.violation("%s: %s leads without holding an unexpired lease", when, r.name)
			}
		}
	}
	if len(leaders) > 1 {
		c.violation("%s: %v lead at once", when, leaders)
	}
}

// monitor judges every ttl/50 until ctx ends.
func (c *cluster) monitor(ctx context.Context) {
	tick := time.NewTicker(c.ttl / 50)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.judge("monitor")
		}
	}
}

// run is a scenario: it starts the monitor, runs body, stops everything (also when body fails the
// test) and reports the violations seen.
func (c *cluster) run(body func()) {
	ctx, cancel := context.WithCancel(c.t.Context())
	go c.monitor(ctx)
	defer func() {
		cancel()
		for _, r := range c.all() {
			r.stop()
		}
		synctest.Wait()
		for _, v := range c.bad {
			c.t.Error(v)
		}
	}()
	body()
}

// within sleeps in steps of ttl/100 until cond holds, at most d (fake time); false if it never did.
func (c *cluster) within(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(c.ttl / 100) {
		if cond() {
			return true
		}
	}
	return cond()
}

const fakeTTL = 3 * time.Second

// TestNeverTwoLeaders: the scenarios of a lease's life, in fake time, judged continuously.
func TestNeverTwoLeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body func(t *testing.T, c *cluster, a, b *fakeReplica)
	}{
		{"expiry and takeover within one lease period", takeover},
		{"renewal applied, its answer lost", lostRenewals},
		{"paused holder resumes after its lease expired", pausedHolder},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, fakeTTL)
				c.run(func() {
					a := c.start("a")
					if !c.within(fakeTTL/10, a.leading) {
						t.Fatal("a does not lead an unheld lease")
					}
					b := c.start("b")
					time.Sleep(3 * fakeTTL) // many renewals by a, attempts by b
					if !a.leading() || b.leading() {
						t.Fatalf("leading: a %v, b %v; want a alone", a.leading(), b.leading())
					}
					tc.body(t, c, a, b)
				})
			})
		})
	}
}

// takeover: a's store becomes unreachable; a stops leading when the TTL it secured runs out, and
// b takes the lease within one lease period (plus b's poll) of a's last renewal.
func takeover(t *testing.T, c *cluster, a, b *fakeReplica) {
	broke := time.Now()
	a.st.broken.Store(true)
	if !c.within(fakeTTL+fakeTTL/3+fakeTTL/10, b.leading) {
		t.Fatalf("b did not take over within %s of a's store breaking", fakeTTL+fakeTTL/3)
	}
	t.Logf("b took over %s after a's store broke", time.Since(broke))
	if a.leading() {
		t.Error("a still leads after b took over")
	}
}

// lostRenewals: a's renewals are applied and their answers lost for two lease periods: a stops
// leading at the end of the TTL it last saw secured, b never takes the lease a keeps renewing,
// and a leads again once an answer arrives.
func lostRenewals(t *testing.T, c *cluster, a, b *fakeReplica) {
	lost := time.Now()
	a.st.lose.Store(true)
	time.Sleep(fakeTTL + fakeTTL/10)
	if a.leading() {
		t.Errorf("a leads %s after its renewals' answers were lost", time.Since(lost))
	}
	time.Sleep(fakeTTL)
	if b.leading() {
		t.Error("b took a lease whose holder kept renewing it")
	}
	a.st.lose.Store(false)
	if !c.within(fakeTTL/3, a.leading) {
		t.Error("a does not lead again once its renewals are answered")
	}
}

// pausedHolder: a's renewal is applied, and a pauses before its answer arrives while time goes on
// past its lease; b takes over; then a resumes with that old answer. a must not lead, nor be told
// it leads (OnChange), on a lease that expired while it was paused.
func pausedHolder(t *testing.T, c *cluster, a, b *fakeReplica) {
	hold := make(chan struct{})
	a.st.pause.Store(&hold)
	gains := a.gains.Load()
	if !c.within(fakeTTL/2, func() bool { return a.st.pause.Load() == nil }) {
		t.Fatal("a never renewed")
	}
	// The pause: every clock moves on two lease periods at once; no timer has fired yet.
	c.w.jump.Add(int64(2 * fakeTTL))
	if a.leading() {
		t.Error("a leads right after a pause longer than its lease")
	}
	if !c.within(fakeTTL, b.leading) {
		t.Fatal("b did not take the lease that expired during a's pause")
	}
	time.Sleep(fakeTTL) // a's own timers fire: it knows it stopped leading
	close(hold)         // then its renewal's old answer arrives
	time.Sleep(fakeTTL)
	if a.gains.Load() != gains {
		t.Errorf("a was told it leads %d times after resuming on an expired lease", a.gains.Load()-gains)
	}
	if !b.leading() || a.leading() {
		t.Errorf("after a resumed: a leads %v, b leads %v; want b alone", a.leading(), b.leading())
	}
}
