// This file is the list of every GitHub call runnerpool makes, with the GitHub App permission and
// the classic PAT scope each needs (docs/guides/github-credentials.md renders it; the App manifest in
// examples/github-app is its union), and the start-up check that names what the configured
// credential lacks. Sources: GitHub's "Permissions required for GitHub Apps" and "Permissions required
// for fine-grained personal access tokens" (docs.github.com/en/rest/authentication/...), each
// endpoint's page for the classic scopes, and actions/actions-runner-controller's authentication
// docs for the scale-set registration exchange.
package ghaccess

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-github/v62/github"
)

// Call is one GitHub call of runnerpool.
type Call struct {
	Method, Path string
	// Use says what runnerpool calls it for.
	Use string
	// Permission is the GitHub App (and fine-grained PAT) permission with its level ("administration",
	// "write"); empty for calls authenticated as the App itself (its JWT), which need none.
	Permission, Level string
	// PATScope is the classic PAT scope; empty for App-only calls.
	PATScope string
}

// Permission names, as GitHub's API spells them (installation permissions, App manifests).
const (
	PermAdministration = "administration"                   // repository: Administration
	PermOrgRunners     = "organization_self_hosted_runners" // organization: Self-hosted runners
	PermActions        = "actions"                          // repository: Actions
	PermMetadata       = "metadata"                         // repository: Metadata (every App has it)
	// PermPublic marks a call on a public repository: any credential may make it, and none is
	// required of the App (GitHub's "List releases": "can be used without authentication or the
	// aforementioned permissions if only public resources are requested").
	PermPublic = "public"
	// PermClassicPATOnly marks a call no GitHub App or fine-grained PAT can make, only a classic PAT
	// with its PATScope (GitHub's enterprise endpoints: "does not work with GitHub App user access
	// tokens, GitHub App installation access tokens, or fine-grained personal access tokens"). It is
	// never required: runnerpool makes it only when configured to (--github-enterprise).
	PermClassicPATOnly = "classic-pat-only"
)

// Calls is every GitHub REST call runnerpool's reconciler makes (the agent makes none: it runs the
// runner with a credential minted for it).
var Calls = []Call{
	{"GET", "/repos/{owner}/{repo}/installation", "find the App installation of a repository scope", "", "", ""},
	{"GET", "/orgs/{org}/installation", "find the App installation of an owner scope", "", "", ""},
	{"POST", "/app/installations/{installation_id}/access_tokens", "mint an installation token", "", "", ""},
	{"POST", "/repos/{owner}/{repo}/actions/runners/registration-token", "register a repository runner", PermAdministration, "write", "repo"},
	{"POST", "/repos/{owner}/{repo}/actions/runners/remove-token", "remove a repository runner's registration", PermAdministration, "write", "repo"},
	{"POST", "/repos/{owner}/{repo}/actions/runners/generate-jitconfig", "a just-in-time runner for one job (warm pools)", PermAdministration, "write", "repo"},
	{"GET", "/repos/{owner}/{repo}/actions/runners", "confirm a released runner is gone; find leftovers", PermAdministration, "read", "repo"},
	{"GET", "/repos/{owner}/{repo}/actions/runners/{runner_id}", "confirm a pool job's runner that listings miss is gone", PermAdministration, "read", "repo"},
	{"DELETE", "/repos/{owner}/{repo}/actions/runners/{runner_id}", "delete a leftover runner", PermAdministration, "write", "repo"},
	{"GET", "/repos/{owner}/{repo}/actions/runners/downloads", "the current runner release", PermAdministration, "read", "repo"},
	{"POST", "/orgs/{org}/actions/runners/registration-token", "register an owner-level runner (--owner-runners)", PermOrgRunners, "write", "admin:org"},
	{"POST", "/orgs/{org}/actions/runners/remove-token", "remove an owner-level runner's registration", PermOrgRunners, "write", "admin:org"},
	{"POST", "/orgs/{org}/actions/runners/generate-jitconfig", "a just-in-time owner-level runner", PermOrgRunners, "write", "admin:org"},
	{"GET", "/orgs/{org}/actions/runners", "confirm a released owner-level runner is gone", PermOrgRunners, "read", "admin:org"},
	{"GET", "/orgs/{org}/actions/runners/{runner_id}", "confirm an owner-level pool job's runner that listings miss is gone", PermOrgRunners, "read", "admin:org"},
	{"DELETE", "/orgs/{org}/actions/runners/{runner_id}", "delete a leftover owner-level runner", PermOrgRunners, "write", "admin:org"},
	{"GET", "/orgs/{org}/actions/runners/downloads", "the current runner release", PermOrgRunners, "read", "admin:org"},
	{"GET", "/enterprises/{enterprise}/actions/runners/downloads", "the current runner release (--github-enterprise)", PermClassicPATOnly, "read", "manage_runners:enterprise"},
	{"GET", "/repos/actions/runner/releases", "the publication dates of runner releases; the current release when no downloads endpoint answers", PermPublic, "read", ""},
	{"POST", "/actions/runner-registration", "the scale-set registration exchange (owner scale sets)", PermOrgRunners, "write", "admin:org"},
	{"POST", "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel", "cancel the run of a job no pool can serve", PermActions, "write", "repo"},
	{"POST", "/repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs", "re-run a job its runner lost", PermActions, "write", "repo"},
	{"GET", "/repos/{owner}/{repo}/actions/jobs/{job_id}", "read a pool job's state", PermActions, "read", "repo"},
	{"GET", "/repos/{owner}/{repo}", "the repository's default branch (the runner cache's scope; --cache-bucket)", PermMetadata, "read", "repo"},
}

