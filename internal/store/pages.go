// Pages of one state's live records for listings (the dashboard's instances page): a page resumes
// from an opaque cursor, the index key of the last record the page before showed, so a page costs
// the records it shows, never the ones before it.
package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// maxPageRequests bounds the Query requests of one page: a by_state index padded with items that
// are not control-plane records (dropped by the filter) ends the page early, with its cursor,
// rather than reading on.
const maxPageRequests = 8

// pageCursor is a by_state index key without its state (the caller names the state).
type pageCursor struct {
	PK        string `json:"p"`
	SK        string `json:"k"`
	Threshold string `json:"t"`
}

// ByStatePage lists up to n (1 to 1000) live records of a state, earliest threshold first (the
// by_state index's order), after the record a cursor names ("" for the first page). next is the
// cursor of the page after, "" when the index has no record after this page now. A cursor is
// input: a malformed one is ErrInvalid, and a well-formed one only starts the listing elsewhere in
// that state's index.
func (s *Store) ByStatePage(ctx context.Context, state State, n int, cursor string) (recs []Instance, next string, _ error) {
	in, err := byStateQuery(state, time.Time{})
	if err != nil || n <= 0 || n > 1000 {
		return nil, "", fmt.Errorf("a page of %d records in state %q: a live state and 1 to 1000 records are required: %w", n, state, ErrInvalid)
	}
	if cursor != "" {
		if in.ExclusiveStartKey, err = decodeCursor(state, cursor); err != nil {
			return nil, "", err
		}
	}
	in.TableName = &s.table
	controlPlaneOnly(in)
	// One record more than the page: whether a next page exists is known without a request that
	// finds nothing, and the cursor is the key of the page's last record.
	var items []map[string]types.AttributeValue
	for range maxPageRequests {
		in.Limit = aws.Int32(int32(n + 1 - len(recs)))
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, "", classify("listing a page of instances in state "+string(state), err)
		}
		got, kept := s.decodeListed(ctx, IndexByState, page.Items, page.ScannedCount-page.Count)
		recs, items = append(recs, got...), append(items, kept...)
		in.ExclusiveStartKey = page.LastEvaluatedKey
		if len(recs) > n || page.LastEvaluatedKey == nil {
			break
		}
	}
	switch {
	case len(recs) > n:
		return recs[:n], encodeCursor(items[n-1]), nil
	case in.ExclusiveStartKey != nil:
		// The request bound ended the page before it was full: resume where the index stopped.
		return recs, encodeCursor(in.ExclusiveStartKey), nil
	}
	return recs, "", nil
}

// encodeCursor is the cursor of an index item or key.
func encodeCursor(key map[string]types.AttributeValue) string {
	d := &decoder{item: key}
	b, _ := json.Marshal(pageCursor{PK: d.str(attrPK), SK: d.str(attrSK), Threshold: strconv.FormatInt(d.num(attrThreshold), 10)})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(state State, cursor string) (map[string]types.AttributeValue, error) {
	bad := fmt.Errorf("page cursor %.40q: %w", cursor, ErrInvalid)
	if len(cursor) > 2048 {
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, bad
	}
	var c pageCursor
	if json.Unmarshal(b, &c) != nil || c.PK == "" || c.SK == "" || len(c.PK) > 1024 || len(c.SK) > 1024 {
		return nil, bad
	}
	t, err := strconv.ParseInt(c.Threshold, 10, 64)
	if err != nil {
		return nil, bad
	}
	return map[string]types.AttributeValue{
		attrPK: sv(c.PK), attrSK: sv(c.SK), attrIdxState: sv(string(state)), attrThreshold: n(t),
	}, nil
}
