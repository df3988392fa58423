// The agent's partition: heartbeats, worker signals and acknowledgements, the only items an
// instance agent writes. They live under AGENT#<instance key>, apart from everything the control
// plane decides from (the instance record and the credentials it hands out, under
// INSTANCE#<instance key>), so the instance role's IAM policy can tell the two apart with
// dynamodb:LeadingKeys: it may read its own INSTANCE# items and write only its own AGENT# items.
// Whatever is in this partition was written by code a job on the runner may control: the control
// plane reads it as evidence to check (a signal, an acknowledgement), never as a fact to act on.
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
	// Key and Sig attribute the signal to the instance's root agent (attribution.go): the public half
	// of the key the agent keeps in its root-only state directory for the instance's whole life, and
	// its signature. Empty on an unsigned signal.
	Key, Sig string
}

func (s *Store) signalKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(s.agentPK(id)), attrSK: sv(skSignal)}
}

func (s *Store) heartbeatKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(s.agentPK(id)), attrSK: sv(skHeartbeat)}
}

func (s *Store) ackKey(id string, kind CredentialKind) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(s.agentPK(id)), attrSK: sv(skAck + "#" + string(kind))}
}

// Ack is the agent's acknowledgement that it is about to read (and use) its credential of Kind for
// RunID. The agent writes it before it reads the credential, so a control plane that deletes the
// credential and then finds no acknowledgement for the run knows the agent never saw it.
type Ack struct {
	Kind  CredentialKind
	RunID string
	At    time.Time
}

// PutAck records the agent's acknowledgement, replacing the previous one of that kind.
func (s *Store) PutAck(ctx context.Context, id string, a Ack) error {
	if err := validateID(id); err != nil {
		return err
	}
	if a.RunID == "" || (a.Kind != CredentialRegistration && a.Kind != CredentialRemoval) {
		return fmt.Errorf("acknowledgement of %s: kind and run id are required: %w", id, ErrInvalid)
	}
	if a.At.IsZero() {
		a.At = s.now()
	}
	item := s.ackKey(id, a.Kind)
	item["run_id"] = sv(a.RunID)
	item["at"] = ms(a.At)
	item[attrTTL] = n(a.At.Add(terminatedRetention).Unix())
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item})
	return classify("writing acknowledgement of "+id, err)
}

// LastAck returns the agent's last acknowledgement of a kind (ErrNotFound if none).
func (s *Store) LastAck(ctx context.Context, id string, kind CredentialKind) (Ack, error) {
	if err := validateID(id); err != nil {
		return Ack{}, err
	}
	item, err := s.getItem(ctx, "acknowledgement of "+id, s.ackKey(id, kind))
	if err != nil {
		return Ack{}, err
	}
	return decodeAck(id, kind, item)
}

func decodeAck(id string, kind CredentialKind, item map[string]types.AttributeValue) (Ack, error) {
	d := &decoder{item: item}
	a := Ack{Kind: kind, RunID: d.str("run_id"), At: fromMS(d.num("at"))}
	if d.err == nil && a.RunID == "" {
		d.fail(fmt.Errorf("no run id"))
	}
	if d.err != nil {
		return Ack{}, fmt.Errorf("acknowledgement of %s: %w: %w", id, ErrInvalid, d.err)
	}
	return a, nil
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
	if sig.Key != "" {
		item[attrSigKey], item[attrSig] = sv(sig.Key), sv(sig.Sig)
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
	return decodeSignal(id, item)
}

func decodeSignal(id string, item map[string]types.AttributeValue) (SignalRecord, error) {
	d := &decoder{item: item}
	rec := SignalRecord{RunID: d.str("run_id"), At: fromMS(d.num("at")), Detail: d.str("detail"), Key: d.str(attrSigKey), Sig: d.str(attrSig)}
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
