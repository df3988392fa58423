// Heartbeats and worker signals: the items an instance agent writes about itself and the control
// plane reads. They live beside the instance record (same partition key) but in items of their own,
// so an agent's writes never race the control plane's conditional state changes.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// SignalRecord is the last signal an instance sent.
type SignalRecord struct {
	Signal Signal
	RunID  string // the run the signal is about (registration and release signals)
	At     time.Time
	Detail string // free text, e.g. why registration failed
}

func (s *Store) signalKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(s.instancePK(id)), attrSK: sv(skSignal)}
}

func (s *Store) heartbeatKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(s.instancePK(id)), attrSK: sv(skHeartbeat)}
}

// PutHeartbeat records that the instance is alive at the store's now.
func (s *Store) PutHeartbeat(ctx context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	item := s.heartbeatKey(id)
	item["at"] = ms(s.now())
	item[attrTTL] = n(s.now().Add(terminatedRetention).Unix())
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
	return classify("writing heartbeat of "+id, err)
}

// Heartbeat returns the time of the instance's last heartbeat (ErrNotFound if it never sent one).
func (s *Store) Heartbeat(ctx context.Context, id string) (time.Time, error) {
	item, err := s.getItem(ctx, "heartbeat of "+id, s.heartbeatKey(id))
	if err != nil {
		return time.Time{}, err
	}
	d := &decoder{item: item}
	at := fromMS(d.num("at"))
	if d.err == nil && at.IsZero() {
		d.fail(fmt.Errorf("no time"))
	}
	if d.err != nil {
		return time.Time{}, fmt.Errorf("heartbeat of %s: %w: %w", id, ErrInvalid, d.err)
	}
	return at, nil
}

// PutSignal records a signal of the instance, replacing the previous one.
func (s *Store) PutSignal(ctx context.Context, id string, sig SignalRecord) error {
	if err := validateID(id); err != nil {
		return err
	}
	if _, err := ParseSignal(string(sig.Signal)); err != nil {
		return fmt.Errorf("signal of %s: %w: %w", id, ErrInvalid, err)
	}
	if sig.At.IsZero() {
		sig.At = s.now()
	}
	item := s.signalKey(id)
	item["signal"] = sv(string(sig.Signal))
	item["at"] = ms(sig.At)
	item[attrTTL] = n(sig.At.Add(terminatedRetention).Unix())
	if sig.RunID != "" {
		item["run_id"] = sv(sig.RunID)
	}
	if sig.Detail != "" {
		item["detail"] = sv(sig.Detail)
	}
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
	return classify("writing signal of "+id, err)
}

// LastSignal returns the instance's last signal (ErrNotFound if it never sent one).
func (s *Store) LastSignal(ctx context.Context, id string) (SignalRecord, error) {
	item, err := s.getItem(ctx, "signal of "+id, s.signalKey(id))
	if err != nil {
		return SignalRecord{}, err
	}
	d := &decoder{item: item}
	rec := SignalRecord{RunID: d.str("run_id"), At: fromMS(d.num("at")), Detail: d.str("detail")}
	sig, perr := ParseSignal(d.str("signal"))
	if perr != nil {
		d.fail(perr)
	}
	rec.Signal = sig
	if d.err != nil {
		return SignalRecord{}, fmt.Errorf("signal of %s: %w: %w", id, ErrInvalid, d.err)
	}
	return rec, nil
}

// getItem reads one item with a strongly consistent read; a missing item is ErrNotFound.
func (s *Store) getItem(ctx context.Context, what string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, classify("reading "+what, err)
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return out.Item, nil
}
