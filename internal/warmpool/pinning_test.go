// A cold-started pool-job instance is pinned too (issue #28 item 6): its agent's first self-signed
// report, the boot report written before any registration, pins its key, so a registration a job
// forged afterwards does not promote it. The old convergence promoted it on any signal.
package warmpool_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func TestConvergePinsColdStartedJobInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("cold", 0, 0, "v1-a"))
	c := e.converger(t, tg.get, warmpool.Options{})
	ctx := t.Context()
	ro, err := e.ec2Client().RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large",
		SubnetId: aws.String(subnetA), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(ro.Instances[0].InstanceId)
	// The overflow's cold start for job 500: created for the job, in the pool.
	if _, err := e.st.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: warmpool.JobRunPrefix + "500",
		Threshold: e.clock.Now().Add(10 * time.Minute), UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096,
		RunnerClass: runnerClass, Pool: "cold", Scope: "acme", Zone: "us-east-1a", SpecHash: "v1-a"}); err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	boot := store.SignalRecord{Signal: store.SignalPreRunnerOK}
	boot.Sign(id, key, e.clock.Now())
	if err := e.st.PutSignal(ctx, id, boot); err != nil {
		t.Fatal(err)
	}
	pass(t, c)
	if rec, err := e.st.Get(ctx, id); err != nil || rec.AgentKey != boot.Key {
		t.Fatalf("agent key after the boot report %q, %v; want the signing key pinned", rec.AgentKey, err)
	}
	if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "500", Detail: "forged"}); err != nil {
		t.Fatal(err)
	}
	if pr := poolReport(t, pass(t, c), "cold"); len(pr.Promoted) != 0 {
		t.Fatalf("promoted %v on a forged, unsigned registration", pr.Promoted)
	}
	reg := store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "500"}
	reg.Sign(id, key, e.clock.Now())
	if err := e.st.PutSignal(ctx, id, reg); err != nil {
		t.Fatal(err)
	}
	if pr := poolReport(t, pass(t, c), "cold"); !slices.Equal(pr.Promoted, []string{id}) {
		t.Errorf("promoted %v on the agent's signed registration, want %s", pr.Promoted, id)
	}
}
