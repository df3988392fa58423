// This file serves the enterprise-level "list runner applications" endpoint, with who may read it.
//
// GET /enterprises/{enterprise}/actions/runners/downloads (GitHub's REST reference, "Self-hosted
// runners", "List runner applications for an enterprise"): "OAuth app tokens and personal access
// tokens (classic) need the manage_runners:enterprise scope to use this endpoint", and it "does not
// work with GitHub App user access tokens, GitHub App installation access tokens, or fine-grained
// personal access tokens". admin:enterprise includes manage_runners:enterprise
// (https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/scopes-for-oauth-apps). The fake
// answers an installation token 403 "Resource not accessible by integration", a classic PAT without
// either scope 403 with X-Accepted-OAuth-Scopes naming them (the header GitHub sends to say which
// scopes an action accepts, same page), an enterprise it does not know 404, and otherwise the newest
// release published, as the repository and organisation endpoints do.
package githubfake

import (
	"net/http"
	"slices"
	"strings"
)

// Scopes of a classic PAT that read an enterprise's runner applications.
const (
	ScopeManageRunnersEnterprise = "manage_runners:enterprise"
	ScopeAdminEnterprise         = "admin:enterprise"
)

func (s *Server) enterpriseRoutes() {
	s.handle("GET /enterprises/{enterprise}/actions/runners/downloads", authToken, s.listEnterpriseRunnerDownloads)
}

// AddEnterprise makes an enterprise known by its slug: its endpoints answer (404 before).
func (s *Server) AddEnterprise(slug string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.enterprises == nil {
		s.enterprises = map[string]bool{}
	}
	s.enterprises[strings.ToLower(slug)] = true
}

// patHasScope reports whether the PAT has one of scopes.
func (s *Server) patHasScope(scopes ...string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	have := s.patScopes
	if have == nil {
		have = defaultPATScopes
	}
	return slices.ContainsFunc(scopes, func(sc string) bool { return slices.Contains(have, sc) })
}

func (s *Server) listEnterpriseRunnerDownloads(w http.ResponseWriter, r *http.Request, c *caller) {
	if !c.pat {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	s.mu.Lock()
	known := s.enterprises[strings.ToLower(r.PathValue("enterprise"))]
	s.mu.Unlock()
	if !s.patHasScope(ScopeManageRunnersEnterprise, ScopeAdminEnterprise) {
		w.Header().Set("X-Accepted-OAuth-Scopes", ScopeAdminEnterprise+", "+ScopeManageRunnersEnterprise)
		writeError(w, http.StatusForbidden, "Resource not accessible by personal access token")
		return
	}
	if !known {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	s.mu.Lock()
	cur := s.currentReleaseLocked()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, downloadsOf(cur))
}
