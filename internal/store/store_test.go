package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// fakeClock is a settable clock for thresholds and leases.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newStore creates a fresh table on the shared DynamoDB Local and a store over it.
func newStore(t testing.TB, opts ...store.Option) (*store.Store, *dynamodb.Client, string) {
	t.Helper()
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "state")
	if err := store.CreateTable(context.Background(), db, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table})
	})
	return store.New(db, table, opts...), db, table
}

func idle(t *testing.T, st *store.Store, id string) store.Instance {
	t.Helper()
	ctx := t.Context()
	_, err := st.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: "seed", Threshold: st.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	if _, err = st.Transition(ctx, id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "seed"}); err != nil {
		t.Fatalf("created->running %s: %v", id, err)
	}
	empty := ""
	in, err := st.Transition(ctx, id, store.Change{
		From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "seed", SetRunID: &empty,
		Threshold: st.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatalf("running->idle %s: %v", id, err)
	}
	return in
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()

	created, err := st.Create(ctx, store.Instance{
		ID: "i-0abc", State: store.StateCreated, RunID: "run-7890", Threshold: clock.Now().Add(3 * time.Minute),
		UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, ResourceClass: "medium",
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if created.Version != 1 {
		t.Errorf("version after create = %d, want 1", created.Version)
	}
	if _, err := st.Create(ctx, store.Instance{ID: "i-0abc", State: store.StateCreated}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second Create = %v, want ErrConflict", err)
	}
	if _, err := st.Create(ctx, store.Instance{ID: "i-0new", State: store.StateIdle}); !errors.Is(err, store.ErrIllegalTransition) {
		t.Errorf("Create in idle = %v, want ErrIllegalTransition", err)
	}

	byRun, err := st.ByRun(ctx, "run-7890")
	if err != nil || len(byRun) != 1 || byRun[0].ID != "i-0abc" {
		t.Fatalf("ByRun = %v, %v", byRun, err)
	}

	running, err := st.Transition(ctx, "i-0abc", store.Change{
		From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "run-7890",
		Threshold: clock.Now().Add(6 * time.Hour),
	})
	if err != nil {
		t.Fatalf("created->running: %v", err)
	}
	if running.State != store.StateRunning || running.Version != 2 || running.InstanceType != "c6i.large" {
		t.Errorf("after running: %+v", running)
	}

	// Release: running -> idle clears the run id; the run no longer lists it.
	empty := ""
	idleRec, err := st.Transition(ctx, "i-0abc", store.Change{
		From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "run-7890", SetRunID: &empty,
		Threshold: clock.Now().Add(20 * time.Minute), Reason: "released",
	})
	if err != nil {
		t.Fatalf("running->idle: %v", err)
	}
	if idleRec.RunID != "" || idleRec.Reason != "released" {
		t.Errorf("after release: %+v", idleRec)
	}
	if got, _ := st.ByRun(ctx, "run-7890"); len(got) != 0 {
		t.Errorf("ByRun after release = %v, want none", got)
	}

	// A claim binds the next run; a second claim loses with a conflict naming the winner.
	if _, err := st.Claim(ctx, "i-0abc", "run-9999", clock.Now().Add(time.Minute)); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	_, err = st.Claim(ctx, "i-0abc", "run-1111", clock.Now().Add(time.Minute))
	var ce *store.ConflictError
	if !errors.As(err, &ce) || ce.Current != store.StateClaimed || ce.RunID != "run-9999" {
		t.Fatalf("second Claim = %v, want ConflictError naming claimed by run-9999", err)
	}
	if _, err := st.Claim(ctx, "i-missing", "run-1", clock.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Claim of missing record = %v, want ErrNotFound", err)
	}
	if _, err := st.Transition(ctx, "i-0abc", store.Change{From: []store.State{store.StateClaimed}, To: store.StateCreated}); !errors.Is(err, store.ErrIllegalTransition) {
		t.Errorf("claimed->created = %v, want ErrIllegalTransition", err)
	}

	// Expire: the threshold moves to now, the refresh query finds it, the conditional mark wins once.
	if _, err := st.Expire(ctx, "i-0abc", "run-1111", "wrong run"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Expire for another run = %v, want ErrConflict", err)
	}
	if _, err := st.Expire(ctx, "i-0abc", "run-9999", "registration timed out"); err != nil {
		t.Fatalf("Expire: %v", err)
	}
	expired, err := st.Expired(ctx, clock.Now())
	if err != nil || len(expired) != 1 || expired[0].ID != "i-0abc" {
		t.Fatalf("Expired = %v, %v", expired, err)
	}
	mark := store.Change{From: store.LiveStates[:len(store.LiveStates)-1], To: store.StateTerminating, ExpiredAt: clock.Now(), Reason: "expired"}
	if _, err := st.Transition(ctx, "i-0abc", mark); err != nil {
		t.Fatalf("mark terminating: %v", err)
	}
	if _, err := st.Transition(ctx, "i-0abc", mark); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second mark = %v, want ErrConflict", err)
	}
	done, err := st.Transition(ctx, "i-0abc", store.Change{From: []store.State{store.StateTerminating}, To: store.StateTerminated})
	if err != nil || done.State != store.StateTerminated {
		t.Fatalf("terminating->terminated = %+v, %v", done, err)
	}
	if live, _ := st.Live(ctx); len(live) != 0 {
		t.Errorf("Live after termination = %v, want none", live)
	}
	if _, err := st.Expire(ctx, "i-0abc", "", "again"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Expire of terminated record = %v, want ErrConflict", err)
	}
}

func TestClaimRefusesExpiredRecord(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()
	idle(t, st, "i-1")
	idle(t, st, "i-2")
	// i-1's release timed out: its record was expired while a pool message may still name it.
	if _, err := st.Expire(ctx, "i-1", "", "deregistration signal timed out"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "i-1", "run-1", clock.Now().Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("claim of an expired record = %v, want ErrConflict", err)
	}
	// i-2's idle threshold (an hour) passes.
	clock.Advance(61 * time.Minute)
	if _, err := st.Claim(ctx, "i-2", "run-1", clock.Now().Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("claim past the idle threshold = %v, want ErrConflict", err)
	}
}

// TestMarkPooled: the pool mark is the control plane's, written only on an idle record without a run
// and within its threshold, and every transition clears it (a claim takes the instance out of the
// pool; only the next verified hand-back puts it back).
func TestMarkPooled(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()
	rec := idle(t, st, "i-1")
	if !rec.PooledAt.IsZero() {
		t.Fatalf("a record made idle is marked pooled at %v before any verification", rec.PooledAt)
	}
	// A pool candidate's claim needs the mark: idle alone (a release not verified yet) is refused.
	var unmarked *store.ConflictError
	if _, err := st.ClaimPooled(ctx, "i-1", "run-0", clock.Now().Add(time.Minute)); !errors.As(err, &unmarked) || unmarked.Current != store.StateIdle {
		t.Fatalf("ClaimPooled of an idle record not marked pooled = %v, want a conflict naming idle", err)
	}
	marked, err := st.MarkPooled(ctx, "i-1")
	if err != nil {
		t.Fatalf("MarkPooled: %v", err)
	}
	if !marked.PooledAt.Equal(clock.Now()) || marked.Version != rec.Version+1 {
		t.Errorf("marked = at %v version %d, want at %v version %d", marked.PooledAt, marked.Version, clock.Now(), rec.Version+1)
	}
	if got, err := st.Get(ctx, "i-1"); err != nil || !got.PooledAt.Equal(clock.Now()) {
		t.Errorf("Get after the mark = %v, %v; want pooled at %v", got.PooledAt, err, clock.Now())
	}
	claimed, err := st.ClaimPooled(ctx, "i-1", "run-1", clock.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("ClaimPooled: %v", err)
	}
	if !claimed.PooledAt.IsZero() {
		t.Errorf("a claim left the pool mark at %v", claimed.PooledAt)
	}
	var ce *store.ConflictError
	if _, err := st.MarkPooled(ctx, "i-1"); !errors.As(err, &ce) || ce.Current != store.StateClaimed {
		t.Errorf("MarkPooled of a claimed record = %v, want a conflict naming claimed", err)
	}
	idle(t, st, "i-2")
	clock.Advance(61 * time.Minute) // past the idle threshold
	if _, err := st.MarkPooled(ctx, "i-2"); !errors.As(err, &ce) || ce.Current != store.StateIdle {
		t.Errorf("MarkPooled past the threshold = %v, want a conflict (still idle)", err)
	}
	if _, err := st.MarkPooled(ctx, "i-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MarkPooled of no record = %v, want ErrNotFound", err)
	}
	warm, err := st.Create(ctx, store.Instance{ID: "i-3", State: store.StateWarming, Threshold: clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	hot, err := st.Transition(ctx, warm.ID, store.Change{From: []store.State{store.StateWarming}, To: store.StateReady, MarkPooled: true})
	if err != nil || !hot.PooledAt.Equal(clock.Now()) {
		t.Errorf("warming -> ready with MarkPooled = pooled at %v, %v; want %v", hot.PooledAt, err, clock.Now())
	}
}

func TestRefreshMarkSkipsRenewedRecord(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()
	idle(t, st, "i-1")
	seen := clock.Now().Add(2 * time.Hour)
	// The record's threshold is an hour ahead: a mark conditional on expiry must not win.
	_, err := st.Transition(ctx, "i-1", store.Change{From: []store.State{store.StateIdle}, To: store.StateTerminating, ExpiredAt: clock.Now()})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("mark of unexpired record = %v, want ErrConflict", err)
	}
	if _, err := st.Transition(ctx, "i-1", store.Change{From: []store.State{store.StateIdle}, To: store.StateTerminating, ExpiredAt: seen}); err != nil {
		t.Fatalf("mark of expired record: %v", err)
	}
}

func TestIndexes(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()
	for i := range 5 {
		_, err := st.Create(ctx, store.Instance{
			ID: fmt.Sprintf("i-w%d", i), State: store.StateWarming, Pool: "small-x64",
			Threshold: clock.Now().Add(time.Duration(i) * time.Minute),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := st.Create(ctx, store.Instance{ID: "i-c1", State: store.StateCreated, RunID: "r1", Threshold: clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.ByPool(ctx, "small-x64"); err != nil || len(got) != 5 {
		t.Errorf("ByPool = %d records, %v; want 5", len(got), err)
	}
	if got, err := st.ByState(ctx, store.StateWarming, clock.Now().Add(2*time.Minute)); err != nil || len(got) != 3 {
		t.Errorf("ByState(warming, expired at +2m) = %d records, %v; want 3", len(got), err)
	}
	if got, err := st.Live(ctx); err != nil || len(got) != 6 {
		t.Errorf("Live = %d records, %v; want 6", len(got), err)
	}
	if _, err := st.ByState(ctx, store.StateTerminated, time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ByState(terminated) = %v, want ErrInvalid", err)
	}
	if _, err := st.ByRun(ctx, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ByRun(\"\") = %v, want ErrInvalid", err)
	}
}

func TestUnknownStateInTableIsAnError(t *testing.T) {
	t.Parallel()
	var skipped atomic.Int64
	st, db, table := newStore(t, store.WithForeignItems(func(_ string, n int) { skipped.Add(int64(n)) }))
	ctx := t.Context()
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: store.InstancePK("i-bad")}, "sk": &types.AttributeValueMemberS{Value: "STATE"},
		"id": &types.AttributeValueMemberS{Value: "i-bad"}, "state": &types.AttributeValueMemberS{Value: "zombie"},
		"idx_state": &types.AttributeValueMemberS{Value: "idle"}, "threshold": &types.AttributeValueMemberN{Value: "1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "i-bad"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Get = %v, want ErrInvalid", err)
	}
	// A listing skips and counts it: one bad record never stops a listing.
	if got, err := st.ByState(ctx, store.StateIdle, time.Time{}); err != nil || len(got) != 0 || skipped.Load() != 1 {
		t.Errorf("ByState = %v, %v, %d skipped; want no records, no error, 1 skipped", got, err, skipped.Load())
	}
	// A conflicting write against it still reports a conflict, not a crash.
	if _, err := st.Claim(ctx, "i-bad", "run-1", time.Now()); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Claim = %v, want ErrConflict", err)
	}
}

func TestSignalsAndHeartbeats(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()
	if _, err := st.Heartbeat(ctx, "i-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Heartbeat before any = %v, want ErrNotFound", err)
	}
	if err := st.PutHeartbeat(ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	if at, err := st.Heartbeat(ctx, "i-1"); err != nil || !at.Equal(clock.Now()) {
		t.Errorf("Heartbeat = %v, %v; want %v", at, err, clock.Now())
	}
	if _, err := st.LastSignal(ctx, "i-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LastSignal before any = %v, want ErrNotFound", err)
	}
	if err := st.PutSignal(ctx, "i-1", store.SignalRecord{Signal: store.SignalRegistered, RunID: "run-9"}); err != nil {
		t.Fatal(err)
	}
	sig, err := st.LastSignal(ctx, "i-1")
	if err != nil || sig.Signal != store.SignalRegistered || sig.RunID != "run-9" || !sig.At.Equal(clock.Now()) {
		t.Errorf("LastSignal = %+v, %v", sig, err)
	}
	if err := st.PutSignal(ctx, "i-1", store.SignalRecord{Signal: "UD_WHATEVER"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutSignal(unknown) = %v, want ErrInvalid", err)
	}
	// The signal item never disturbs the instance record or the run index.
	if got, _ := st.ByRun(ctx, "run-9"); len(got) != 0 {
		t.Errorf("ByRun sees the signal item: %v", got)
	}
}

func TestConfigItems(t *testing.T) {
	t.Parallel()
	st, _, _ := newStore(t)
	ctx := t.Context()
	c, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "small-x64", Spec: []byte(`{"hot":1}`)}, 0)
	if err != nil || c.Version != 1 {
		t.Fatalf("PutConfig = %+v, %v", c, err)
	}
	if _, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "small-x64", Spec: []byte(`{}`)}, 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("create over existing = %v, want ErrConflict", err)
	}
	if _, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "small-x64", Spec: []byte(`{"hot":2}`)}, 1); err != nil {
		t.Fatalf("update at version 1: %v", err)
	}
	if _, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "small-x64", Spec: []byte(`{"hot":3}`)}, 1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("stale update = %v, want ErrConflict", err)
	}
	if _, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "bad name", Spec: []byte(`{}`)}, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("bad name = %v, want ErrInvalid", err)
	}
	if _, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "x", Spec: []byte(`{`)}, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("bad JSON = %v, want ErrInvalid", err)
	}
	if _, err := st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigRunnerClass, Name: "small", Spec: []byte(`{"cpu":2}`)}, -1); err != nil {
		t.Fatal(err)
	}
	pools, err := st.ListConfig(ctx, store.ConfigWarmPool)
	if err != nil || len(pools) != 1 || string(pools[0].Spec) != `{"hot":2}` || pools[0].Version != 2 {
		t.Errorf("ListConfig = %+v, %v", pools, err)
	}
	if err := st.DeleteConfig(ctx, store.ConfigWarmPool, "small-x64"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetConfig(ctx, store.ConfigWarmPool, "small-x64"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetConfig after delete = %v, want ErrNotFound", err)
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()
	if _, err := st.AcquireLease(ctx, "cron", "a", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, "cron", "b", 30*time.Second); !errors.Is(err, store.ErrConflict) {
		t.Errorf("b while a holds = %v, want ErrConflict", err)
	}
	clock.Advance(20 * time.Second)
	if _, err := st.AcquireLease(ctx, "cron", "a", 30*time.Second); err != nil {
		t.Errorf("renewal by a: %v", err)
	}
	clock.Advance(31 * time.Second)
	l, err := st.AcquireLease(ctx, "cron", "b", 30*time.Second)
	if err != nil || l.Holder != "b" {
		t.Fatalf("takeover by b after expiry = %+v, %v", l, err)
	}
	if err := st.ReleaseLease(ctx, "cron", "a"); err != nil {
		t.Errorf("release by non-holder: %v", err)
	}
	if cur, err := st.CurrentLease(ctx, "cron"); err != nil || cur.Holder != "b" {
		t.Errorf("CurrentLease = %+v, %v", cur, err)
	}
	if err := st.ReleaseLease(ctx, "cron", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, "cron", "c", time.Second); err != nil {
		t.Errorf("acquire after release: %v", err)
	}
}

// TestConcurrentTransitions races 16 goroutines over 2,000 contested transitions of 100 records
// (20 rounds of the cycle idle -> claimed -> running -> idle, every goroutine trying every
// transition of a round) and checks that each transition had exactly one winner, every loser saw a
// conflict, and no illegal transition was ever written (each record's version counts its writes).
func TestConcurrentTransitions(t *testing.T) {
	t.Parallel()
	const (
		workers = 16
		records = 100
		rounds  = 20
	)
	st, _, _ := newStore(t)
	ctx := t.Context()
	ids := make([]string, records)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%04d", i)
		idle(t, st, ids[i])
	}
	runOf := func(round, worker int) string { return fmt.Sprintf("run-r%d-w%d", round, worker) }
	empty := ""

	// change is the transition worker w attempts in a round: the phase of the cycle is round%3.
	change := func(round, w int) store.Change {
		switch round % 3 {
		case 0: // claim
			run := runOf(round, w)
			return store.Change{From: []store.State{store.StateIdle}, To: store.StateClaimed, RequireNoRun: true, SetRunID: &run, Threshold: time.Now().Add(time.Minute)}
		case 1: // verified: only the claiming run may move it
			return store.Change{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: runOf(round-1, w)}
		default: // release
			return store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: runOf(round-2, w), SetRunID: &empty}
		}
	}

	wins := make([][]atomic.Int32, rounds)
	for r := range wins {
		wins[r] = make([]atomic.Int32, records)
	}
	var unexpected atomic.Int32
	var illegal atomic.Int32
	for r := range rounds {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), uint64(w)))
				for _, k := range rng.Perm(records) {
					_, err := st.Transition(ctx, ids[k], change(r, w))
					switch {
					case err == nil:
						wins[r][k].Add(1)
					case errors.Is(err, store.ErrConflict):
					default:
						unexpected.Add(1)
						t.Errorf("round %d record %d worker %d: %v", r, k, w, err)
					}
					// Every goroutine also tries a transition the state machine forbids; the store must
					// refuse it before writing anything.
					if k%10 == 0 {
						_, err := st.Transition(ctx, ids[k], store.Change{From: []store.State{store.StateIdle}, To: store.StateRunning})
						if !errors.Is(err, store.ErrIllegalTransition) {
							illegal.Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
	}
	if unexpected.Load() > 0 || illegal.Load() > 0 {
		t.Fatalf("%d unexpected errors, %d illegal transitions not refused", unexpected.Load(), illegal.Load())
	}
	contested := 0
	for r := range rounds {
		for k := range records {
			contested++
			if got := wins[r][k].Load(); got != 1 {
				t.Errorf("round %d record %d: %d winners, want exactly 1", r, k, got)
			}
		}
	}
	if contested != 2000 {
		t.Fatalf("contested transitions = %d, want 2000", contested)
	}
	wantState := []store.State{store.StateIdle, store.StateClaimed, store.StateRunning}[rounds%3]
	for _, id := range ids {
		in, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// 3 writes to make it idle, then exactly one write per round: anything else means a transition
		// was written that should not have been.
		if in.Version != 3+rounds || in.State != wantState {
			t.Errorf("%s: version %d state %s, want version %d state %s", id, in.Version, in.State, 3+rounds, wantState)
		}
	}
}

func TestMarkOnce(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 31, 12, 0, 0, 0, time.UTC)}
	st, _, _ := newStore(t, store.WithClock(clock.Now))
	ctx := t.Context()
	var firsts atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			first, err := st.MarkOnce(ctx, "delivery-1", time.Hour)
			if err != nil {
				t.Error(err)
			}
			if first {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if firsts.Load() != 1 {
		t.Errorf("%d first marks of one key, want 1", firsts.Load())
	}
	clock.Advance(2 * time.Hour)
	if first, err := st.MarkOnce(ctx, "delivery-1", time.Hour); err != nil || !first {
		t.Errorf("after expiry = %v, %v; want a first mark again", first, err)
	}
	if _, err := st.MarkOnce(ctx, "", time.Hour); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("empty key = %v, want ErrInvalid", err)
	}
}

