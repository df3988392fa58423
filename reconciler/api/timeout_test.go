package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
)

// TestProvisionTimeoutIsTheClass: a provision runs under its runner class's time limit
// (Options.RunnerClassProvisionTimeout: longer for a class whose boot installs packages), not the
// deployment's; before, every class had --provision-timeout.
func TestProvisionTimeoutIsTheClass(t *testing.T) {
	t.Parallel()
	var asked []string
	f := newFixtureWith(t, func(o *api.Options) {
		o.ProvisionTimeout = time.Minute
		o.RunnerClassProvisionTimeout = func(_ context.Context, class string) time.Duration {
			asked = append(asked, class)
			if class == "stock" {
				return time.Hour
			}
			return time.Minute
		}
	})
	left := make(chan time.Duration, 2)
	f.prov.f = func(ctx context.Context, req provision.Request) (provision.Result, error) {
		d, _ := ctx.Deadline()
		left <- time.Until(d)
		return provision.Result{RunKey: "4242:7:1", Status: provision.StatusSucceeded}, nil
	}
	for _, tc := range []struct {
		body     string
		min, max time.Duration
	}{
		{`{"count": 1, "allowed_instance_types": ["c*"], "resource_class": "small", "runner_class": "stock"}`, 50 * time.Minute, time.Hour},
		{`{"count": 1, "allowed_instance_types": ["c*"], "resource_class": "small"}`, 0, time.Minute},
	} {
		if status, _, b := f.call(t, http.MethodPost, "/v1/provision", "run-7", tc.body); status != http.StatusOK {
			t.Fatalf("provision: %d %s", status, b)
		}
		if got := <-left; got <= tc.min || got > tc.max {
			t.Errorf("%s: the provision had %s, want up to %s", tc.body, got, tc.max)
		}
	}
	if len(asked) != 2 || asked[0] != "stock" || asked[1] != "" {
		t.Errorf("time limits asked for %q, want the request's runner classes", asked)
	}
}
