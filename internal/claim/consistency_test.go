// The registrar's discard and the starter's start of instances EC2 does not show yet (the EC2 server's ConsistencyDelay).
package claim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// launchUnseen turns the EC2 server's ConsistencyDelay on and launches an instance: it runs while
// EC2's API does not show it.
func (e *env) launchUnseen(t *testing.T) string {
	t.Helper()
	e.ec2srv.SetConsistencyDelay(time.Hour)
	out, err := e.ec2.RunInstances(t.Context(), &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceTypeC6iLarge,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.Instances[0].InstanceId)
}

// TestDiscardKeepsTheRecordOfAnInstanceEC2DoesNotShowYet: a run's instance discarded moments
// after its launch meets TerminateInstances' NotFound, which EC2 says does not mean it is
// terminated. The record stays live and expired (refresh terminates the instance and then ends
// it); it is not marked terminated while the instance runs.
func TestDiscardKeepsTheRecordOfAnInstanceEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id, run := e.launchUnseen(t), runID("unseen")
	if _, err := e.st.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: run, Threshold: time.Now().Add(time.Hour),
		UsageClass: "on-demand", InstanceType: "c6i.large", RunnerClass: "linux", Scope: "acme/api"}); err != nil {
		t.Fatal(err)
	}
	_, reg := e.claimer(testOptions())
	if err := reg.Discard(ctx, id, run, "registration failed"); !errors.Is(err, claim.ErrNotTerminatedYet) {
		t.Fatalf("Discard = %v, want ErrNotTerminatedYet", err)
	}
	rec := e.record(t, id)
	if rec.State == store.StateTerminated || !rec.Expired(time.Now()) {
		t.Errorf("record %s (expired %v) while EC2 does not show its instance yet; want it live and expired, for refresh", rec.State, rec.Expired(time.Now()))
	}
	if v, _ := e.ec2srv.Instance(id); v.State != "running" {
		t.Errorf("instance is %s, want running (NotFound terminated nothing)", v.State)
	}
}

// TestStartOfAStoppedInstanceEC2DoesNotShowYet: the starter claims two stopped warm instances for
// a run, one of which EC2's API does not show yet (the EC2 server's ConsistencyDelay: launched a
// moment ago, its record written stopped). The batch StartInstances fails as a whole on its
// NotFound; one by one, the other starts and it meets NotFound again, so it is discarded, and the
// discard's TerminateInstances answers NotFound too, which EC2 says does not mean it is
// terminated. Its record is not ended while it runs: it stays live and expired, for refresh
// (TestRefreshKeepsTheRecordOfAnInstanceEC2DoesNotShowYet), and the discard says it is not
// terminated yet. No instance runs without a live record.
func TestStartOfAStoppedInstanceEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	opts := testOptions()
	opts.StartWait = time.Second
	_, reg := e.claimer(opts)
	s := claim.NewStarter(e.st, e.ec2, reg, opts)
	shown := e.warm(t, 1, store.StateStopped, true)[0]

	id := e.launchUnseen(t)
	if _, err := e.st.Create(ctx, store.Instance{ID: id, State: store.StateWarming, Threshold: time.Now().Add(time.Hour), UsageClass: "on-demand",
		InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "linux", Pool: "p", Scope: "acme", Zone: "us-east-1a"}); err != nil {
		t.Fatal(err)
	}
	hidden, err := e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: store.StateStopped, Threshold: time.Now().Add(time.Hour).Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}

	res, err := s.ClaimAndStart(ctx, []store.Instance{shown, hidden}, runs("unseen", 2), time.Now().Add(5*time.Minute))
	if err != nil {
		t.Fatalf("ClaimAndStart: %v", err)
	}
	if len(res.Started) != 1 || res.Started[0].ID != shown.ID || len(res.Discarded) != 1 || res.Discarded[0].InstanceID != id {
		t.Fatalf("result %+v; want %s started and %s discarded", res, shown.ID, id)
	}
	if !errors.Is(res.Discarded[0].Err, claim.ErrNotTerminatedYet) {
		t.Errorf("discard error %v, want ErrNotTerminatedYet", res.Discarded[0].Err)
	}
	if rec := e.record(t, id); !rec.State.Live() || !rec.Expired(time.Now()) {
		t.Errorf("record %s (expired %v) while EC2 does not show its instance yet; want it live and expired, for refresh", rec.State, rec.Expired(time.Now()))
	}
	for _, v := range e.ec2srv.Instances() {
		if v.State != "running" && v.State != "pending" {
			continue
		}
		if rec := e.record(t, v.ID); !rec.State.Live() {
			t.Errorf("%s runs with record %s; want a live record", v.ID, rec.State)
		}
	}
	if v, _ := e.ec2srv.Instance(id); v.State != "running" {
		t.Errorf("%s is %s, want running (NotFound terminated nothing)", id, v.State)
	}
}
