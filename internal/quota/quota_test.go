package quota_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	table string
	clock *clock
	st    *store.Store
	// two ledgers with their own clients: two replicas
	a, b *quota.Ledger
	db   *dynamodb.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	sk := stacktest.Shared(t)
	db := sk.DynamoDB()
	table := stacktest.UniqueName(t, "quota")
	if err := store.CreateTable(t.Context(), db, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	c := &clock{t: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	return &env{
		table: table, clock: c, db: db,
		st: store.New(db, table, store.WithClock(c.Now)),
		a:  quota.New(db, table, quota.Options{Now: c.Now}),
		b:  quota.New(sk.DynamoDB(), table, quota.Options{Now: c.Now}),
	}
}

func repoLimit(max int) []quota.Limit {
	return []quota.Limit{{Kind: quota.LimitRepository, Counter: quota.RepositoryCounter("42"), Max: max, Label: "acme/api"}}
}

func counter(t *testing.T, l *quota.Ledger, name string) int {
	t.Helper()
	n, err := l.Counter(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReserveUnderConcurrency: 40 reservations from two ledgers (two replicas with their own
// clients) at once against a limit of 10: exactly 10 win, the counter says 10, and every refusal
// names the limit.
func TestReserveUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var won, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			l := []*quota.Ledger{e.a, e.b}[i%2]
			err := l.Reserve(t.Context(), quota.Reservation{ID: fmt.Sprint("run-", i), Amount: 1, Deadline: e.clock.Now().Add(time.Hour)}, repoLimit(10))
			var re *quota.RefusedError
			switch {
			case err == nil:
				won.Add(1)
			case errors.As(err, &re):
				refused.Add(1)
				if re.Kind != quota.LimitRepository || re.Max != 10 || re.Asked != 1 {
					t.Errorf("refusal %+v", re)
				}
			default:
				t.Errorf("reservation %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 10 || refused.Load() != 30 {
		t.Errorf("won %d, refused %d; want 10 and 30", won.Load(), refused.Load())
	}
	if n := counter(t, e.a, quota.RepositoryCounter("42")); n != 10 {
		t.Errorf("counter %d, want 10", n)
	}
	views, err := e.b.Counters(t.Context())
	if err != nil || len(views) != 1 || views[0].Refused != 30 || views[0].Label != "acme/api" || views[0].RefusedAt.IsZero() {
		t.Errorf("counters %+v (%v), want one labelled acme/api with 30 refusals", views, err)
	}
}

// TestReserveBadInput: a reservation larger than the limit, or of no units, writes nothing.
func TestReserveBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	err := e.a.Reserve(ctx, quota.Reservation{ID: "big", Amount: 11}, repoLimit(10))
	if !errors.Is(err, quota.ErrRefused) {
		t.Errorf("11 of 10: %v, want refused", err)
	}
	for _, r := range []quota.Reservation{{ID: "zero"}, {ID: "", Amount: 1}, {ID: "neg", Amount: -1}} {
		if err := e.a.Reserve(ctx, r, repoLimit(10)); err == nil {
			t.Errorf("reservation %+v accepted", r)
		}
	}
	if n := counter(t, e.a, quota.RepositoryCounter("42")); n != 0 {
		t.Errorf("counter %d, want 0", n)
	}
}

// lostAnswer applies every transaction, then applies it again and answers the second call: what
// the SDK's retry does when the first answer was lost after DynamoDB applied the write. The second
// call gets a client request token of its own, so DynamoDB's token idempotency (10 minutes, same
// token) does not hide what the ledger itself must recognise.
type lostAnswer struct {
	*dynamodb.Client
}

func (d lostAnswer) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	first := *in
	if _, err := d.Client.TransactWriteItems(ctx, &first, o...); err != nil {
		return nil, err
	}
	again := *in
	again.ClientRequestToken = nil
	return d.Client.TransactWriteItems(ctx, &again, o...)
}

// TestLostAnswersCountOnce: a reservation and a release whose answers are lost after they were
// applied (and retried) count once, never twice.
func TestLostAnswersCountOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	l := quota.New(lostAnswer{e.db}, e.table, quota.Options{Now: e.clock.Now})
	if err := l.Reserve(ctx, quota.Reservation{ID: "r1", Amount: 3}, repoLimit(10)); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, l, quota.RepositoryCounter("42")); n != 3 {
		t.Errorf("after a retried reservation: %d, want 3", n)
	}
	if err := l.Release(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, l, quota.RepositoryCounter("42")); n != 0 {
		t.Errorf("after a retried release: %d, want 0", n)
	}
}

