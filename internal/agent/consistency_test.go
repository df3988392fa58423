package agent_test

import (
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
)

// TestSelfTerminationOfAnInstanceEC2DoesNotShowYet: an agent told to end its instance moments
// after the launch meets TerminateInstances' InvalidInstanceID.NotFound (the EC2 server's
// ConsistencyDelay), which EC2 says does not mean the instance is terminated. The agent does not
// take it for done: it asks again until EC2 shows the instance and accepts the call. The wake
// notice (CreateTags) meets the same NotFound; the agent reads its record on its fallback timer.
func TestSelfTerminationOfAnInstanceEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{grace: time.Hour})
	e.ecs.SetConsistencyDelay(time.Hour)
	id := e.launch()
	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	e.waitSignal(id, store.SignalRegistered, "run-1")
	in, err := e.store.Transition(t.Context(), id, store.Change{From: []store.State{store.StateCreated},
		To: store.StateTerminating, Reason: "scale-in"})
	if err != nil {
		t.Fatal(err)
	}
	if err := wake.Notify(t.Context(), e.ec2, in.ID); !terminate.Gone(err) {
		t.Errorf("wake notice of a hidden instance: %v, want InvalidInstanceID.NotFound", err)
	}
	if !eventually(func() bool { return e.ecs.Calls()["TerminateInstances"] > 0 }) {
		t.Fatal("the agent did not ask EC2 to terminate its instance")
	}
	if v, _ := e.ecs.Instance(id); v.State != "running" {
		t.Fatalf("instance is %s after the NotFound, want running", v.State)
	}
	e.ecs.MakeVisible(id)
	e.waitEC2State(id, "shutting-down", "terminated")
	if n := e.ecs.Calls()["TerminateInstances"]; n < 2 {
		t.Errorf("TerminateInstances calls = %d, want the refused one and another", n)
	}
}
