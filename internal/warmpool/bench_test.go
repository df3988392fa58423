// BenchmarkConvergencePass measures one steady-state convergence pass over 2000 warm instances in 4
// pools (hot and stopped, all current): the cost every 30 s of a large deployment with nothing to
// change. It reports the DynamoDB calls per pass; a steady pass makes no EC2 call.
//
//	go test ./internal/warmpool -run '^$' -bench ConvergencePass -benchtime 20x
package warmpool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func BenchmarkConvergencePass(b *testing.B) {
	const pools, hot, stopped = 4, 200, 300
	e := newEnv(b)
	ctx := context.Background()
	var specs []warmpool.PoolSpec
	for p := range pools {
		spec := e.spec(fmt.Sprintf("bench-%d", p), hot, stopped, "v1-bench")
		specs = append(specs, spec)
		for _, st := range []store.State{store.StateReady, store.StateStopped} {
			n := hot
			if st == store.StateStopped {
				n = stopped
			}
			errs := make(chan error, n)
			sem := make(chan struct{}, 16)
			for i := range n {
				sem <- struct{}{}
				go func() {
					defer func() { <-sem }()
					id := fmt.Sprintf("i-%02d%s%013d", p, st[:2], i)
					_, err := e.st.Create(ctx, store.Instance{
						ID: id, State: store.StateWarming, Threshold: e.clock.Now().Add(time.Hour), UsageClass: fleet.OnDemand,
						InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: runnerClass, Pool: spec.Name, Scope: "acme", SpecHash: spec.SpecHash,
					})
					if err == nil {
						_, err = e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: st, Threshold: e.clock.Now().Add(time.Hour)})
					}
					errs <- err
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	counter := awslimit.NewCounter()
	cfg, _ := e.stk.AWSConfig(ctx)
	cfg.APIOptions = append(cfg.APIOptions, counter.AddMiddleware)
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(e.stk.Endpoints.DynamoDB)
		o.DisableValidateResponseChecksum = true
	})
	st := store.New(db, e.table, store.WithClock(e.clock.Now))
	c, err := poolsize.NewConverger(st, e.calls, fleet.New(e.calls, fleet.Options{Logger: quiet}), warmpool.StaticTargets(specs...),
		poolsize.Options{DeploymentID: deployment, Now: e.clock.Now, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	counter.Reset()
	b.ResetTimer()
	for b.Loop() {
		rep, err := c.Pass(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, pr := range rep.Pools {
			if pr.Err != nil || pr.Ready != hot || pr.Stopped != stopped || pr.CreateCalls+pr.StopCalls+pr.TerminateCalls != 0 {
				b.Fatalf("pass not steady: %+v", pr)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(counter.Total())/float64(b.N), "dynamodb-calls/pass")
	b.ReportMetric(float64(pools*(hot+stopped)), "instances")
}