// TestConcurrentReleasesGiveBackOnce: two replicas releasing and recounting the same reservation
// at once give its units back once.
func TestConcurrentReleasesGiveBackOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	for i := range 5 {
		if err := e.a.Reserve(ctx, quota.Reservation{ID: fmt.Sprint("r", i), Amount: 2}, repoLimit(10)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if err := []*quota.Ledger{e.a, e.b}[i%2].Release(ctx, fmt.Sprint("r", i%5)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := counter(t, e.a, quota.RepositoryCounter("42")); n != 0 {
		t.Errorf("counter %d after releases, want 0", n)
	}
}

func record(t *testing.T, st *store.Store, id, run, class string) {
	t.Helper()
	_, err := st.Create(t.Context(), store.Instance{ID: id, State: store.StateCreated, RunID: run, RunnerClass: class, Threshold: st.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRecountFollowsTheRecords: a settled reservation keeps a unit per instance that still holds
// it; a terminated instance, or one that no longer serves the reservation's run, gives it back.
func TestRecountFollowsTheRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	for _, id := range []string{"i-1", "i-2", "i-3"} {
		record(t, e.st, id, "run-a", "std")
	}
	if err := e.a.Reserve(ctx, quota.Reservation{ID: "run-a", Run: "run-a", Amount: 4}, repoLimit(10)); err != nil {
		t.Fatal(err)
	}
	// Settled on three instances: the fourth unit is given back at once.
	if err := e.a.Settle(ctx, "run-a", []string{"i-1", "i-2", "i-3"}); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, e.a, quota.RepositoryCounter("42")); n != 3 {
		t.Errorf("after settling on 3: %d, want 3", n)
	}
	if _, err := e.st.Transition(ctx, "i-1", store.Change{From: []store.State{store.StateCreated}, To: store.StateTerminated, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	empty := ""
	if _, err := e.st.Transition(ctx, "i-2", store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "run-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Transition(ctx, "i-2", store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "run-a", SetRunID: &empty}); err != nil {
		t.Fatal(err)
	}
	freed, err := e.b.Recount(ctx, e.st, "run-a")
	if err != nil || freed != 2 {
		t.Errorf("recount freed %d (%v), want 2", freed, err)
	}
	if n := counter(t, e.a, quota.RepositoryCounter("42")); n != 1 {
		t.Errorf("after the recount: %d, want 1", n)
	}
	r, err := e.a.Reservation(ctx, "run-a")
	if err != nil || r.Amount != 1 || len(r.Instances) != 1 || r.Instances[0] != "i-3" {
		t.Errorf("reservation %+v (%v), want i-3 alone", r, err)
	}
}

// TestRepair: a pending reservation past its deadline is released (a crash between reserving and
// launching), live instances nobody paid for are adopted, and a counter that drifted is reset to
// the sum of its reservations.
func TestRepair(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	caps := []quota.Limit{{Kind: quota.LimitDeployment, Counter: quota.DeploymentCounter, Max: 5}, {Kind: quota.LimitRunnerClass, Counter: quota.ClassCounter("std"), Max: 5}}
	if err := e.a.Reserve(ctx, quota.Reservation{ID: "crashed", Amount: 3, Deadline: e.clock.Now().Add(time.Minute)}, caps); err != nil {
		t.Fatal(err)
	}
	record(t, e.st, "i-old", "", "std")
	// Drift: a decrement lost outside the ledger's transactions.
	_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &e.table, Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "QUOTA#COUNTER"}, "sk": &types.AttributeValueMemberS{Value: quota.RepositoryCounter("7")}},
		UpdateExpression: aws.String("SET held = :n"), ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "4"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	live, err := e.st.Live(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := quota.RepairOptions{Live: live, AdoptAfter: 10 * time.Minute}

	rep, err := e.b.Repair(ctx, e.st, o)
	if err != nil || rep.Freed != 0 || rep.Adopted != 0 || rep.Reset != 1 {
		t.Errorf("first repair %+v (%v): want only the drift reset", rep, err)
	}
	e.clock.Advance(11 * time.Minute)
	rep, err = e.b.Repair(ctx, e.st, o)
	if err != nil || rep.Freed != 3 || rep.Adopted != 1 || rep.Reset != 0 {
		t.Errorf("second repair %+v (%v): want 3 freed, 1 adopted", rep, err)
	}
	got, err := e.a.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int{}
	for _, c := range got {
		held[c.Name] = c.Held
	}
	want := map[string]int{quota.DeploymentCounter: 1, quota.ClassCounter("std"): 1, quota.RepositoryCounter("7"): 0}
	for k, v := range want {
		if held[k] != v {
			t.Errorf("counter %s = %d, want %d (all: %v)", k, held[k], v, got)
		}
	}
	// Adoption is idempotent.
	if rep, err = e.b.Repair(ctx, e.st, o); err != nil || rep.Adopted != 0 {
		t.Errorf("third repair %+v (%v): nothing to adopt", rep, err)
	}
}

// TestCapsRoom: the room the caps leave a runner class is the smallest of the deployment's and the
// class's, counting pending reservations; a class no cap applies to is not capped.
func TestCapsRoom(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	caps := &quota.Caps{Ledger: e.a, MaxInstances: 10, ClassMax: func(c string) int { return map[string]int{"linux": 4}[c] }}
	if err := caps.Reserve(t.Context(), "f1", "linux", 3); err != nil {
		t.Fatal(err)
	}
	if err := caps.Reserve(t.Context(), "f2", "arm", 5); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		caps       *quota.Caps
		class      string
		wantRoom   int
		wantCapped bool
	}{
		{"class cap is the smaller", caps, "linux", 1, true},
		{"deployment cap only", caps, "arm", 2, true},
		{"no cap", &quota.Caps{Ledger: e.a}, "linux", 0, false},
		{"nil caps", nil, "linux", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			room, capped, err := tt.caps.Room(t.Context(), tt.class)
			if err != nil || room != tt.wantRoom || capped != tt.wantCapped {
				t.Errorf("Room(%s) = %d, %v, %v; want %d, %v", tt.class, room, capped, err, tt.wantRoom, tt.wantCapped)
			}
		})
	}
}
