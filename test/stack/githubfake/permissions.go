// This file holds what the fake enforces of GitHub's permissions. An installation token may call a
// route only when its installation has the permission GitHub lists for the route (GitHub's
// "Permissions required for GitHub Apps",
// https://docs.github.com/en/rest/authentication/permissions-required-for-github-apps: repository
// self-hosted runners need "Administration", organization ones "Self-hosted runners", workflow runs
// and jobs "Actions"; read for GET, write otherwise); otherwise GitHub answers 403 "Resource not
// accessible by integration" and names what it accepts in X-Accepted-GitHub-Permissions
// (https://docs.github.com/en/rest/using-the-rest-api/troubleshooting-the-rest-api). A classic PAT's
// answers carry its scopes in X-OAuth-Scopes
// (https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/scopes-for-oauth-apps); the fake
// does not refuse a PAT for its scopes.
package githubfake

import (
	"maps"
	"net/http"
	"strings"
)

// installationPermissions are the permissions runnerpool's App asks for (an installation's
// permissions unless SetInstallationPermissions says otherwise).
func installationPermissions() map[string]string {
	return map[string]string{
		"actions":                          "write",
		"administration":                   "write",
		"metadata":                         "read",
		"organization_self_hosted_runners": "write",
	}
}

// defaultPATScopes are the classic scopes of the fake's PAT unless SetPATScopes says otherwise.
var defaultPATScopes = []string{"admin:org", "repo", "workflow"}

func (in *installationRec) permissions() map[string]string {
	if in.perms == nil {
		return installationPermissions()
	}
	return maps.Clone(in.perms)
}

// SetInstallationPermissions sets the permissions of owner's App installation (AddInstallation
// first): what the installation reports and what its tokens may call.
func (s *Server) SetInstallationPermissions(owner string, perms map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.installations[s.instByOwner[strings.ToLower(owner)]]; ok {
		in.perms = maps.Clone(perms)
	}
}

// SetPATScopes sets the classic scopes the PAT's answers report in X-OAuth-Scopes.
func (s *Server) SetPATScopes(scopes ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.patScopes = append([]string{}, scopes...)
}

// routePermission is the App permission a route needs, from its pattern ("" when the fake does not
// check one).
func routePermission(pattern string) (name, level string) {
	method, path, _ := strings.Cut(pattern, " ")
	level = "write"
	if method == http.MethodGet {
		level = "read"
	}
	switch {
	case strings.HasPrefix(path, "/repos/{owner}/{repo}/actions/runners"):
		return "administration", level
	case strings.HasPrefix(path, "/orgs/{org}/actions/runner"): // runners and runner groups
		return "organization_self_hosted_runners", level
	case strings.HasPrefix(path, "/repos/{owner}/{repo}/actions/runs"), strings.HasPrefix(path, "/repos/{owner}/{repo}/actions/jobs"):
		return "actions", level
	}
	return "", ""
}

// grants reports whether an installation's level of a permission covers the wanted one.
func grants(have, want string) bool {
	rank := map[string]int{"read": 1, "write": 2, "admin": 3}
	return rank[have] >= rank[want] && rank[want] > 0
}

// refusedPermission answers 403 when an installation token lacks the route's permission, and adds
// X-OAuth-Scopes to a PAT's answers. It reports whether it answered.
func (s *Server) refusedPermission(w http.ResponseWriter, r *http.Request, c *caller) bool {
	s.mu.Lock()
	scopes := s.patScopes
	if scopes == nil {
		scopes = defaultPATScopes
	}
	var perms map[string]string
	if c != nil && c.inst != nil {
		perms = c.inst.permissions()
	}
	s.mu.Unlock()
	if c == nil || c.pat {
		w.Header().Set("X-OAuth-Scopes", strings.Join(scopes, ", "))
		return false
	}
	name, level := routePermission(r.Pattern)
	if name == "" || grants(perms[name], level) {
		return false
	}
	w.Header().Set("X-Accepted-GitHub-Permissions", name+"="+level)
	writeError(w, http.StatusForbidden, "Resource not accessible by integration")
	return true
}
