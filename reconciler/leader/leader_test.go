package leader_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/leader"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

func newStore(t *testing.T) *store.Store {
	t.Helper()
	stk := stacktest.Shared(t)
	db := stk.DynamoDB()
	table := stacktest.UniqueName(t, "lease")
	if err := store.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	return store.New(db, table)
}

// flaky fails AcquireLease while broken is set (DynamoDB unreachable from this replica).
type flaky struct {
	leader.Store
	broken atomic.Bool
}

func (f *flaky) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if f.broken.Load() {
		return store.Lease{}, errors.New("connection refused")
	}
	return f.Store.AcquireLease(ctx, name, holder, ttl)
}

type running struct {
	e      *leader.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, st leader.Store, holder string, ttl time.Duration) *running {
	t.Helper()
	return startWith(t, st, leader.Options{Name: "cron", Holder: holder, TTL: ttl})
}

func startWith(t *testing.T, st leader.Store, o leader.Options) *running {
	t.Helper()
	e, err := leader.New(st, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		e.Run(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

func (r *running) leading() bool {
	_, ok := r.e.Leading()
	return ok
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOneLeaderAndHandOver(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ttl := time.Second
	a := start(t, st, "a", ttl)
	waitFor(t, 3*time.Second, "a to lead", a.leading)
	ctx, _ := a.e.Leading()
	b := start(t, st, "b", ttl)
	time.Sleep(2 * ttl) // several renewals by a, several attempts by b
	if !a.leading() || b.leading() {
		t.Fatalf("leading: a %v, b %v; want a alone", a.leading(), b.leading())
	}
	if ctx.Err() != nil {
		t.Errorf("a's leadership context ended while a kept renewing: %v", ctx.Err())
	}
	if s := b.e.Status(); s.Holder != "a" || s.Leading {
		t.Errorf("b's status %+v: want a as holder", s)
	}

	a.stop() // graceful: releases the lease
	if ctx.Err() == nil {
		t.Error("a's leadership context is still live after a stopped")
	}
	waitFor(t, 2*ttl, "b to take over", b.leading)
	l, err := st.CurrentLease(context.Background(), "cron")
	if err != nil || l.Holder != "b" {
		t.Errorf("lease %+v %v, want b's", l, err)
	}
}

func TestLeadershipEndsWhenRenewalFails(t *testing.T) {
	t.Parallel()
	base := newStore(t)
	fl := &flaky{Store: base}
	ttl := time.Second
	var failures atomic.Int32
	a := startWith(t, fl, leader.Options{Name: "cron", Holder: "a", TTL: ttl, OnError: func(error) { failures.Add(1) }})
	waitFor(t, 3*time.Second, "a to lead", a.leading)
	ctx, _ := a.e.Leading()
	b := start(t, base, "b", ttl)

	fl.broken.Store(true)
	// a must stop leading before b can take the lease: never two leaders by their own account.
	both := false
	deadline := time.Now().Add(4 * ttl)
	for !b.leading() && time.Now().Before(deadline) {
		if a.leading() && b.leading() {
			both = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	if both {
		t.Error("a and b both led at once")
	}
	if !b.leading() {
		t.Fatal("b did not take over the lease a could not renew")
	}
	if a.leading() || ctx.Err() == nil {
		t.Errorf("a still leads (%v) or its jobs' context is live (%v)", a.leading(), ctx.Err())
	}
	if s := a.e.Status(); s.LastError == nil || failures.Load() == 0 {
		t.Errorf("a's status %+v does not show the renewal error, or OnError was not called (%d)", s, failures.Load())
	}
}

func TestAbandonKeepsTheLease(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	a := start(t, st, "a", 10*time.Second)
	waitFor(t, 3*time.Second, "a to lead", a.leading)
	a.e.Abandon()
	a.stop()
	l, err := st.CurrentLease(context.Background(), "cron")
	if err != nil || l.Holder != "a" || !l.ExpiresAt.After(time.Now()) {
		t.Errorf("lease after an abandoned stop: %+v %v; want a's, unexpired", l, err)
	}
	b := start(t, st, "b", 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	if b.leading() {
		t.Error("b took a lease that has not expired")
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, o := range []leader.Options{
		{Holder: "a", TTL: time.Second},
		{Name: "cron", TTL: time.Second},
		{Name: "cron", Holder: "a", TTL: time.Millisecond},
	} {
		if _, err := leader.New(nil, o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
