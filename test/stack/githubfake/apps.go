// This file serves the GitHub App side of the fake: App JWT verification, installations and installation
// access tokens.

package githubfake

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// jwtLeeway is the clock drift allowed on App JWT timestamps; GitHub allows about a minute.
const jwtLeeway = 60 * time.Second

// verifyAppJWT checks an App JWT as GitHub does: RS256 signed with the App key, iss the App id (string or
// number), iat not in the future, exp in the future and at most 10 minutes after iat.
func (s *Server) verifyAppJWT(r *http.Request) error {
	scheme, raw, ok := credential(r)
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return errors.New("app endpoints need Authorization: Bearer <JWT>")
	}
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return fmt.Errorf("parsing JWT: %w", err)
	}
	var c struct {
		Iss any              `json:"iss"`
		Iat *jwt.NumericDate `json:"iat"`
		Exp *jwt.NumericDate `json:"exp"`
	}
	if err := tok.Claims(s.pub, &c); err != nil {
		return fmt.Errorf("verifying JWT: %w", err)
	}
	var iss string
	switch v := c.Iss.(type) {
	case string:
		iss = v
	case float64:
		iss = strconv.FormatFloat(v, 'f', -1, 64)
	}
	if iss != strconv.FormatInt(s.appID, 10) {
		return fmt.Errorf("iss %v is not App id %d", c.Iss, s.appID)
	}
	if c.Iat == nil || c.Exp == nil {
		return errors.New("iat and exp are required")
	}
	now := time.Now()
	iat, exp := c.Iat.Time(), c.Exp.Time()
	switch {
	case iat.After(now.Add(jwtLeeway)):
		return fmt.Errorf("iat %v is in the future", iat)
	case !exp.After(now.Add(-jwtLeeway)):
		return fmt.Errorf("JWT expired at %v", exp)
	case exp.Sub(iat) > 10*time.Minute:
		return errors.New("exp is more than 10 minutes after iat")
	}
	return nil
}

type installationJSON struct {
	ID                  int64             `json:"id"`
	AppID               int64             `json:"app_id"`
	AppSlug             string            `json:"app_slug"`
	TargetID            int64             `json:"target_id"`
	TargetType          string            `json:"target_type"`
	Account             accountJSON       `json:"account"`
	AccessTokensURL     string            `json:"access_tokens_url"`
	RepositoriesURL     string            `json:"repositories_url"`
	HTMLURL             string            `json:"html_url"`
	RepositorySelection string            `json:"repository_selection"`
	Permissions         map[string]string `json:"permissions"`
	Events              []string          `json:"events"`
	CreatedAt           time.Time         `json:"created_at"`
	UpdatedAt           time.Time         `json:"updated_at"`
	// Always present, null unless set (GitHub's installation schema requires them).
	SingleFileName *string      `json:"single_file_name"`
	SuspendedBy    *accountJSON `json:"suspended_by"`
	SuspendedAt    *time.Time   `json:"suspended_at"`
}

func (s *Server) installationJSON(r *http.Request, in *installationRec) installationJSON {
	base := apiBase(r)
	return installationJSON{
		ID: in.id, AppID: s.appID, AppSlug: "runnerpool", TargetID: in.owner.id, TargetType: "Organization",
		Account:             in.owner.json(),
		AccessTokensURL:     fmt.Sprintf("%s/app/installations/%d/access_tokens", base, in.id),
		RepositoriesURL:     base + "/installation/repositories",
		HTMLURL:             fmt.Sprintf("https://github.com/organizations/%s/settings/installations/%d", in.owner.login, in.id),
		RepositorySelection: "all",
		Permissions:         in.permissions(),
		Events:              []string{"workflow_job"},
		CreatedAt:           in.created, UpdatedAt: in.created,
	}
}

