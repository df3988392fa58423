// Attribution: whatever holds the instance role can write the agent's partition, so a signal that
// decides something (registered, released) must be attributable to the root agent, not merely
// present there. The agent makes an Ed25519 key pair at its first start and keeps the private half
// in a root-only file of its state directory (agent.signingKey), so the same key signs across
// restarts and reboots; it signs each signal and sends the public half with it. The agent's first
// report (its boot signal) and its registration report are both written before any runner of the
// instance starts, so before any job ran on it. The control plane pins the public half in the
// instance record (a control-plane item) at the first self-signed report it sees, on every path
// (Store.Attribute), and from then on believes only signals signed by that key: an unsigned report,
// or one signed by another key, is refused once a key is pinned. The agent starts its runner only
// once it reads its own key pinned in the record (agent/pin.go), so no job runs before the key of
// the agent's later reports is fixed.
package store

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	attrAgentKey = "agent_key" // on the instance record: the pinned public key
	attrSigKey   = "key"       // on a signal: the public key it claims
	attrSig      = "sig"       // on a signal: the signature
)

// signedMessage is what a signal's signature covers: the instance, the signal, its run, its time
// and its detail, so no signature can be replayed for another instance, run or signal.
func signedMessage(id string, r SignalRecord) []byte {
	return []byte(strings.Join([]string{"runnerpool-signal-v1", id, string(r.Signal), r.RunID,
		strconv.FormatInt(r.At.UnixMilli(), 10), r.Detail}, "\n"))
}

// Sign signs the signal of instance id with the agent's private key, at at (the signal's time):
// it sets At, Key and Sig.
func (r *SignalRecord) Sign(id string, key ed25519.PrivateKey, at time.Time) {
	r.At = at.Truncate(time.Millisecond)
	r.Key = base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	r.Sig = base64.StdEncoding.EncodeToString(ed25519.Sign(key, signedMessage(id, *r)))
}

// SignedBy reports whether the signal of instance id carries a valid signature by the public key
// pub (base64, as pinned).
func (r SignalRecord) SignedBy(id, pub string) bool {
	k, err := base64.StdEncoding.DecodeString(pub)
	if err != nil || len(k) != ed25519.PublicKeySize || r.Key != pub {
		return false
	}
	sig, err := base64.StdEncoding.DecodeString(r.Sig)
	return err == nil && ed25519.Verify(ed25519.PublicKey(k), signedMessage(id, r), sig)
}

// SelfSigned reports whether the signal carries a valid signature by the key it names (the
// first sight of a key, before it is pinned).
func (r SignalRecord) SelfSigned(id string) bool { return r.Key != "" && r.SignedBy(id, r.Key) }

// PinAgentKey writes the agent's public key into the instance record, once: pinning the key already
// pinned is a no-op, another key is ErrConflict (the record keeps its key for its whole life).
func (s *Store) PinAgentKey(ctx context.Context, id, pub string) error {
	if err := validateID(id); err != nil {
		return err
	}
	if k, err := base64.StdEncoding.DecodeString(pub); err != nil || len(k) != ed25519.PublicKeySize {
		return fmt.Errorf("pinning the agent key of %s: not an Ed25519 public key: %w", id, ErrInvalid)
	}
	_, err := s.db.UpdateItem(writeAgentKeyPin.Context(ctx), &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       s.instanceKey(id),
		UpdateExpression:          aws.String("SET #k = :k"),
		ConditionExpression:       aws.String("attribute_exists(pk) AND (attribute_not_exists(#k) OR #k = :k)"),
		ExpressionAttributeNames:  map[string]string{"#k": attrAgentKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": sv(pub)},
	})
	return classify("pinning the agent key of "+id, err)
}

// Attribute decides whether sig, the instance's latest report, may be believed, pinning the key it
// is signed with when the record pins none yet (the agent's first self-signed report the control
// plane sees, written before any job could run: see above). It returns the record with its key.
// An unsigned report is believed only while no key is pinned (an agent that does not sign); a
// report that names a key but whose signature does not verify never is.
func (s *Store) Attribute(ctx context.Context, in Instance, sig SignalRecord) (Instance, bool, error) {
	switch {
	case in.AgentKey != "":
		return in, sig.SignedBy(in.ID, in.AgentKey), nil
	case sig.Key == "":
		return in, true, nil
	case !sig.SelfSigned(in.ID):
		return in, false, nil
	}
	if err := s.PinAgentKey(ctx, in.ID, sig.Key); err != nil {
		if !errors.Is(err, ErrConflict) {
			return in, false, err
		}
		// Another key was pinned meanwhile: judge by the record's.
		cur, gerr := s.Get(ctx, in.ID)
		if gerr != nil {
			return in, false, gerr
		}
		return cur, cur.Attributed(sig), nil
	}
	in.AgentKey = sig.Key
	return in, true, nil
}

// Attributed reports whether a signal of the instance may be believed: signed by the record's pinned
// agent key, or any signal while none is pinned (an agent that does not sign, or before its first
// registration).
func (in Instance) Attributed(sig SignalRecord) bool {
	return in.AgentKey == "" || sig.SignedBy(in.ID, in.AgentKey)
}
