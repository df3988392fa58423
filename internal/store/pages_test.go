package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// TestByStatePage: pages of a state resume from their cursor, earliest threshold first, and list
// every record once with no empty last page; agent-partition items padding the index are skipped;
// a malformed cursor is ErrInvalid.
func TestByStatePage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, db, table := newStore(t)
	now := time.Now()
	var want []string
	for i := range 23 {
		id := fmt.Sprintf("i-%017d", i)
		// Thresholds in reverse of the ids, so the index order is not the id order.
		if _, err := st.Create(ctx, store.Instance{ID: id, State: store.StateWarming, Threshold: now.Add(time.Duration(100-i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
	}
	for i := range 7 {
		poison(t, db, table, store.AgentPK("i-attacker"), fmt.Sprintf("P%d", i), map[string]types.AttributeValue{
			"idx_state": &types.AttributeValueMemberS{Value: "warming"},
			"threshold": &types.AttributeValueMemberN{Value: fmt.Sprint(now.Add(time.Duration(90-3*i) * time.Minute).UnixMilli())},
		})
	}
	for _, per := range []int{1, 5, 23, 1000} {
		var got []string
		cursor, pages := "", 0
		for {
			recs, next, err := st.ByStatePage(ctx, store.StateWarming, per, cursor)
			if err != nil {
				t.Fatalf("page %d of %d: %v", pages+1, per, err)
			}
			pages++
			if len(recs) == 0 || len(recs) > per {
				t.Fatalf("page %d of %d: %d records", pages, per, len(recs))
			}
			for _, in := range recs {
				got = append(got, in.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d: %v, want %v", per, got, want)
		}
		if wantPages := (len(want) + per - 1) / per; pages != wantPages {
			t.Errorf("pages of %d: %d pages, want %d", per, pages, wantPages)
		}
	}
	for _, bad := range []string{"x", "!!", "e30", "eyJwIjoiYSIsImsiOiJiIiwidCI6Ingg"} {
		if _, _, err := st.ByStatePage(ctx, store.StateWarming, 5, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("cursor %q: %v, want ErrInvalid", bad, err)
		}
	}
	for _, n := range []int{0, 1001} {
		if _, _, err := st.ByStatePage(ctx, store.StateWarming, n, ""); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%d records: %v, want ErrInvalid", n, err)
		}
	}
	if _, _, err := st.ByStatePage(ctx, store.StateTerminated, 5, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("terminated: %v, want ErrInvalid", err)
	}
}
