package sandbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

// An instance whose runner GitHub refuses for its version (2.319.0, what cc50e7d installed) fails
// the provision with that cause as soon as its agent reports it: ErrRunnerVersionRefused, not the
// registration wait's timeout, and the reason is on the run's answer and the instance's record.
func TestRegistrationRefusedForTheRunnerVersionIsNamed(t *testing.T) {
	t.Parallel()
	sb := start(t, sandbox.Options{RunnerVersion: func(ec2server.RuntimeInstance) string { return "2.319.0" }})
	cp := sb.Components(sandbox.ComponentOptions{})
	res, err := cp.Provisioner.Provision(t.Context(), request(newRun()))
	if !errors.Is(err, provision.ErrFailed) || !errors.Is(err, claim.ErrRunnerVersionRefused) {
		t.Fatalf("provision = %v, want failed with ErrRunnerVersionRefused", err)
	}
	if errors.Is(err, claim.ErrRegistrationTimeout) {
		t.Fatalf("provision = %v: waited out the registration instead of reading the refusal", err)
	}
	if !strings.Contains(res.Error, runnerversion.RefusedDetail) {
		t.Errorf("the run's answer says %q, want it to name %q", res.Error, runnerversion.RefusedDetail)
	}
	if len(res.Undone) == 0 {
		t.Fatalf("nothing undone: %+v", res)
	}
	for _, u := range res.Undone {
		if rec := record(t, sb, u.InstanceID); rec.State != store.StateTerminated || !strings.Contains(rec.Reason, runnerversion.RefusedDetail) {
			t.Errorf("instance %s: state %s, reason %q; want terminated naming the refusal", u.InstanceID, rec.State, rec.Reason)
		}
	}
}
