// Brief listings: the passes that read every record of a pool or of the deployment (convergence,
// refresh) decide from a handful of attributes. A brief listing asks DynamoDB for those only
// (ProjectionExpression), which roughly halves what the table serialises, sends and the client
// decodes per record. A brief record has every other field zero: never write one back, build a
// pool message from it or hand it to anything that reads more than BriefAttributes names.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// BriefAttributes are the fields a brief record carries: ID, State, RunID, Threshold, Pool,
// RunnerClass, SpecHash, CreatedAt, Version, PooledAt and AgentKey.
var BriefAttributes = []string{
	attrPK, attrID, "state", "run_id", attrThreshold, "pool", "runner_class", "spec_hash", "created_at", "version",
	attrPooledAt, attrAgentKey,
}

// briefProjection sets the projection of BriefAttributes on a query, with placeholder names (some
// are DynamoDB reserved words).
func briefProjection(in *dynamodb.QueryInput) {
	if in.ExpressionAttributeNames == nil {
		in.ExpressionAttributeNames = map[string]string{}
	}
	names := make([]string, len(BriefAttributes))
	for i, a := range BriefAttributes {
		names[i] = fmt.Sprintf("#b%d", i)
		in.ExpressionAttributeNames[names[i]] = a
	}
	in.ProjectionExpression = aws.String(strings.Join(names, ", "))
}

// ByPoolBrief is ByPool with brief records (convergence's read of a pool).
func (s *Store) ByPoolBrief(ctx context.Context, pool string) ([]Instance, error) {
	if pool == "" {
		return nil, fmt.Errorf("listing by pool: empty pool name: %w", ErrInvalid)
	}
	in := &dynamodb.QueryInput{
		IndexName:                 aws.String(IndexByPool),
		KeyConditionExpression:    aws.String("idx_pool = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": sv(pool)},
	}
	briefProjection(in)
	return s.queryInstances(ctx, "by pool "+pool, in)
}

// ByStateBrief is ByState with brief records.
func (s *Store) ByStateBrief(ctx context.Context, state State, expiredAt time.Time) ([]Instance, error) {
	in, err := byStateQuery(state, expiredAt)
	if err != nil {
		return nil, err
	}
	briefProjection(in)
	return s.queryInstances(ctx, "by state "+string(state), in)
}

// LiveBrief is Live with brief records, the live states read in parallel.
func (s *Store) LiveBrief(ctx context.Context) ([]Instance, error) {
	return s.statesBrief(ctx, time.Time{})
}

// ExpiredBrief is Expired with brief records, the live states read in parallel.
func (s *Store) ExpiredBrief(ctx context.Context, now time.Time) ([]Instance, error) {
	return s.statesBrief(ctx, now)
}

// statesBrief lists every live state (ByStateBrief with expiredAt), in parallel.
func (s *Store) statesBrief(ctx context.Context, expiredAt time.Time) ([]Instance, error) {
	got := make([][]Instance, len(LiveStates))
	errs := make([]error, len(LiveStates))
	var wg sync.WaitGroup
	for i, st := range LiveStates {
		wg.Go(func() { got[i], errs[i] = s.ByStateBrief(ctx, st, expiredAt) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(got...), nil
}
