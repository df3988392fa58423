// Benchmarks of release on the local stack: wall time of releasing a run, and the DynamoDB calls it
// costs per instance (the signal wait polls the table).
package release_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/releasetest"
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

func (c *countingDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.n.Add(1)
	return c.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (c *countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.n.Add(1)
	return c.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.n.Add(1)
	return c.DynamoDBAPI.Query(ctx, in, o...)
}

// BenchmarkRelease releases a run of 4 instances with production poll settings (250 ms) and a
// simulated agent that answers within 20 ms; the same instances are claimed again between
// iterations, as the pool reuses them.
func BenchmarkRelease(b *testing.B) {
	const n = 4
	e := newEnv(b)
	ctx := b.Context()
	ids := e.launch(b, n)
	counter := &countingDB{DynamoDBAPI: e.rawDB}
	counted := store.New(counter, e.st.Table())
	for _, id := range ids {
		if _, err := e.st.Create(ctx, store.Instance{
			ID: id, State: store.StateCreated, RunID: "0", Threshold: time.Now().Add(time.Hour),
			UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: runnerClass, Scope: scope,
		}); err != nil {
			b.Fatal(err)
		}
		if _, err := e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning}); err != nil {
			b.Fatal(err)
		}
	}
	r := release.New(counted, e.classes, e.gh, e.ec2, release.Options{Logger: slog.New(slog.DiscardHandler)})
	var calls int64
	b.ResetTimer()
	for i := range b.N {
		runID := strconv.Itoa(i)
		b.StopTimer()
		if i > 0 { // reuse: the released instances are claimed by the next run and become running
			for _, id := range ids {
				if _, err := e.st.Claim(ctx, id, runID, time.Now().Add(time.Hour)); err != nil {
					b.Fatal(err)
				}
				if _, err := e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: runID}); err != nil {
					b.Fatal(err)
				}
			}
		}
		agent := releasetest.Start(ctx, e.st, runID, ids, releasetest.Deregister)
		before := counter.n.Load()
		b.StartTimer()
		rep, err := r.Release(ctx, runID, time.Hour)
		b.StopTimer()
		calls += counter.n.Load() - before
		if err != nil || rep.Count(release.Pooled) != n {
			b.Fatalf("release %s: %v %+v", runID, err, rep)
		}
		if err := agent.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(calls)/float64(b.N*n), "ddb-calls/instance")
}