// WebhookEvents are the events runnerpool's App subscribes to.
var WebhookEvents = []string{"workflow_job"}

// levelRank orders permission levels: a higher level covers a lower one.
var levelRank = map[string]int{"read": 1, "write": 2, "admin": 3}

// RequiredPermissions is what an App installation needs for repository runners and, with owner,
// owner-level runners: the highest level of each permission the calls need, and metadata read
// (which GitHub gives every App).
func RequiredPermissions(owner bool) map[string]string {
	req := map[string]string{PermMetadata: "read"}
	for _, c := range Calls {
		if c.Permission == "" || c.Permission == PermPublic || c.Permission == PermClassicPATOnly || (c.Permission == PermOrgRunners && !owner) {
			continue
		}
		if levelRank[c.Level] > levelRank[req[c.Permission]] {
			req[c.Permission] = c.Level
		}
	}
	return req
}

// requiredScopes are the classic PAT scopes needed for repository runners and, with owner,
// owner-level runners.
func requiredScopes(owner bool) []string {
	var out []string
	for _, c := range Calls {
		if c.PATScope != "" && !slices.Contains(out, c.PATScope) && c.Permission != PermClassicPATOnly && (owner || c.Permission != PermOrgRunners) {
			out = append(out, c.PATScope)
		}
	}
	slices.Sort(out)
	return out
}

// Missing is a permission the configured credential lacks for a scope.
type Missing struct {
	Scope      string // "owner" or "owner/repo"
	Permission string // an App permission ("administration") or a classic PAT scope ("admin:org")
	Want, Have string // levels; empty for PAT scopes and for Have when absent
}

