package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// TestGitHubBudget: the x-ratelimit headers of each answer become the budget of the owner the
// request was about, the token-expiry header the token's expiry; an answer without them changes
// nothing.
func TestGitHubBudget(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/quiet/") {
			return
		}
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", map[bool]string{true: "120", false: "4990"}[strings.Contains(r.URL.Path, "/acme/")])
		w.Header().Set("X-RateLimit-Resource", "core")
		w.Header().Set("GitHub-Authentication-Token-Expiration", "2026-12-11 09:30:00 UTC")
	}))
	defer srv.Close()
	m := metrics.New(metrics.Options{})
	getThrough(t, m, srv.URL, "/orgs/acme/actions/runners", "/repos/other/b/actions/runners", "/app/installations", "/repos/quiet/b/actions/runners")
	body := scrape(t, m)
	for _, want := range []string{
		`runnerpool_github_rate_limit_remaining{owner="acme",resource="core"} 120`,
		`runnerpool_github_rate_limit_remaining{owner="other",resource="core"} 4990`,
		`runnerpool_github_rate_limit_remaining{owner="app",resource="core"} 4990`,
		`runnerpool_github_rate_limit{owner="acme",resource="core"} 5000`,
		`runnerpool_github_token_expiry_timestamp_seconds 1.7969814e+09`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `owner="quiet"`) {
		t.Error("an answer without budget headers was recorded")
	}
}

func TestGitHubOwner(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/repos/acme/api/actions/runners":     "acme",
		"/api/v3/orgs/acme/actions/runners/7": "acme",
		"/users/octo/installation":            "octo",
		"/app/installations/12/access_tokens": "app",
		"/rate_limit":                         "other",
	} {
		if got := metrics.GitHubOwner(path); got != want {
			t.Errorf("GitHubOwner(%q) = %q, want %q", path, got, want)
		}
	}
}
