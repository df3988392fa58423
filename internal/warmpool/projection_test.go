package warmpool_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// poolProjections records, per pool, the attributes every by_pool Query made through it projects.
type poolProjections struct {
	store.DynamoDBAPI
	mu    sync.Mutex
	attrs map[string][][]string
}

func (p *poolProjections) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if aws.ToString(in.IndexName) == store.IndexByPool {
		pool := ""
		if v, ok := in.ExpressionAttributeValues[":p"].(*types.AttributeValueMemberS); ok {
			pool = v.Value
		}
		var names []string
		for n := range strings.SplitSeq(aws.ToString(in.ProjectionExpression), ",") {
			n = strings.TrimSpace(n)
			if a, ok := in.ExpressionAttributeNames[n]; ok {
				n = a
			}
			names = append(names, n)
		}
		p.mu.Lock()
		p.attrs[pool] = append(p.attrs[pool], names)
		p.mu.Unlock()
	}
	return p.DynamoDBAPI.Query(ctx, in, o...)
}

// A convergence pass reads of a pool's records only the fields it decides from. Every field it
// asks for the table serialises and the client decodes once per record per pass, and a pass reads
// every record of every pool: the runner version and job access the brief listings carry for
// refresh and the metrics are not read, and an instance's type, usage class and zone only for an
// autoscaled pool (its prices). At 20,000 records, the pass asking for all five was the
// convergence slip of issue #34.
func TestConvergeReadsOnlyTheFieldsItDecidesFrom(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := &poolProjections{DynamoDBAPI: e.db, attrs: map[string][][]string{}}
	st := store.New(q, e.table, store.WithClock(e.clock.Now))
	scaled := e.spec("scaled", 1, 0, "v1-a")
	scaled.Autoscale = &warmpool.AutoscaleSpec{Goal: 5 * time.Second, Loc: time.UTC}
	tg := &targets{}
	tg.set(e.spec("plain", 1, 0, "v1-a"), scaled)
	c, err := poolsize.NewConverger(st, e.calls, fleet.New(e.calls, fleet.Options{Logger: quiet, Now: e.clock.Now}), tg.get,
		poolsize.Options{DeploymentID: deployment, Now: e.clock.Now, Logger: quiet, Autoscale: poolsize.AutoscaleOptions{Store: st}})
	if err != nil {
		t.Fatal(err)
	}
	pass(t, c)
	prices := []string{"instance_type", "usage_class", "zone"}
	for pool, wantPrices := range map[string]bool{"plain": false, "scaled": true} {
		got := q.attrs[pool]
		if len(got) == 0 {
			t.Errorf("pool %s: no by_pool query", pool)
		}
		for _, attrs := range got {
			for _, never := range []string{"runner_version", "job_access"} {
				if slices.Contains(attrs, never) {
					t.Errorf("pool %s: the pass asks for %s, which no convergence step reads (projection %v)", pool, never, attrs)
				}
			}
			for _, p := range prices {
				if slices.Contains(attrs, p) != wantPrices {
					t.Errorf("pool %s: the pass asks for %s: %v, want %v (projection %v)", pool, p, !wantPrices, wantPrices, attrs)
				}
			}
			for _, need := range []string{"state", "run_id", "threshold", "spec_hash", "agent_key"} {
				if !slices.Contains(attrs, need) {
					t.Errorf("pool %s: the pass does not ask for %s (projection %v)", pool, need, attrs)
				}
			}
		}
	}
}
