// reports.go: the agents' reports of many instances in one read. The claim workers of every
// provision a replica serves wait for the same two items per instance (the last signal, the claim's
// acknowledgement); reading them for all waiting instances in one BatchGetItem costs one request per
// 50 to 100 instances instead of one or two per instance and poll.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// batchGetLimit is BatchGetItem's documented maximum of keys per request.
const batchGetLimit = 100

// ReportQuery asks for the last signal of an instance and, with Ack, its last acknowledgement.
type ReportQuery struct {
	ID  string
	Ack bool
}

// Report is what the agent of one instance last reported, as LastSignal and LastAck would return
// it: SignalErr (AckErr) is ErrNotFound when there is none, ErrInvalid (wrapped) for an item that
// does not decode, or the read's error. Ack and AckErr are set only when asked for.
type Report struct {
	Signal    SignalRecord
	SignalErr error
	Ack       Ack
	AckErr    error
}

type reportSlot struct {
	id  string
	ack bool
}

// Reports reads the agents' reports of the queried instances with strongly consistent
// BatchGetItem calls. Keys DynamoDB leaves unprocessed (throttling) are asked again with back-off
// a few times, then reported with an error; the error return is for a request that failed whole.
func (s *Store) Reports(ctx context.Context, kind CredentialKind, qs []ReportQuery) (map[string]Report, error) {
	out := make(map[string]Report, len(qs))
	slots := map[[2]string]reportSlot{}
	var keys []map[string]types.AttributeValue
	for _, q := range qs {
		if err := validateID(q.ID); err != nil {
			out[q.ID] = Report{SignalErr: err, AckErr: err}
			continue
		}
		r := Report{SignalErr: fmt.Errorf("signal of %s: %w", q.ID, ErrNotFound)}
		keys = append(keys, s.signalKey(q.ID))
		slots[[2]string{s.agentPK(q.ID), skSignal}] = reportSlot{id: q.ID}
		if q.Ack {
			r.AckErr = fmt.Errorf("acknowledgement of %s: %w", q.ID, ErrNotFound)
			keys = append(keys, s.ackKey(q.ID, kind))
			slots[[2]string{s.agentPK(q.ID), skAck + "#" + string(kind)}] = reportSlot{id: q.ID, ack: true}
		}
		out[q.ID] = r
	}
	for start := 0; start < len(keys); start += batchGetLimit {
		chunk := keys[start:min(start+batchGetLimit, len(keys))]
		items, left, err := s.batchGet(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			d := &decoder{item: item}
			slot, ok := slots[[2]string{d.str(attrPK), d.str(attrSK)}]
			if !ok {
				continue
			}
			r := out[slot.id]
			if slot.ack {
				r.Ack, r.AckErr = decodeAck(slot.id, kind, item)
			} else {
				r.Signal, r.SignalErr = decodeSignal(slot.id, item)
			}
			out[slot.id] = r
		}
		for _, key := range left {
			d := &decoder{item: key}
			slot := slots[[2]string{d.str(attrPK), d.str(attrSK)}]
			r := out[slot.id]
			unread := fmt.Errorf("reading the reports of %s: left unprocessed by DynamoDB", slot.id)
			if slot.ack {
				r.AckErr = unread
			} else {
				r.SignalErr = unread
			}
			out[slot.id] = r
		}
	}
	return out, nil
}

// batchGet reads up to 100 keys, asking again for what DynamoDB leaves unprocessed (it does so
// under throttling, and the documented answer is to retry with exponential back-off). left is what
// is still unread after the last try.
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue) (items, left []map[string]types.AttributeValue, err error) {
	wait := 20 * time.Millisecond
	for try := 0; ; try++ {
		res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			s.table: {Keys: keys, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			return nil, nil, classify("reading agents' reports", err)
		}
		items = append(items, res.Responses[s.table]...)
		keys = res.UnprocessedKeys[s.table].Keys
		if len(keys) == 0 || try == 3 {
			return items, keys, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("reading agents' reports: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
}
