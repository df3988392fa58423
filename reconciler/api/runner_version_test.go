package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// A provision failed because GitHub refused the runner's version is counted as such, and its answer
// names the cause; any other failed registration is not counted.
func TestProvisionRefusedForRunnerVersionIsCounted(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	f := newFixtureWith(t, func(o *api.Options) { o.Metrics = m })
	refused := fmt.Errorf("%w: fleet validation: instance i-1, run 4242:7:1: %w: %w: agent sent UD_REG_FAILED runner version refused by GitHub: 2.319.0",
		provision.ErrFailed, claim.ErrRegistrationFailed, claim.ErrRunnerVersionRefused)
	other := fmt.Errorf("%w: %w: agent sent UD_REG_FAILED registering runner: boom", provision.ErrFailed, claim.ErrRegistrationFailed)
	res := provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusFailed, Outcome: "unsuccessful"}
	for i, err := range []error{refused, other} {
		f.prov.f = func(context.Context, provision.Request) (provision.Result, error) { return res, err }
		code, _, b := f.call(t, http.MethodPost, "/v1/provision", "run-7", body)
		if code != http.StatusServiceUnavailable {
			t.Fatalf("status %d %s, want 503", code, b)
		}
		if i == 0 && !strings.Contains(string(b), "runner version refused by GitHub") {
			t.Errorf("answer %s does not name the refusal", b)
		}
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if want := `runnerpool_registrations_refused_total{reason="runner_version"} 1`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("metrics lack %q", want)
	}
}
