package fleet

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPartialFleetEC2DoesNotShowYet: the clean-up of a partial fleet asks EC2 to terminate
// instances it launched a moment ago, which EC2's API may not show yet (the EC2 server's
// ConsistencyDelay): it answers InvalidInstanceID.NotFound, and EC2 says that does not mean they
// are terminated. The fleet does not take them for gone: they are reported unterminated, running,
// for the caller to record (launch.Launch does) and end later; nothing is forgotten.
func TestPartialFleetEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.srv.SetConsistencyDelay(time.Hour)
	e.srv.SetCapacity("", "", 2)
	_, err := e.fleet().Create(t.Context(), Request{Count: 5, UsageClass: Spot, FallbackToOnDemand: true,
		InstanceTypes: []string{"c6i.large"}, MinCPU: 2, Spec: e.spec})
	var ice *InsufficientCapacityError
	if !errorsAs(err, &ice) {
		t.Fatalf("Create = %v, want insufficient capacity", err)
	}
	if ice.Launched != 2 || len(ice.Terminated) != 0 || len(ice.Unterminated) != 2 {
		t.Fatalf("error %+v: want 2 launched, none taken for terminated, 2 unterminated", ice)
	}
	if !strings.Contains(err.Error(), "does not know them yet") {
		t.Errorf("error %q does not say EC2 does not know them yet", err)
	}
	if ice.Fallback != nil || len(e.rec.fleetInputs()) != 1 {
		t.Errorf("fell back to on-demand with %d instances left running: %+v", len(ice.Unterminated), ice)
	}
	running := e.running()
	if len(running) != 2 {
		t.Fatalf("running %+v, want the 2 unterminated", running)
	}
	for _, r := range running {
		if !slices.ContainsFunc(ice.Unterminated, func(l Launched) bool { return l.ID == r.ID }) {
			t.Errorf("running %s is not reported unterminated (%+v)", r.ID, ice.Unterminated)
		}
	}
}
