// This file serves GET /repos/{owner}/{repo} ("Get a repository",
// https://docs.github.com/en/rest/repos/repos#get-a-repository): GitHub's full-repository object,
// whose default_branch the control plane reads for the runner cache's scope (ghaccess.DefaultBranch).
// The permission it needs is "Metadata" read, which every installation has, so the fake checks
// only that the caller's token reaches the repository (handle: 403 otherwise).
package githubfake

import "net/http"

// defaultBranchOf is a repository's default branch: "main" unless SetDefaultBranch said otherwise.
func (rp *repoRec) defaultBranchOf() string {
	if rp.defaultBranch == "" {
		return "main"
	}
	return rp.defaultBranch
}

// SetDefaultBranch sets the default branch GET /repos/{owner}/{repo} answers for owner/name (a
// renamed default branch, as Settings > Branches does).
func (s *Server) SetDefaultBranch(owner, name, branch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ensureRepoLocked(owner, name).defaultBranch = branch
}

func (s *Server) getRepository(w http.ResponseWriter, r *http.Request, _ *caller) {
	owner, name := r.PathValue("owner"), r.PathValue("repo")
	s.mu.Lock()
	rp := s.ensureRepoLocked(owner, name)
	o := rp.owner.json()
	body := webhookRepository(o, rp.name, rp.id, true)
	body["default_branch"] = rp.defaultBranchOf()
	s.mu.Unlock()
	// full-repository's fields that the webhook's repository object does not require.
	body["has_discussions"], body["network_count"], body["subscribers_count"] = false, 0, 0
	writeJSON(w, http.StatusOK, body)
}
