// The reuse-path benchmark: latency and AWS/GitHub calls per claimed runner.
package claim_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

// BenchmarkClaimReuse measures the reuse path of a provision: ClaimN of 4 runners from a pool of 4
// healthy idle instances, each agent registering as soon as it sees its credential. It reports:
//   - ms/runner: ClaimN's wall time divided by the runners claimed (workers run in parallel);
//   - p50/p95-request-ms: ClaimN's wall time per request;
//   - claim-to-verified-ms/runner: from the claim write to verified registration;
//   - registration-wait-ms/runner: the part of that spent polling for the agent's signal (agent
//     reaction plus poll granularity); the rest is the control plane's own round trips;
//   - <service>-<operation>/runner: the control plane's AWS and GitHub calls per claimed runner
//     (the simulated agents' own calls are not counted).
//
// The agents poll their record every 20 ms, standing in for the wake-tag notice through instance
// metadata. Run it with:
//
//	go test ./internal/claim -run '^$' -bench ClaimReuse -benchtime 20x
func BenchmarkClaimReuse(b *testing.B) {
	const count = 4
	for _, poll := range []time.Duration{250 * time.Millisecond, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("count=%d/poll=%s", count, poll), func(b *testing.B) {
			e := newEnv(b)
			db := &countingDynamoDB{api: e.db}
			sq := &countingSQS{api: e.sqs}
			st := store.New(db, e.table)
			q := pool.NewQueue(sq, e.q.URL())
			opts := claim.Options{PollInterval: poll, Logger: quiet}
			c := claim.NewClaimer(st, claim.NewRegistrar(st, e.gh, e.ec2, opts), opts)
			agentStore := store.New(e.db, e.table)

			var wall, waited, verifying time.Duration
			claimed := 0
			calls := map[string]int{}
			var walls []time.Duration
			b.ResetTimer()
			b.StopTimer()
			for i := range b.N {
				ins := e.idle(b, count, nil)
				var agents []*claimtest.Agent
				for _, in := range ins {
					agents = append(agents, claimtest.Simulate(context.Background(), agentStore, in.ID, claimtest.Behaviour{Poll: 20 * time.Millisecond}))
				}
				db.snapshot()
				sq.snapshot()
				e.ec2srv.ResetCalls()
				ghBefore := e.ghsrv.Calls()[registrationTokenRoute]

				b.StartTimer()
				start := time.Now()
				res, err := c.ClaimN(context.Background(), claim.Request{RunID: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), Scope: "acme/api", Count: count, Queue: q})
				d := time.Since(start)
				b.StopTimer()

				if err != nil || len(res.Claimed) != count {
					b.Fatalf("ClaimN: %d claimed, %v", len(res.Claimed), err)
				}
				wall += d
				walls = append(walls, d)
				claimed += len(res.Claimed)
				for _, cl := range res.Claimed {
					waited += cl.Waited
					verifying += cl.Verifying
				}
				for op, n := range db.snapshot() {
					calls["ddb-"+op] += n
				}
				for op, n := range sq.snapshot() {
					calls["sqs-"+op] += n
				}
				for op, n := range e.ec2srv.Calls() {
					calls["ec2-"+op] += n
				}
				calls["gh-RegistrationToken"] += e.ghsrv.Calls()[registrationTokenRoute] - ghBefore
				for _, a := range agents {
					a.Stop()
				}
			}
			per := float64(claimed)
			b.ReportMetric(float64(wall.Milliseconds())/per, "ms/runner")
			b.ReportMetric(float64(waited.Milliseconds())/per, "claim-to-verified-ms/runner")
			b.ReportMetric(float64(verifying.Milliseconds())/per, "registration-wait-ms/runner")
			sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
			b.ReportMetric(float64(walls[len(walls)/2].Milliseconds()), "p50-request-ms")
			b.ReportMetric(float64(walls[len(walls)*95/100].Milliseconds()), "p95-request-ms")
			for op, n := range calls {
				b.ReportMetric(float64(n)/per, op+"/runner")
			}
		})
	}
}
