package provision_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

// TestRegistrationWaitFollowsTheClass: created instances that take longer to register than the
// deployment's registration wait (a boot that waits for apt's locks and installs packages) fail
// fleet validation on a class whose image is prepared, and are provisioned on a class whose
// BootExtra covers them; their created threshold grows by it too, so refresh does not end them
// while they boot. Before, every class waited the deployment's registration wait.
func TestRegistrationWaitFollowsTheClass(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.setCreatedBehaviour(claimtest.Behaviour{Delay: 3 * time.Second})

	prepared := e.side(t, sideOptions{registrationWait: time.Second})
	res, err := prepared.p.Provision(t.Context(), request("9101", 1))
	if !errors.Is(err, provision.ErrFailed) || !strings.Contains(res.Error, "registration timed out") {
		t.Fatalf("prepared class, slow boot: Provision = %v (%+v), want a registration timeout", err, res)
	}

	const extra = 30 * time.Second
	installs := e.side(t, sideOptions{registrationWait: time.Second, bootExtra: extra})
	done := make(chan struct{})
	thresholds := make(chan time.Duration, 1)
	go func() {
		// The created records, while validation waits: their threshold is CreatedTimeout + BootExtra.
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			live, _ := e.st.ByState(t.Context(), store.StateCreated, time.Time{})
			for _, rec := range live {
				if rec.RunID != "" && strings.Contains(rec.RunID, "9102") {
					thresholds <- time.Until(rec.Threshold)
					return
				}
			}
		}
	}()
	res, err = installs.p.Provision(t.Context(), request("9102", 1))
	close(done)
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("class whose boot installs: Provision = %v (%+v), want its runner", err, res)
	}
	select {
	case left := <-thresholds:
		if want := installs.cfg.CreatedTimeout + extra; left <= installs.cfg.CreatedTimeout || left > want {
			t.Errorf("created threshold %s ahead, want above the created timeout %s, up to %s", left, installs.cfg.CreatedTimeout, want)
		}
	default:
		t.Errorf("no created record of run 9102 seen while it registered")
	}
	e.audit(t, []provision.Result{res}, false)
}

// TestProvisionTimeoutFollowsTheClass: the provision's time limit grows by its class's BootExtra.
func TestProvisionTimeoutFollowsTheClass(t *testing.T) {
	t.Parallel()
	cfg := provision.Config{DefaultRunnerClass: "baked", RunnerClasses: map[string]runnerclass.Resolved{
		"baked": {}, "stock": {BootExtra: 13 * time.Minute}, "quick": {BootExtra: -time.Minute},
	}}
	for class, want := range map[string]time.Duration{"": 10 * time.Minute, "baked": 10 * time.Minute, "stock": 23 * time.Minute, "quick": 10 * time.Minute, "unknown": 10 * time.Minute} {
		if got := cfg.ProvisionTimeout(10*time.Minute, class); got != want {
			t.Errorf("ProvisionTimeout(%q) = %s, want %s", class, got, want)
		}
	}
}
