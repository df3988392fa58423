// GitHub call counting: an http.RoundTripper under the reconciler's GitHub client (PAT or App
// transport alike) that counts requests by method, route template and status class. Owner,
// repository and numeric ids are replaced by placeholders, so the label set stays small whatever
// the number of repositories served.
package metrics

import (
	"net/http"
	"strconv"
	"strings"
)

// githubRoutes are the REST routes the reconciler calls; anything else is counted as "other".
var githubRoutes = [][]string{
	split("/repos/{owner}/{repo}/actions/runners/registration-token"),
	split("/repos/{owner}/{repo}/actions/runners/remove-token"),
	split("/repos/{owner}/{repo}/actions/runners/generate-jitconfig"),
	split("/repos/{owner}/{repo}/actions/runners/downloads"),
	split("/repos/{owner}/{repo}/actions/runners/{id}"),
	split("/repos/{owner}/{repo}/actions/runners"),
	split("/repos/{owner}/{repo}/actions/runs/{id}/cancel"),
	split("/repos/{owner}/{repo}/installation"),
	split("/orgs/{owner}/actions/runners/registration-token"),
	split("/orgs/{owner}/actions/runners/remove-token"),
	split("/orgs/{owner}/actions/runners/generate-jitconfig"),
	split("/orgs/{owner}/actions/runners/downloads"),
	split("/orgs/{owner}/actions/runners/{id}"),
	split("/orgs/{owner}/actions/runners"),
	split("/orgs/{owner}/installation"),
	split("/users/{owner}/installation"),
	split("/app/installations/{id}/access_tokens"),
	split("/app/installations"),
	split("/app"),
}

func split(p string) []string { return strings.Split(strings.Trim(p, "/"), "/") }

// GitHubRoute maps a request path to its route template ("other" when unknown). A GHES "/api/v3"
// prefix, or any other prefix before the route, is ignored.
func GitHubRoute(path string) string {
	segs := split(path)
	for start := 0; start < len(segs); start++ {
		for _, tmpl := range githubRoutes {
			if matchRoute(tmpl, segs[start:]) {
				return "/" + strings.Join(tmpl, "/")
			}
		}
		// Only skip a prefix that cannot itself start a route.
		if s := segs[start]; s == "repos" || s == "orgs" || s == "users" || s == "app" {
			break
		}
	}
	return "other"
}

func matchRoute(tmpl, segs []string) bool {
	if len(tmpl) != len(segs) {
		return false
	}
	for i, t := range tmpl {
		switch {
		case t == "{id}":
			if _, err := strconv.ParseInt(segs[i], 10, 64); err != nil {
				return false
			}
		case strings.HasPrefix(t, "{"):
			if segs[i] == "" {
				return false
			}
		case t != segs[i]:
			return false
		}
	}
	return true
}

// GitHubTransport wraps base (http.DefaultTransport when nil) so that every request is counted.
func (m *Metrics) GitHubTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if m == nil {
		return base
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		status := "error"
		if err == nil {
			status = strconv.Itoa(resp.StatusCode/100) + "xx"
			m.githubBudget.observe(r, resp)
		}
		m.githubCalls.WithLabelValues(r.Method, GitHubRoute(r.URL.Path), status).Inc()
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
