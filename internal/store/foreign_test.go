package store_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// poison writes, with the table's raw client, an item of an agent partition that carries every
// index key: what a job holding the instance role could write without the attribute condition.
func poison(t testing.TB, db *dynamodb.Client, table, pk, sk string, extra map[string]types.AttributeValue) {
	t.Helper()
	item := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk},
		"idx_state": &types.AttributeValueMemberS{Value: "idle"}, "threshold": &types.AttributeValueMemberN{Value: "1"},
		"idx_run": &types.AttributeValueMemberS{Value: "victim-run"}, "idx_pool": &types.AttributeValueMemberS{Value: "small-x64"},
		"id": &types.AttributeValueMemberS{Value: "i-forged"}, "state": &types.AttributeValueMemberS{Value: "idle"},
	}
	for k, v := range extra {
		item[k] = v
	}
	if _, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: &table, Item: item}); err != nil {
		t.Fatalf("writing poisoning item %s %s: %v", pk, sk, err)
	}
}

// foreignCounter records what the store reports as skipped, by index.
type foreignCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *foreignCounter) add(index string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[index] += n
}

func (c *foreignCounter) get(index string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[index]
}

func TestListingsSkipForeignItems(t *testing.T) {
	t.Parallel()
	var count foreignCounter
	st, db, table := newStore(t, store.WithForeignItems(count.add))
	ctx := t.Context()
	idle(t, st, "i-good")
	if _, err := st.Create(ctx, store.Instance{ID: "i-victim", State: store.StateCreated, RunID: "victim-run", Pool: "small-x64", Threshold: st.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// Index keys in the attacker's own agent partition, a huge one, and a copy of a record under
	// the wrong key.
	poison(t, db, table, store.AgentPK("i-attacker"), "X", nil)
	poison(t, db, table, store.AgentPK("i-attacker"), "HUGE", map[string]types.AttributeValue{
		"reason": &types.AttributeValueMemberS{Value: strings.Repeat("x", 350_000)},
	})
	poison(t, db, table, store.AgentPK("i-attacker"), "NOTANUMBER", map[string]types.AttributeValue{
		"version": &types.AttributeValueMemberS{Value: "not a number"},
	})

	if got, err := st.ByState(ctx, store.StateIdle, time.Time{}); err != nil || len(got) != 1 || got[0].ID != "i-good" {
		t.Errorf("ByState(idle) = %v, %v; want i-good alone", got, err)
	}
	if got, err := st.ByRun(ctx, "victim-run"); err != nil || len(got) != 1 || got[0].ID != "i-victim" {
		t.Errorf("ByRun(victim-run) = %v, %v; want i-victim alone", got, err)
	}
	if got, err := st.ByPool(ctx, "small-x64"); err != nil || len(got) != 1 || got[0].ID != "i-victim" {
		t.Errorf("ByPool(small-x64) = %v, %v; want i-victim alone", got, err)
	}
	if got, err := st.Expired(ctx, st.Now()); err != nil || len(got) != 0 {
		t.Errorf("Expired = %v, %v; want none (the forged thresholds are in the past)", got, err)
	}
	for _, index := range []string{store.IndexByState, store.IndexByRun, store.IndexByPool} {
		if count.get(index) == 0 {
			t.Errorf("no foreign item counted on %s", index)
		}
	}

	items, err := st.AgentItems(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 {
		t.Fatalf("AgentItems = %v, want the 3 poisoning items", items)
	}
	for _, it := range items {
		if !it.Indexed || it.ID != "i-attacker" {
			t.Errorf("AgentItems: %+v, want indexed, of i-attacker", it)
		}
		if err := st.DeleteAgentItem(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if items, err := st.AgentItems(ctx); err != nil || len(items) != 0 {
		t.Errorf("AgentItems after deleting = %v, %v; want none", items, err)
	}
	if err := st.DeleteAgentItem(ctx, store.AgentItem{PK: store.InstancePK("i-good"), SK: "STATE"}); err == nil {
		t.Error("DeleteAgentItem deleted an instance record")
	}
}

// BenchmarkListingWithForeignItems is the figure listing_ms_with_1000_foreign_items: the by_state
// listing refresh and the pool counts run, over 1,000 records, with and without 1,000 poisoning
// items (agent-partition items carrying idx_state and threshold) in the same index partition. Goal:
// within 2x.
func BenchmarkListingWithForeignItems(b *testing.B) {
	for _, foreign := range []int{0, 1000} {
		b.Run(fmt.Sprintf("foreign=%d", foreign), func(b *testing.B) {
			st, db, table := newStore(b)
			ctx := b.Context()
			var items []map[string]types.AttributeValue
			for i := range 1000 {
				items = append(items, map[string]types.AttributeValue{
					"pk": &types.AttributeValueMemberS{Value: store.InstancePK(fmt.Sprintf("i-%04d", i))}, "sk": &types.AttributeValueMemberS{Value: "STATE"},
					"id": &types.AttributeValueMemberS{Value: fmt.Sprintf("i-%04d", i)}, "state": &types.AttributeValueMemberS{Value: "idle"},
					"idx_state": &types.AttributeValueMemberS{Value: "idle"}, "threshold": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())},
					"version": &types.AttributeValueMemberN{Value: "1"},
				})
			}
			for i := range foreign {
				items = append(items, map[string]types.AttributeValue{
					"pk": &types.AttributeValueMemberS{Value: store.AgentPK("i-attacker")}, "sk": &types.AttributeValueMemberS{Value: fmt.Sprintf("P%04d", i)},
					"idx_state": &types.AttributeValueMemberS{Value: "idle"}, "threshold": &types.AttributeValueMemberN{Value: fmt.Sprint(i)},
				})
			}
			batchPut(b, db, table, items)
			b.ResetTimer()
			for b.Loop() {
				got, err := st.ByState(ctx, store.StateIdle, time.Time{})
				if err != nil || len(got) != 1000 {
					b.Fatalf("ByState = %d records, %v", len(got), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/listing")
		})
	}
}

func batchPut(t testing.TB, db *dynamodb.Client, table string, items []map[string]types.AttributeValue) {
	t.Helper()
	for len(items) > 0 {
		n := min(25, len(items))
		var reqs []types.WriteRequest
		for _, it := range items[:n] {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		}
		items = items[n:]
		in := map[string][]types.WriteRequest{table: reqs}
		for len(in[table]) > 0 {
			out, err := db.BatchWriteItem(t.Context(), &dynamodb.BatchWriteItemInput{RequestItems: in})
			if err != nil {
				t.Fatal(err)
			}
			in = out.UnprocessedItems
		}
	}
}
