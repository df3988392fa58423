package warmpool_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// indexQueries records the index of every Query made through it.
type indexQueries struct {
	store.DynamoDBAPI
	mu      sync.Mutex
	indexes []string
}

func (q *indexQueries) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	q.mu.Lock()
	q.indexes = append(q.indexes, aws.ToString(in.IndexName))
	q.mu.Unlock()
	return q.DynamoDBAPI.Query(ctx, in, o...)
}

// take returns the indexes queried since the last take, sorted.
func (q *indexQueries) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := slices.Sorted(slices.Values(q.indexes))
	q.indexes = nil
	return out
}

// A steady pass reads each configured pool once (by_pool, brief) and nothing else. Pools removed
// from the configuration are looked for (six by_state listings: the warm and pool-job states) at
// the first pass, when the configured pools change, and every DiscoverEvery: a pool only another
// replica's configuration still had is found at the next search and scaled in, then forgotten
// once empty.
func TestConvergeLooksForRemovedPoolsAtItsPace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := &indexQueries{DynamoDBAPI: e.db}
	st := store.New(q, e.table, store.WithClock(e.clock.Now))
	tg := &targets{}
	tg.set(e.spec("kept", 1, 0, "v1-a"))
	c, err := poolsize.NewConverger(st, e.calls, fleet.New(e.calls, fleet.Options{Logger: quiet, Now: e.clock.Now}), tg.get,
		poolsize.Options{DeploymentID: deployment, Now: e.clock.Now, Logger: quiet, DiscoverEvery: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A pool is read in 4 ranges of instance ids at once (store.ByPoolBrief).
	pools := func(n int) []string { return slices.Repeat([]string{store.IndexByPool}, 4*n) }
	byPool, discovery := pools(1), append(pools(1), slices.Repeat([]string{store.IndexByState}, 6)...)

	pass(t, c)
	if got := q.take(); !slices.Equal(got, discovery) {
		t.Errorf("first pass queried %v, want %v", got, discovery)
	}
	// An instance of a pool this configuration does not have (another replica's older one).
	if _, err := e.st.Create(t.Context(), store.Instance{ID: "i-0ghost000000000001", State: store.StateWarming, Pool: "ghost",
		RunnerClass: runnerClass, Scope: "acme", SpecHash: "v0", Threshold: e.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(30 * time.Second)
	rep := pass(t, c)
	if got := q.take(); !slices.Equal(got, byPool) {
		t.Errorf("steady pass queried %v, want %v", got, byPool)
	}
	if _, ok := rep.Pool("ghost"); ok {
		t.Errorf("the ghost pool was converged before the next search: %+v", rep)
	}

	e.clock.Add(10 * time.Minute)
	rep = pass(t, c)
	if got, want := q.take(), append(pools(1), discovery...); !slices.Equal(got, want) {
		t.Errorf("pass after DiscoverEvery queried %v, want %v (the ghost pool's records too)", got, want)
	}
	if pr, ok := rep.Pool("ghost"); !ok || !pr.Removed || !slices.Equal(pr.Excess, []string{"i-0ghost000000000001"}) {
		t.Fatalf("ghost pool after the search: %+v, %v; want removed, its instance terminated", pr, ok)
	}
	// Looked at once more (empty), then forgotten.
	e.clock.Add(30 * time.Second)
	if _, ok := pass(t, c).Pool("ghost"); !ok {
		t.Error("the emptied ghost pool was not looked at again")
	}
	q.take()
	e.clock.Add(30 * time.Second)
	if rep, got := pass(t, c), q.take(); !slices.Equal(got, byPool) || len(rep.Pools) != 1 {
		t.Errorf("pass after the ghost pool emptied: %d pools, queried %v; want the kept pool alone", len(rep.Pools), got)
	}

	// The configuration changes: searched at once.
	tg.set(e.spec("kept", 1, 0, "v1-a"), e.spec("new", 0, 0, "v1-a"))
	pass(t, c)
	if got, want := q.take(), append(pools(1), discovery...); !slices.Equal(got, want) {
		t.Errorf("pass after a configuration change queried %v, want %v", got, want)
	}
}