func (m Missing) String() string {
	if m.Want == "" {
		return fmt.Sprintf("%s: the token lacks the %s scope", m.Scope, m.Permission)
	}
	return fmt.Sprintf("%s: %s: %s needed, has %s", m.Scope, m.Permission, m.Want, cmpOr(m.Have, "none"))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// CheckPermissions compares what the configured credential may do with what the configured scopes
// (Config.Allowed, Config.OwnerRunners) need, and lists every permission missing, by name. With an
// App it reads each scope's installation permissions; with a classic PAT the scopes GitHub reports
// for it (X-OAuth-Scopes). A token GitHub reports no scopes for (a fine-grained PAT) is checked by
// what GitHub refuses of one listing per scope. An error is a check that could not run.
func (c *Client) CheckPermissions(ctx context.Context) ([]Missing, error) {
	var missing []Missing
	for _, scope := range c.cfg.Allowed {
		owner, repo, err := ParseScope(scope)
		if err != nil {
			return nil, err
		}
		ownerRunners := repo == "" && slices.Contains(c.cfg.OwnerRunners, strings.ToLower(owner))
		var m []Missing
		if c.apps != nil {
			m, err = c.checkInstallation(ctx, owner, repo, ownerRunners)
		} else {
			m, err = c.checkToken(ctx, owner, repo, ownerRunners)
		}
		if err != nil {
			return nil, fmt.Errorf("checking the github permissions of %s: %w", scope, err)
		}
		for _, x := range m {
			x.Scope = scope
			missing = append(missing, x)
		}
	}
	return missing, nil
}

// checkInstallation compares the scope's installation permissions with the required ones.
func (c *Client) checkInstallation(ctx context.Context, owner, repo string, ownerRunners bool) ([]Missing, error) {
	inst, err := c.findInstallation(ctx, owner, repo)
	if err != nil {
		return nil, err
	}
	// The installation's permissions as GitHub names them (go-github's struct has their JSON names).
	b, err := json.Marshal(inst.GetPermissions())
	if err != nil {
		return nil, err
	}
	have := map[string]string{}
	if err := json.Unmarshal(b, &have); err != nil {
		return nil, err
	}
	var missing []Missing
	req := RequiredPermissions(ownerRunners)
	for _, name := range sortedKeys(req) {
		if levelRank[have[name]] < levelRank[req[name]] {
			missing = append(missing, Missing{Permission: name, Want: req[name], Have: have[name]})
		}
	}
	if !slices.Contains(inst.Events, "workflow_job") {
		missing = append(missing, Missing{Permission: "event workflow_job", Want: "subscribed"})
	}
	return missing, nil
}

// checkToken lists one page of the scope's runners (the repository's, else the owner's) with the PAT.
// Every answer to a classic token names its scopes (X-OAuth-Scopes), a refusal included; a token
// without that header (fine-grained) is judged by whether the listing the scope needs was refused.
func (c *Client) checkToken(ctx context.Context, owner, repo string, ownerRunners bool) ([]Missing, error) {
	gc, err := c.client(ctx, owner, repo)
	if err != nil {
		return nil, err
	}
	opts := &github.ListRunnersOptions{ListOptions: github.ListOptions{PerPage: 1}}
	var resp *github.Response
	needed := PermOrgRunners
	if repo != "" {
		needed = PermAdministration
		_, resp, err = gc.Actions.ListRunners(ctx, owner, repo, opts)
	} else {
		_, resp, err = gc.Actions.ListOrganizationRunners(ctx, owner, opts)
	}
	if resp == nil {
		return nil, err
	}
	refused := resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound
	if err != nil && !refused {
		return nil, err
	}
	var missing []Missing
	if header, classic := resp.Header[http.CanonicalHeaderKey("X-OAuth-Scopes")]; classic {
		have := map[string]bool{}
		for _, s := range strings.Split(strings.Join(header, ","), ",") {
			have[strings.TrimSpace(s)] = true
		}
		for _, s := range requiredScopes(ownerRunners) {
			if !have[s] {
				missing = append(missing, Missing{Permission: s})
			}
		}
	}
	// An owner's listing matters only for owner-level runners; a repository's always.
	if refused && len(missing) == 0 && (repo != "" || ownerRunners) {
		missing = append(missing, Missing{Permission: cmpOr(resp.Header.Get("X-Accepted-GitHub-Permissions"), needed), Want: "read"})
	}
	return missing, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
