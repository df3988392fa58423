// Benchmarks of a provision's cost: AWS calls per provisioned runner, by service and operation,
// and control-plane time per provision, for the reuse path (every runner from the pool) and the
// creation path (every runner from one fleet). The simulated agents answer at once (10 ms polls),
// so the time is the control plane's, not a boot or a GitHub registration.
//
//	go test -run '^$' -bench BenchmarkProvision -benchtime 30x ./internal/provision/
package provision_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
)

const benchRunners = 2 // runners per provision

func BenchmarkProvisionReuse(b *testing.B) { benchProvision(b, true) }

func BenchmarkProvisionCreate(b *testing.B) { benchProvision(b, false) }

func benchProvision(b *testing.B, reuse bool) {
	e := newEnv(b, envOptions{agentPoll: 10 * time.Millisecond, heartbeatEvery: time.Second})
	counter := awslimit.NewCounter()
	s := e.side(b, sideOptions{counter: counter, claimPoll: 10 * time.Millisecond})
	ctx := context.Background()

	calls := map[string]int{}
	var elapsed time.Duration
	var timing provision.Timing
	ghBefore := total(e.gh.Calls())
	runners := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if reuse {
			e.idle(b, poolSpec{n: benchRunners, resourceClass: "small"})
		}
		counter.Reset()
		b.StartTimer()

		start := time.Now()
		res, err := s.p.Provision(ctx, request(fmt.Sprintf("bench-%d", i), benchRunners))
		took := time.Since(start)

		b.StopTimer()
		if err != nil {
			b.Fatalf("Provision: %v", err)
		}
		for _, r := range res.Runners {
			if (r.Source == provision.SourceReused) != reuse {
				b.Fatalf("runner %+v on the %s path", r, map[bool]string{true: "reuse", false: "creation"}[reuse])
			}
		}
		elapsed += took
		timing.Select += res.Timing.Select
		timing.Create += res.Timing.Create
		timing.Validate += res.Timing.Validate
		timing.Post += res.Timing.Post
		runners += len(res.Runners)
		for k, v := range counter.Counts() {
			calls[k] += v
		}
		// Stop the runners (and their simulated agents), as a release or expiry eventually would.
		if _, err := e.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids(res.Runners)}); err != nil {
			b.Fatalf("TerminateInstances: %v", err)
		}
		b.StartTimer()
	}
	b.StopTimer()

	n := float64(b.N)
	b.ReportMetric(float64(elapsed.Milliseconds())/n, "ms/provision")
	b.ReportMetric(float64(timing.Select.Milliseconds())/n, "select-ms/provision")
	b.ReportMetric(float64(timing.Create.Milliseconds())/n, "create-ms/provision")
	b.ReportMetric(float64(timing.Validate.Milliseconds())/n, "validate-ms/provision")
	b.ReportMetric(float64(timing.Post.Milliseconds())/n, "post-ms/provision")
	all := 0
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		b.ReportMetric(float64(calls[k])/float64(runners), k+"/runner")
		all += calls[k]
	}
	b.ReportMetric(float64(all)/float64(runners), "aws-calls/runner")
	b.ReportMetric(float64(total(e.gh.Calls())-ghBefore)/float64(runners), "github-calls/runner")
}

func total(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}
