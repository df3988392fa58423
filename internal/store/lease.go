// Leader leases: a conditional put with an expiry decides which reconciler replica runs the cron
// jobs. Correctness never depends on the lease (every state change is conditional anyway); it only
// keeps replicas from doing the same sweep twice.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Lease is a held leader lease.
type Lease struct {
	Name      string
	Holder    string
	ExpiresAt time.Time
}

func leaseKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(prefixLease + name), attrSK: sv(skLease)}
}

// AcquireLease takes or renews the named lease for holder until now+ttl. It succeeds when nobody
// holds it, the holder's lease has expired, or holder already holds it; otherwise ErrConflict.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return Lease{}, fmt.Errorf("lease %q for %q ttl %s: %w", name, holder, ttl, ErrInvalid)
	}
	now := s.now()
	l := Lease{Name: name, Holder: holder, ExpiresAt: now.Add(ttl)}
	item := leaseKey(name)
	item["holder"] = sv(holder)
	item["expires_at"] = ms(l.ExpiresAt)
	item[attrTTL] = n(l.ExpiresAt.Add(time.Hour).Unix())
	_, err := s.db.PutItem(writeLeaseAcquire.Context(ctx), &dynamodb.PutItemInput{
		TableName:           &s.table,
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk) OR expires_at < :now OR holder = :me"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": ms(now), ":me": sv(holder),
		},
	})
	if err != nil {
		return Lease{}, classify(fmt.Sprintf("acquiring lease %s for %s", name, holder), err)
	}
	return l, nil
}

// ReleaseLease gives up the lease if holder holds it; releasing a lease held by another is a no-op.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := s.db.DeleteItem(writeLeaseRelease.Context(ctx), &dynamodb.DeleteItemInput{
		TableName:                 &s.table,
		Key:                       leaseKey(name),
		ConditionExpression:       aws.String("holder = :me"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": sv(holder)},
	})
	if err = classify("releasing lease "+name, err); errors.Is(err, ErrConflict) {
		return nil
	}
	return err
}

// CurrentLease reads the lease as it is (ErrNotFound if nobody ever held it).
func (s *Store) CurrentLease(ctx context.Context, name string) (Lease, error) {
	item, err := s.getItem(ctx, "lease "+name, leaseKey(name))
	if err != nil {
		return Lease{}, err
	}
	d := &decoder{item: item}
	l := Lease{Name: name, Holder: d.str("holder"), ExpiresAt: fromMS(d.num("expires_at"))}
	if d.err != nil {
		return Lease{}, fmt.Errorf("lease %s: %w: %w", name, ErrInvalid, d.err)
	}
	return l, nil
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
