// Once-markers: a conditional put that succeeds for the first writer of a key only, used to make
// webhook deliveries (and anything else redelivered) idempotent across replicas.
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

const prefixOnce = "ONCE#"

// MarkOnce records key and reports whether this call was the first to do so. The marker expires
// after ttl (DynamoDB TTL), after which the key may be marked again.
func (s *Store) MarkOnce(ctx context.Context, key string, ttl time.Duration) (first bool, _ error) {
	if key == "" || len(key) > 512 || ttl <= 0 {
		return false, fmt.Errorf("once-marker %q ttl %s: %w", key, ttl, ErrInvalid)
	}
	now, token := s.now(), newWriteToken()
	_, err := s.db.PutItem(writeOnce.Context(ctx), &dynamodb.PutItemInput{
		TableName: &s.table,
		Item: map[string]types.AttributeValue{
			attrPK: sv(prefixOnce + key), attrSK: sv("ONCE"),
			"expires_at": ms(now.Add(ttl)), attrTTL: n(now.Add(ttl).Unix()), attrWrite: sv(token),
		},
		// DynamoDB deletes expired items lazily (within days), so an expired marker still present
		// is treated as absent.
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR expires_at < :now"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": ms(now)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil || isOwnWrite(err, token) {
		// The marker this call wrote, its answer lost: still the first.
		return true, nil
	}
	if err = classify("marking "+key, err); errors.Is(err, ErrConflict) {
		return false, nil
	}
	return false, err
}
