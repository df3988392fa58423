// GitHub's request budget, as GitHub reports it on every REST answer (x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-resource: docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
// A budget belongs to a credential: a GitHub App installation (one per owner) or a PAT's user, so the
// gauges are labelled by the owner the request was about ("app" for the App's own calls) and the
// resource; with a PAT every owner shows the one user's budget. The alert rules
// (reconciler/alerts) warn before it runs out.
package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type githubBudget struct {
	limit, remaining *prometheus.GaugeVec
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
	}
}

func (b githubBudget) collectors() []prometheus.Collector {
	return []prometheus.Collector{b.limit, b.remaining}
}

// observe records the budget headers of one answer; an answer without them changes nothing.
func (b githubBudget) observe(r *http.Request, resp *http.Response) {
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
