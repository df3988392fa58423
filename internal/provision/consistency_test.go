// A provision's report of instances EC2 does not show yet (the EC2 server's ConsistencyDelay).
package provision_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
)

// TestPartialFleetEC2DoesNotShowYetIsReportedExpired: a partial fleet fails the provision, which
// discards the instances it recorded moments after their launch. EC2 does not show them yet, so
// TerminateInstances answers NotFound, which "does not mean the instance was or will be
// terminated": they run, with their records expired for refresh to terminate. The report says
// expired (with the reason), not terminated.
func TestPartialFleetEC2DoesNotShowYetIsReportedExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{})
	e.ec2srv.SetConsistencyDelay(time.Hour)
	e.ec2srv.SetCapacity("", "", 2)

	res, err := s.p.Provision(t.Context(), request("2101", 5))
	if !errors.Is(err, provision.ErrFailed) || !fleet.IsInsufficientCapacity(err) {
		t.Fatalf("Provision = %v, want a failure for insufficient capacity", err)
	}
	if len(res.Undone) != 2 {
		t.Fatalf("undone %+v, want the 2 instances of the partial fleet", res.Undone)
	}
	for _, u := range res.Undone {
		if u.Action != provision.ActionExpired || !strings.Contains(u.Error, "not terminated yet") {
			t.Errorf("undone %+v: want action %q and the reason it is not terminated", u, provision.ActionExpired)
		}
		if v, _ := e.ec2srv.Instance(u.InstanceID); v.State != "running" {
			t.Errorf("%s is %s in EC2, want running (NotFound terminated nothing)", u.InstanceID, v.State)
		}
		if rec := e.get(t, u.InstanceID); !rec.State.Live() || !rec.Expired(time.Now()) {
			t.Errorf("%s: record %s (expired %v), want live and expired, for refresh", u.InstanceID, rec.State, rec.Expired(time.Now()))
		}
	}
}
