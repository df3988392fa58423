// Brief listings: the passes that read every record of a pool or of the deployment (convergence,
// refresh) decide from a handful of attributes. A brief listing asks DynamoDB for those only
// (ProjectionExpression), which roughly halves what the table serialises, sends and the client
// decodes per record. A brief record has every other field zero: never write one back, build a
// pool message from it or hand it to anything that reads more than its listing carries.
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
// RunnerClass, Scope (refresh's pool check: which scope queue a pooled record's message is in),
// SpecHash, CreatedAt, Version, PooledAt, AgentKey, RunnerVersion (the runner-version metrics),
// JobAccess (refresh: a pooled instance launched under another posture than its class's now), and
// InstanceType, UsageClass and Zone (an autoscaled pool's prices).
var BriefAttributes = slices.Concat(poolBriefAttributes, []string{"runner_version", "job_access"}, PriceAttributes)

// poolBriefAttributes are the fields of a pool's brief listing (ByPoolBrief), what convergence
// decides a pool from: BriefAttributes less RunnerVersion and JobAccess, which no convergence step
// reads, and less PriceAttributes unless the listing asks for them. Convergence reads every record
// of every pool at each pass, so each field left out is one the table serialises and the client
// decodes 20,000 times less a pass at 20,000 records.
var poolBriefAttributes = []string{
	attrPK, attrID, "state", "run_id", attrThreshold, "pool", "runner_class", "scope", "spec_hash", "created_at", "version",
	attrPooledAt, attrAgentKey,
}

// PriceAttributes are the fields an autoscaled pool's prices are read from: InstanceType,
// UsageClass and Zone (poolsize's AutoscaleOptions.Price).
var PriceAttributes = []string{"instance_type", "usage_class", "zone"}

// briefProjection sets the projection of attrs on a query, with placeholder names (some are
// DynamoDB reserved words).
func briefProjection(in *dynamodb.QueryInput, attrs []string) {
	if in.ExpressionAttributeNames == nil {
		in.ExpressionAttributeNames = map[string]string{}
	}
	names := make([]string, len(attrs))
	for i, a := range attrs {
		names[i] = fmt.Sprintf("#b%d", i)
		in.ExpressionAttributeNames[names[i]] = a
	}
	in.ProjectionExpression = aws.String(strings.Join(names, ", "))
}

// ByPoolBrief is ByPool with brief records of the pool brief fields (poolBriefAttributes), and
// with prices the PriceAttributes too: convergence's read of a pool, with prices for an autoscaled
// one. The pool's partition is read in idSegments ranges of instance ids at once: a query's pages
// come one after the other, so a pool of thousands reads in the time of its largest segment.
func (s *Store) ByPoolBrief(ctx context.Context, pool string, prices bool) ([]Instance, error) {
	if pool == "" {
		return nil, fmt.Errorf("listing by pool: empty pool name: %w", ErrInvalid)
	}
	attrs := poolBriefAttributes
	if prices {
		attrs = slices.Concat(poolBriefAttributes, PriceAttributes)
	}
	got := make([][]Instance, len(idSegments))
	errs := make([]error, len(idSegments))
	var wg sync.WaitGroup
	for i, seg := range idSegments {
		wg.Go(func() {
			in := &dynamodb.QueryInput{
				IndexName:                 aws.String(IndexByPool),
				KeyConditionExpression:    aws.String("idx_pool = :p AND " + seg.cond),
				ExpressionAttributeNames:  map[string]string{"#id": attrID},
				ExpressionAttributeValues: map[string]types.AttributeValue{":p": sv(pool)},
			}
			for k, v := range seg.values {
				in.ExpressionAttributeValues[k] = sv(v)
			}
			briefProjection(in, attrs)
			got[i], errs[i] = s.queryInstances(ctx, "by pool "+pool, in)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Neighbouring segments share their bound (BETWEEN is inclusive): keep each id once.
	seen := map[string]bool{}
	var out []Instance
	for _, in := range slices.Concat(got...) {
		if !seen[in.ID] {
			seen[in.ID] = true
			out = append(out, in)
		}
	}
	return out, nil
}

// idSegments split the id range of a partition whose sort key is the instance id in four by the
// first hex digit of an EC2 instance id (i-0... to i-f...: uniformly spread). Together they cover
// every string, whatever an id looks like.
var idSegments = []struct {
	cond   string
	values map[string]string
}{
	{"#id < :hi", map[string]string{":hi": "i-4"}},
	{"#id BETWEEN :lo AND :hi", map[string]string{":lo": "i-4", ":hi": "i-8"}},
	{"#id BETWEEN :lo AND :hi", map[string]string{":lo": "i-8", ":hi": "i-c"}},
	{"#id >= :lo", map[string]string{":lo": "i-c"}},
}

// ByStateBrief is ByState with brief records.
func (s *Store) ByStateBrief(ctx context.Context, state State, expiredAt time.Time) ([]Instance, error) {
	in, err := byStateQuery(state, expiredAt)
	if err != nil {
		return nil, err
	}
	briefProjection(in, BriefAttributes)
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
