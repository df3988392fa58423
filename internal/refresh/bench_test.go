// Benchmarks of a refresh pass on the local stack: a pass that terminates 100 expired instances,
// and a steady-state pass over 100 idle instances in the pool (nothing to do but check), with the
// AWS calls each costs per instance.
package refresh_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// countingDB counts the DynamoDB calls made through it.
type countingDB struct {
	store.DynamoDBAPI
	n atomic.Int64
}

func (c *countingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.n.Add(1)
	return c.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (c *countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.n.Add(1)
	return c.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.n.Add(1)
	return c.DynamoDBAPI.Query(ctx, in, o...)
}

func (e *env) countedRefresher() (*refresh.Refresher, *countingDB) {
	c := &countingDB{DynamoDBAPI: e.db.DynamoDBAPI}
	opts := e.opts
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.Scopes = nil
	return refresh.New(store.New(c, e.st.Table(), store.WithClock(e.clock.Now)), e.ec2, e.gh, pool.StaticResolver{}, opts), c
}

func BenchmarkRefreshPass(b *testing.B) {
	const n = 100
	b.Run("expire-100", func(b *testing.B) {
		e := newEnv(b)
		ctx := b.Context()
		r, db := e.countedRefresher()
		var ddb, ec2calls int64
		for range b.N {
			b.StopTimer()
			past := e.clock.Now().Add(-time.Second)
			for _, id := range e.launch(b, n, deployment) {
				e.record(b, id, store.StateRunning, past)
			}
			e.ec2srv.ResetCalls()
			before := db.n.Load()
			b.StartTimer()
			rep, err := r.Run(ctx)
			b.StopTimer()
			if err != nil || len(rep.Expiry.Terminated) != n {
				b.Fatalf("pass: %v, terminated %d", err, len(rep.Expiry.Terminated))
			}
			ddb += db.n.Load() - before
			for _, c := range e.ec2srv.Calls() {
				ec2calls += int64(c)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(ddb)/float64(b.N*n), "ddb-calls/instance")
		b.ReportMetric(float64(ec2calls)/float64(b.N*n), "ec2-calls/instance")
	})
	b.Run("steady-100-idle", func(b *testing.B) {
		e := newEnv(b)
		ctx := b.Context()
		future := e.clock.Now().Add(24 * time.Hour)
		for _, id := range e.launch(b, n, deployment) {
			e.record(b, id, store.StateIdle, future)
			if _, err := e.st.MarkPooled(ctx, id); err != nil { // pooled by a verified release
				b.Fatal(err)
			}
			if err := e.queue.Put(ctx, pool.Message{InstanceID: id, UsageClass: "on-demand", InstanceType: "c6i.large", Threshold: future}, 0); err != nil {
				b.Fatal(err)
			}
		}
		r, db := e.countedRefresher()
		before := db.n.Load()
		b.ResetTimer()
		for range b.N {
			rep, err := r.Run(ctx)
			if err != nil || rep.Changed() || rep.Pool.Kept != n {
				b.Fatalf("pass: %v, changed %v, kept %d", err, rep.Changed(), rep.Pool.Kept)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(db.n.Load()-before)/float64(b.N*n), "ddb-calls/instance")
	})
}