func TestInstanceARNKeys(t *testing.T) {
	t.Parallel()
	prefix := store.InstanceARNPrefix("eu-west-1", "123456789012")
	if prefix != "arn:aws:ec2:eu-west-1:123456789012:instance/" {
		t.Fatalf("InstanceARNPrefix = %q", prefix)
	}
	for region, want := range map[string]string{"cn-north-1": "aws-cn", "us-gov-west-1": "aws-us-gov", "us-east-1": "aws"} {
		if got := store.PartitionOf(region); got != want {
			t.Errorf("PartitionOf(%s) = %s, want %s", region, got, want)
		}
	}
	st, db, table := newStore(t, store.WithInstanceKeyPrefix(prefix))
	ctx := t.Context()
	in := idle(t, st, "i-0abc")
	if _, err := st.Claim(ctx, in.ID, "run-1", time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := st.PutCredential(ctx, in.ID, store.Credential{Kind: store.CredentialRegistration, RunID: "run-1", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutHeartbeat(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSignal(ctx, in.ID, store.SignalRecord{Signal: store.SignalRegistered, RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutAck(ctx, in.ID, store.Ack{Kind: store.CredentialRegistration, RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	// Every item of the instance sits under a partition key an IAM policy can name exactly: what the
	// control plane decides from under INSTANCE#${ec2:SourceInstanceARN} (read-only for the
	// instance), what the agent reports under AGENT#${ec2:SourceInstanceARN}.
	for _, tc := range []struct {
		pk   string
		want []string
	}{
		{"INSTANCE#" + prefix + "i-0abc", []string{"CREDENTIAL#registration", "STATE"}},
		{"AGENT#" + prefix + "i-0abc", []string{"ACK#registration", "HEARTBEAT", "SIGNAL"}},
	} {
		out, err := db.Query(ctx, &dynamodb.QueryInput{
			TableName: &table, KeyConditionExpression: aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: tc.pk}},
		})
		if err != nil {
			t.Fatalf("query %s: %v", tc.pk, err)
		}
		var got []string
		for _, it := range out.Items {
			got = append(got, it["sk"].(*types.AttributeValueMemberS).Value)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("items under %s = %v, want %v", tc.pk, got, tc.want)
		}
	}
	if k := st.AgentKey(in.ID); k != "AGENT#"+prefix+"i-0abc" {
		t.Errorf("AgentKey = %q", k)
	}
	if got, err := st.ByRun(ctx, "run-1"); err != nil || len(got) != 1 || got[0].ID != "i-0abc" {
		t.Errorf("ByRun = %+v, %v", got, err)
	}
	if _, err := st.TakeCredential(ctx, in.ID, store.CredentialRegistration, "run-1"); err != nil {
		t.Errorf("TakeCredential: %v", err)
	}
	// A store without the prefix does not see the instance: every component must agree on it.
	if _, err := store.New(db, table).Get(ctx, "i-0abc"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get without the prefix = %v, want ErrNotFound", err)
	}
}

// TestCredentialReadAndAck covers the agent's side of a credential: it acknowledges in its own
// partition and reads without removing; only the control plane's TakeCredential removes it.
func TestCredentialReadAndAck(t *testing.T) {
	t.Parallel()
	st, _, _ := newStore(t)
	ctx := t.Context()
	id := "i-0cred"
	if _, err := st.ReadCredential(ctx, id, store.CredentialRegistration, "run-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ReadCredential of none = %v, want ErrNotFound", err)
	}
	if _, err := st.LastAck(ctx, id, store.CredentialRegistration); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LastAck of none = %v, want ErrNotFound", err)
	}
	if err := st.PutCredential(ctx, id, store.Credential{Kind: store.CredentialRegistration, RunID: "run-1", Token: "t", URL: "u", Labels: []string{"run-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutAck(ctx, id, store.Ack{Kind: store.CredentialRegistration, RunID: "run-1"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutAck(ctx, id, store.Ack{Kind: store.CredentialRegistration}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutAck without run = %v, want ErrInvalid", err)
	}
	for range 2 { // reading leaves it in place
		c, err := st.ReadCredential(ctx, id, store.CredentialRegistration, "run-1")
		if err != nil || c.Token != "t" || c.URL != "u" || !slices.Equal(c.Labels, []string{"run-1"}) {
			t.Fatalf("ReadCredential = %+v, %v", c, err)
		}
	}
	if _, err := st.ReadCredential(ctx, id, store.CredentialRegistration, "run-2"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ReadCredential for another run = %v, want ErrConflict", err)
	}
	if a, err := st.LastAck(ctx, id, store.CredentialRegistration); err != nil || a.RunID != "run-1" || a.At.IsZero() {
		t.Errorf("LastAck = %+v, %v", a, err)
	}
	if _, err := st.TakeCredential(ctx, id, store.CredentialRegistration, "run-1"); err != nil {
		t.Fatalf("TakeCredential: %v", err)
	}
	if _, err := st.ReadCredential(ctx, id, store.CredentialRegistration, "run-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ReadCredential after the withdrawal = %v, want ErrNotFound", err)
	}
}
