// Pool jobs in progress and scale set statistics: what an autoscaled warm pool's convergence reads
// as live demand. The pool job queue (one SQS queue) is shared by every pool, so a pool's jobs in
// progress are its ledger records queued, being served or served (not yet completed), listed in
// the by_pool index under a key of their own (WAITING#<pool>, the name it had when it listed the
// unserved ones only: pool names never hold '#', so no pool's instance listing meets them). Each
// says its status, run and workflow, so the waiting jobs and the runs in progress are one query.
// A scale set's listener, wherever it runs, keeps the Actions service's latest statistics of the
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

// PoolJob is a pool job in progress: its ledger record says it waits for an instance (Status
// queued or serving) or runs on one (served). What it says of its run is the control plane's
// record of the job's webhook or scale set message; a value the caller does not believe it leaves
// out.
type PoolJob struct {
	Key        string // the ledger key ("pooljob:<job key>")
	Status     string
	CreatedAt  time.Time
	Repository string // owner/name
	RunID      string // the workflow run's id
	Attempt    int
	Workflow   string // the run's workflow (Run.Workflow), "" when its source did not say
}

// PoolJobs lists the jobs in progress of a pool: one query of the by_pool index. An item of any
// partition but a run record's is dropped by the query's filter and counted (foreign.go).
func (s *Store) PoolJobs(ctx context.Context, pool string) ([]PoolJob, error) {
	if pool == "" {
		return nil, fmt.Errorf("listing pool jobs: empty pool name: %w", ErrInvalid)
	}
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: &s.table, IndexName: aws.String(IndexByPool),
		KeyConditionExpression:    aws.String("idx_pool = :p"),
		FilterExpression:          aws.String("begins_with(#pk, :run)"),
		ProjectionExpression:      aws.String("#pk, #id, created_at, #status, repository, run_id, attempt, workflow"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#id": attrID, "#status": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": sv(prefixWaiting + pool), ":run": sv(prefixRun)},
	})
	var out []PoolJob
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing the jobs in progress of "+pool, err)
		}
		skipped := int(page.ScannedCount - page.Count)
		for _, item := range page.Items {
			d := &decoder{item: item}
			w := PoolJob{
				Key: d.str(attrID), Status: d.str("status"), CreatedAt: fromMS(d.num("created_at")), Repository: d.str("repository"),
				RunID: d.str("run_id"), Attempt: int(d.num("attempt")), Workflow: d.str("workflow"),
			}
			if d.err != nil || w.Key == "" || d.str(attrPK) != prefixRun+w.Key {
				skipped++
				s.foreign.logOnce(ctx, IndexByPool, itemKey(item), fmt.Errorf("not a pool job's run record: %v", d.err))
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
