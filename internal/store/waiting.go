// Waiting pool jobs and scale set statistics: what an autoscaled warm pool's convergence reads as
// live demand. The pool job queue (one SQS queue) is shared by every pool, so a pool's waiting
// jobs are its ledger records not yet served, listed in the by_pool index under a key of their
// own (WAITING#<pool>: pool names never hold '#', so no pool's instance listing meets them). A
// scale set's listener, wherever it runs, keeps the Actions service's latest statistics of the
// scale set under its pool, for the leader to read.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	prefixWaiting       = "WAITING#"
	prefixScaleSetStats = "SCALESETSTATS#"
	// statsRetention is how long a scale set's statistics stay after their last write (TTL).
	statsRetention = 24 * time.Hour
)

// WaitingJob is a pool job whose ledger record says it waits for an instance.
type WaitingJob struct {
	Key       string // the ledger key ("pooljob:<job key>")
	CreatedAt time.Time
}

// WaitingJobs lists the waiting jobs of a pool: one query of the by_pool index. An item of any
// partition but a run record's is dropped by the query's filter and counted (foreign.go).
func (s *Store) WaitingJobs(ctx context.Context, pool string) ([]WaitingJob, error) {
	if pool == "" {
		return nil, fmt.Errorf("listing waiting jobs: empty pool name: %w", ErrInvalid)
	}
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String(IndexByPool),
		KeyConditionExpression:    aws.String("idx_pool = :p"),
		FilterExpression:          aws.String("begins_with(#pk, :run)"),
		ProjectionExpression:      aws.String("#pk, #id, created_at"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#id": attrID},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": sv(prefixWaiting + pool), ":run": sv(prefixRun)},
	})
	var out []WaitingJob
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing the waiting jobs of "+pool, err)
		}
		skipped := int(page.ScannedCount - page.Count)
		for _, item := range page.Items {
			d := &decoder{item: item}
			w := WaitingJob{Key: d.str(attrID), CreatedAt: fromMS(d.num("created_at"))}
			if d.err != nil || w.Key == "" || d.str(attrPK) != prefixRun+w.Key {
				skipped++
				s.foreign.logOnce(ctx, IndexByPool, itemKey(item), fmt.Errorf("not a waiting job's run record: %v", d.err))
				continue
			}
			out = append(out, w)
		}
		s.foreign.skipped(IndexByPool, skipped)
	}
	return out, nil
}

// ScaleSetStats is what the Actions service last said of a scale set's jobs (its statistics), as
// its listener kept them.
type ScaleSetStats struct {
	Pool       string // the warm pool serving the scale set
	ScaleSet   string
	ScaleSetID int64
	Available  int // offered, not yet acquired (GHES)
	Acquired   int
	Assigned   int // assigned to the scale set, waiting or running
	Running    int
	At         time.Time // when the listener received them
}

func scaleSetStatsKey(pool, scaleSet string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(prefixScaleSetStats + pool), attrSK: sv(scaleSet)}
}

// PutScaleSetStats keeps a scale set's latest statistics (the last writer wins: they are a
// reading, not a transition).
func (s *Store) PutScaleSetStats(ctx context.Context, st ScaleSetStats) error {
	if st.Pool == "" || st.ScaleSet == "" {
		return fmt.Errorf("scale set statistics: empty pool or scale set name: %w", ErrInvalid)
	}
	item := scaleSetStatsKey(st.Pool, st.ScaleSet)
	item["scale_set_id"], item["available"], item["acquired"] = n(st.ScaleSetID), n(int64(st.Available)), n(int64(st.Acquired))
	item["assigned"], item["running"], item["at"] = n(int64(st.Assigned)), n(int64(st.Running)), ms(st.At)
	item[attrTTL] = n(st.At.Add(statsRetention).Unix())
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
	return classify("writing the statistics of scale set "+st.ScaleSet, err)
}

// ScaleSetStatsOf lists the statistics kept of the scale sets a pool serves. An item that does
// not decode is not returned; its problem is.
func (s *Store) ScaleSetStatsOf(ctx context.Context, pool string) ([]ScaleSetStats, []error, error) {
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: &s.table, KeyConditionExpression: aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": sv(prefixScaleSetStats + pool)},
		ConsistentRead:            aws.Bool(true),
	})
	var out []ScaleSetStats
	var bad []error
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, classify("listing the scale set statistics of "+pool, err)
		}
		for _, item := range page.Items {
			d := &decoder{item: item}
			st := ScaleSetStats{
				Pool: pool, ScaleSet: d.str(attrSK), ScaleSetID: d.num("scale_set_id"),
				Available: int(d.num("available")), Acquired: int(d.num("acquired")),
				Assigned: int(d.num("assigned")), Running: int(d.num("running")), At: fromMS(d.num("at")),
			}
			if d.err != nil {
				bad = append(bad, fmt.Errorf("statistics of scale set %q: %w: %w", st.ScaleSet, ErrInvalid, d.err))
				continue
			}
			out = append(out, st)
		}
	}
	return out, bad, nil
}