func (s *Server) getApp(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	n := len(s.installations)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"id": s.appID, "slug": "runnerpool", "name": "runnerpool", "installations_count": n,
		"owner":       account("runnerpool", 1, "Organization"),
		"permissions": installationPermissions(), "events": []string{"workflow_job"},
	})
}

func (s *Server) listInstallations(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	ins := make([]*installationRec, 0, len(s.installations))
	for _, in := range s.installations {
		ins = append(ins, in)
	}
	s.mu.Unlock()
	slices.SortFunc(ins, func(a, b *installationRec) int { return int(a.id - b.id) })
	page, ok := paginate(w, r, ins)
	if !ok {
		return
	}
	out := make([]installationJSON, 0, len(page))
	for _, in := range page {
		out = append(out, s.installationJSON(r, in))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getInstallation(w http.ResponseWriter, r *http.Request, _ *caller) {
	id, _ := pathInt(r, "installation_id")
	s.mu.Lock()
	in, ok := s.installations[id]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, s.installationJSON(r, in))
}

// findInstallation serves GET /repos/{owner}/{repo}/installation, /orgs/{org}/installation and
// /users/{username}/installation.
func (s *Server) findInstallation(w http.ResponseWriter, r *http.Request, _ *caller) {
	owner := r.PathValue("owner") + r.PathValue("org") + r.PathValue("username")
	s.mu.Lock()
	in, ok := s.installations[s.instByOwner[strings.ToLower(owner)]]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, s.installationJSON(r, in))
}

// installationTokenRequest is go-github's InstallationTokenOptions.
type installationTokenRequest struct {
	RepositoryIDs []int64           `json:"repository_ids"`
	Repositories  []string          `json:"repositories"`
	Permissions   map[string]string `json:"permissions"` // "read", "write" or "admin" per permission
}

type installationTokenJSON struct {
	Token               string            `json:"token"`
	ExpiresAt           time.Time         `json:"expires_at"`
	Permissions         map[string]string `json:"permissions"`
	RepositorySelection string            `json:"repository_selection"`
	Repositories        []repositoryJSON  `json:"repositories,omitempty"`
}

func (s *Server) createInstallationToken(w http.ResponseWriter, r *http.Request, _ *caller) {
	id, _ := pathInt(r, "installation_id")
	var req installationTokenRequest
	if !decodeBody(w, r, &req) {
		return
	}
	for name, level := range req.Permissions {
		if level != "read" && level != "write" && level != "admin" {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid permission level %q for %q", level, name))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.installations[id]
	if !ok {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	t := &installationToken{inst: in, expires: s.now().Add(time.Hour).UTC().Truncate(time.Second)}
	var repos []repositoryJSON
	if len(req.Repositories) > 0 || len(req.RepositoryIDs) > 0 {
		t.repos = map[string]bool{}
		for _, name := range req.Repositories {
			if name == "" || strings.Contains(name, "/") {
				writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid repository name %q: give names without the owner", name))
				return
			}
			rp := s.ensureRepoLocked(in.owner.login, name)
			t.repos[strings.ToLower(rp.name)] = true
			repos = append(repos, rp.json())
		}
		for _, rid := range req.RepositoryIDs {
			var found *repoRec
			for _, rp := range s.repos {
				if rp.id == rid && rp.owner == in.owner {
					found = rp
				}
			}
			if found == nil {
				writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("There is at least one repository that does not exist or is not accessible to the parent installation: %d", rid))
				return
			}
			t.repos[strings.ToLower(found.name)] = true
			repos = append(repos, found.json())
		}
	}
	token := "ghs_" + randomString(36, alnum)
	s.instTokens[token] = t
	perms := in.permissions()
	if len(req.Permissions) > 0 {
		perms = req.Permissions
	}
	selection := "all"
	if t.repos != nil {
		selection = "selected"
	}
	writeJSON(w, http.StatusCreated, installationTokenJSON{
		Token: token, ExpiresAt: t.expires, Permissions: perms, RepositorySelection: selection, Repositories: repos,
	})
}
