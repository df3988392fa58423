// The registrar's discard of an instance EC2 does not show yet (the EC2 server's ConsistencyDelay).
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

// TestDiscardKeepsTheRecordOfAnInstanceEC2DoesNotShowYet: a run's instance discarded moments
// after its launch meets TerminateInstances' NotFound, which EC2 says does not mean it is
// terminated. The record stays live and expired (refresh terminates the instance and then ends
// it); it is not marked terminated while the instance runs.
func TestDiscardKeepsTheRecordOfAnInstanceEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.ec2srv.SetConsistencyDelay(time.Hour)
	out, err := e.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceTypeC6iLarge,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	id, run := aws.ToString(out.Instances[0].InstanceId), runID("unseen")
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
