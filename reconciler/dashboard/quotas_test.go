package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
)

// TestQuotasPage: every limit with its count, a full one marked, refusals summed; no quota is an
// empty page, a query parameter a 400.
func TestQuotasPage(t *testing.T) {
	t.Parallel()
	st, h := fixture(3, 3)
	rows := []dashboard.QuotaRow{
		{Limit: "repository_runners", Scope: "acme/api", Max: 10, Held: 10, Refused: 30, RefusedAt: t0},
		{Limit: "deployment_instances", Scope: "deployment", Max: 200, Held: 50},
		{Limit: "runner_class_instances", Scope: "linux", Held: 7},
	}
	d, err := dashboard.New(dashboard.Options{Store: st, History: h, Price: price, Now: func() time.Time { return t0 },
		Quotas: func(context.Context) ([]dashboard.QuotaRow, error) { return rows, nil }})
	if err != nil {
		t.Fatal(err)
	}
	code, body := serve(d.Handler(), http.MethodGet, "/quotas")
	if code != 200 {
		t.Fatalf("GET /quotas: %d\n%s", code, body)
	}
	for _, want := range []string{"30 refused in all", `<td class="n bad">100%</td>`, "25%", "acme/api", "none", "2026-11-25 12:00:00"} {
		if !strings.Contains(body, want) {
			t.Errorf("/quotas lacks %q", want)
		}
	}
	if strings.Index(body, "deployment_instances") > strings.Index(body, "repository_runners") {
		t.Error("the deployment's cap is not listed first")
	}
	if code, _ := serve(d.Handler(), http.MethodGet, "/quotas?x=1"); code != http.StatusBadRequest {
		t.Errorf("/quotas?x=1: %d", code)
	}
	if code, body := serve(newDashboard(t, st, h, 10).Handler(), http.MethodGet, "/quotas"); code != 200 || !strings.Contains(body, "no-quotas") {
		t.Errorf("no quotas: %d\n%s", code, body)
	}
}
