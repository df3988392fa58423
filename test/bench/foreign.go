// The foreign items phase: what 1,000 index-poisoning items cost the listings every cron pass and
// the dashboard read. A job that holds the instance role, where the role's attribute condition is
// missing, can write AGENT# items that carry index keys; the listings skip them, and DynamoDB
// filters them out before sending, but it still reads them. The phase times the by_state listing of
// 1,000 idle records (the second look's and refresh's listing) in a table of its own, before and
// after 1,000 such items are written there: listing_ms_with_1000_foreign_items, goal within 2x of
// listing_ms_without_foreign_items. The items have the shape of the records the store writes and
// of the attack in test/sandbox's TestIndexPoisoningStopsNothing.
package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

const (
	foreignItems    = 1000
	foreignListings = 20
)

func phaseForeignItems(ctx context.Context, h *harness, res *Result) (err error) {
	db := h.sb.Stack.DynamoDB()
	table := "runnerpool-bench-foreign"
	if err := store.CreateTable(ctx, db, table); err != nil {
		return err
	}
	defer func() {
		if _, derr := db.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: &table}); derr != nil {
			err = errors.Join(err, fmt.Errorf("deleting table %s: %w", table, derr))
		}
	}()
	st := store.New(db, table)
	threshold := &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())}
	idle := &types.AttributeValueMemberS{Value: string(store.StateIdle)}
	var records, foreign []types.WriteRequest
	for i := range foreignItems {
		id := fmt.Sprintf("i-bench%010d", i)
		records = append(records, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: store.InstancePK(id)}, "sk": &types.AttributeValueMemberS{Value: "STATE"},
			"id": &types.AttributeValueMemberS{Value: id}, "state": idle, "idx_state": idle, "threshold": threshold,
			"version": &types.AttributeValueMemberN{Value: "1"},
		}}})
		foreign = append(foreign, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: store.AgentPK("i-bench-attacker")}, "sk": &types.AttributeValueMemberS{Value: fmt.Sprintf("P%04d", i)},
			"idx_state": idle, "threshold": threshold,
		}}})
	}
	if err := batchWrite(ctx, db, table, records); err != nil {
		return fmt.Errorf("writing the records: %w", err)
	}
	// The first round warms DynamoDB Local's JVM up; the second is the figure.
	if _, _, err := medianListing(ctx, st); err != nil {
		return err
	}
	without, n, err := medianListing(ctx, st)
	if err != nil {
		return err
	}
	if err := batchWrite(ctx, db, table, foreign); err != nil {
		return fmt.Errorf("writing the foreign items: %w", err)
	}
	with, m, err := medianListing(ctx, st)
	if err != nil {
		return err
	}
	if n != foreignItems || m != n {
		return fmt.Errorf("the idle listing had %d records without foreign items and %d with them", n, m)
	}
	h.say("foreign items: by_state(idle) of %d records: %.1f ms without, %.1f ms with %d foreign items", n, ms(without), ms(with), foreignItems)
	res.add(Figure{Name: "listing_ms_without_foreign_items", Value: ms(without), Unit: "ms",
		How: fmt.Sprintf("median of %d by_state listings of %d idle records, in a table of the phase's own", foreignListings, n)})
	res.add(Figure{Name: "listing_ms_with_1000_foreign_items", Value: ms(with), Unit: "ms",
		How: fmt.Sprintf("the same listing with %d AGENT# items carrying idx_state=idle and a threshold in the table (what a job can write with the instance role when the attribute condition is missing); goal within 2x of listing_ms_without_foreign_items (%.2fx)", foreignItems, float64(with)/float64(max(without, 1)))})
	if with > 2*without {
		res.note("foreign items: the listing took %.2fx as long with %d foreign items (goal within 2x)", float64(with)/float64(without), foreignItems)
	}
	return nil
}

// medianListing lists the idle records foreignListings times and returns the median time and the
// number of records listed.
func medianListing(ctx context.Context, st *store.Store) (time.Duration, int, error) {
	var took []time.Duration
	n := 0
	for range foreignListings {
		start := time.Now()
		got, err := st.ByState(ctx, store.StateIdle, time.Time{})
		if err != nil {
			return 0, 0, fmt.Errorf("listing idle records: %w", err)
		}
		took = append(took, time.Since(start))
		n = len(got)
	}
	slices.Sort(took)
	return took[len(took)/2], n, nil
}

// batchWrite writes requests 25 at a time (BatchWriteItem's limit), retrying unprocessed ones.
func batchWrite(ctx context.Context, db *dynamodb.Client, table string, reqs []types.WriteRequest) error {
	for chunk := range slices.Chunk(reqs, 25) {
		in := map[string][]types.WriteRequest{table: chunk}
		for len(in[table]) > 0 {
			out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: in})
			if err != nil {
				return err
			}
			in = out.UnprocessedItems
		}
	}
	return nil
}
