// GitHub's request budget, as GitHub reports it on every REST answer (x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-resource: docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
// A budget belongs to a credential: a GitHub App installation (one per owner) or a PAT's user, so the
// gauges are labelled by the owner the request was about ("app" for the App's own calls) and the
// resource; with a PAT every owner shows the one user's budget. A PAT's expiry, which GitHub
// reports on every answer (github-authentication-token-expiration), is a gauge too. The alert rules
// (reconciler/alerts) warn before either runs out.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type githubBudget struct {
	limit, remaining *prometheus.GaugeVec
	tokenExpiry      prometheus.Gauge
}

func newGitHubBudget() githubBudget {
	labels := []string{"owner", "resource"}
	return githubBudget{
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "github_rate_limit",
			Help: "Requests per hour GitHub allows the credential used for owner (x-ratelimit-limit of its last answer), by resource.",
		}, labels),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "github_rate_limit_remaining",
			Help: "Requests left in the current hour for the credential used for owner (x-ratelimit-remaining of its last answer), by resource.",
		}, labels),
		tokenExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "github_token_expiry_timestamp_seconds",
			Help: "When the PAT expires, Unix seconds, as GitHub reports it (github-authentication-token-expiration); absent for a token without expiry and for an App.",
		}),
	}
}

func (b githubBudget) collectors() []prometheus.Collector {
	return []prometheus.Collector{b.limit, b.remaining, b.tokenExpiry}
}

// tokenExpiryLayouts are the forms GitHub writes github-authentication-token-expiration in
// ("2021-10-07 19:07:53 UTC", or with a numeric zone).
var tokenExpiryLayouts = []string{"2006-01-02 15:04:05 MST", "2006-01-02 15:04:05 -0700"}

// observe records the budget and token-expiry headers of one answer; an answer without them changes
// nothing.
func (b githubBudget) observe(r *http.Request, resp *http.Response) {
	if v := resp.Header.Get("GitHub-Authentication-Token-Expiration"); v != "" {
		for _, layout := range tokenExpiryLayouts {
			if t, err := time.Parse(layout, v); err == nil {
				b.tokenExpiry.Set(float64(t.Unix()))
				break
			}
		}
	}
	limit, err1 := strconv.Atoi(resp.Header.Get("X-RateLimit-Limit"))
	remaining, err2 := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining"))
	if err1 != nil || err2 != nil {
		return
	}
	resource := resp.Header.Get("X-RateLimit-Resource")
	if resource == "" {
		resource = "core"
	}
	owner := GitHubOwner(r.URL.Path)
	b.limit.WithLabelValues(owner, resource).Set(float64(limit))
	b.remaining.WithLabelValues(owner, resource).Set(float64(remaining))
}

// GitHubOwner is the owner a request path is about (/repos/OWNER/..., /orgs/OWNER/...,
// /users/OWNER/...), "app" for the App's own routes, "other" for anything else.
func GitHubOwner(path string) string {
	segs := split(path)
	for i, s := range segs {
		switch {
		case (s == "repos" || s == "orgs" || s == "users") && i+1 < len(segs):
			return segs[i+1]
		case s == "app":
			return "app"
		}
	}
	return "other"
}
