// Foreign items: what a listing meets that is not a control-plane record. The indexes are sparse
// and keyed by attributes any writer may set, so an item of an agent partition (written by code a
// job on the runner may control) can carry idx_state, idx_run, idx_pool or idx_fit and appear in a listing.
// No such item may stop a listing: queries filter on the control plane's key prefix (so huge or
// numerous foreign items are never sent back), count what the filter dropped, and skip, count and
// log once any item that passed the filter but does not decode. Refresh finds agent items with
// AgentItems and deletes those no live instance owns and those that carry an index key.
package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ForeignItemsFunc is told how many items a listing of index skipped because they are not
// control-plane records (the reconciler counts them as runnerpool_foreign_items_total{index}).
type ForeignItemsFunc func(index string, n int)

// WithForeignItems sets the function told of every skipped item.
func WithForeignItems(fn ForeignItemsFunc) Option { return func(s *Store) { s.foreign.count = fn } }

// WithLogger sets the logger of the store's warnings (a foreign item's key, once). Default: slog's.
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.foreign.log = l } }

// maxLoggedKeys bounds the memory of the keys already logged; past it every key is logged again.
const maxLoggedKeys = 4096

// foreignItems counts and logs the items listings skip.
type foreignItems struct {
	count ForeignItemsFunc
	log   *slog.Logger
	mu    sync.Mutex
	seen  map[string]bool
}

func (f *foreignItems) skipped(index string, n int) {
	if n > 0 && f.count != nil {
		f.count(index, n)
	}
}

// logOnce logs a skipped item's key the first time this store meets it.
func (f *foreignItems) logOnce(ctx context.Context, index, key string, err error) {
	f.mu.Lock()
	first := !f.seen[key]
	if first {
		if f.seen == nil || len(f.seen) >= maxLoggedKeys {
			f.seen = map[string]bool{}
		}
		f.seen[key] = true
	}
	f.mu.Unlock()
	if !first {
		return
	}
	log := f.log
	if log == nil {
		log = slog.Default()
	}
	log.WarnContext(ctx, "store: skipped an item that is not a control-plane record", "index", index, "key", key, "error", err)
}

// controlPlaneOnly adds to an index query the filter that keeps only instance records, so an
// item of any other partition is dropped by DynamoDB before it is sent.
func controlPlaneOnly(in *dynamodb.QueryInput) {
	in.FilterExpression = aws.String("begins_with(#pk, :ctl)")
	if in.ExpressionAttributeNames == nil {
		in.ExpressionAttributeNames = map[string]string{}
	}
	in.ExpressionAttributeNames["#pk"] = attrPK
	in.ExpressionAttributeValues[":ctl"] = sv(prefixInstance)
}

// AgentItem is one item of an agent partition, as refresh's sweep sees it.
type AgentItem struct {
	PK, SK string
	// ID is the instance whose partition holds the item.
	ID string
	// Indexed is set when the item carries an index key attribute: never the agent's own writing.
	Indexed bool
}

// AgentItems lists the key of every item in an agent partition, and whether it carries an index
// key. It is a Scan of the whole table (filtered and projected to the keys, so a huge item costs
// read capacity but is not sent): run it at a sweep's pace, not on a hot path.
func (s *Store) AgentItems(ctx context.Context) ([]AgentItem, error) {
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{
		TableName:                &s.table,
		FilterExpression:         aws.String("begins_with(#pk, :agent)"),
		ProjectionExpression:     aws.String("#pk, #sk, #s, #r, #p, #f"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#sk": attrSK, "#s": attrIdxState, "#r": attrIdxRun, "#p": attrIdxPool, "#f": attrIdxFit},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":agent": sv(prefixAgent),
		},
	})
	var out []AgentItem
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("listing agent items", err)
		}
		for _, item := range page.Items {
			d := &decoder{item: item}
			it := AgentItem{PK: d.str(attrPK), SK: d.str(attrSK)}
			it.ID = strings.TrimPrefix(strings.TrimPrefix(it.PK, prefixAgent), s.keyPrefix)
			_, st := item[attrIdxState]
			_, run := item[attrIdxRun]
			_, pool := item[attrIdxPool]
			_, fit := item[attrIdxFit]
			it.Indexed = st || run || pool || fit
			out = append(out, it)
		}
	}
	return out, nil
}

// DeleteAgentItem deletes one item of an agent partition; a missing item is not an error.
func (s *Store) DeleteAgentItem(ctx context.Context, it AgentItem) error {
	if !strings.HasPrefix(it.PK, prefixAgent) {
		return fmt.Errorf("deleting agent item %q: not an agent partition: %w", it.PK, ErrInvalid)
	}
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table,
		Key:       map[string]types.AttributeValue{attrPK: sv(it.PK), attrSK: sv(it.SK)},
	})
	return classify("deleting agent item "+it.PK+" "+it.SK, err)
}
