// Miss markers: when refresh's pool check first found a pooled instance without its pool message.
// A walk of an SQS queue cannot see a message another reader holds (a pickup deciding about it, a
// crashed replica's receive until its visibility timeout ends), so one walk that misses a message
// proves nothing; two complete walks further apart than the longest visibility timeout do. The
// first miss is kept in the table, not in the refresher's memory, so the proof holds across passes
// of different replicas.
package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const prefixMissed = "MISSED#"

// missedKey names the marker of one pooling (pooledAt) of one instance: a later pooling starts
// afresh.
func (s *Store) missedKey(id string, pooledAt time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: sv(prefixMissed + s.keyPrefix + id), attrSK: sv(strconv.FormatInt(pooledAt.UnixMilli(), 10)),
	}
}

// MissedSince records that a complete walk missed the message of the pooling at pooledAt of
// instance id at time at, unless an earlier miss is recorded, and returns the first recorded miss.
// The write is unconditional (if_not_exists), so a lost answer's retry returns the same time. The
// marker expires after ttl (DynamoDB TTL).
func (s *Store) MissedSince(ctx context.Context, id string, pooledAt, at time.Time, ttl time.Duration) (time.Time, error) {
	if err := validateID(id); err != nil {
		return time.Time{}, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: s.missedKey(id, pooledAt),
		UpdateExpression:         aws.String("SET missed_at = if_not_exists(missed_at, :at), #ttl = :ttl"),
		ExpressionAttributeNames: map[string]string{"#ttl": attrTTL},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":at": ms(at), ":ttl": n(at.Add(ttl).Unix()),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return time.Time{}, classify("recording the missed pool message of "+id, err)
	}
	d := decoder{item: out.Attributes}
	first := fromMS(d.num("missed_at"))
	if d.err != nil {
		return time.Time{}, fmt.Errorf("miss marker of %s: %w", id, d.err)
	}
	return first, nil
}

// ClearMissed forgets the miss marker of the pooling at pooledAt of instance id (its message was
// seen, or it was pooled again). Deleting an absent marker is not an error.
func (s *Store) ClearMissed(ctx context.Context, id string, pooledAt time.Time) error {
	if err := validateID(id); err != nil {
		return err
	}
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: s.missedKey(id, pooledAt)}); err != nil {
		return classify("clearing the missed pool message of "+id, err)
	}
	return nil
}
