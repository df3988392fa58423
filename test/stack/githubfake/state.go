// This file holds the fake's in-memory records, the exported snapshots tests inspect (Runner, Job,
// CancelledRun) and the JSON shapes the REST API answers with.

package githubfake

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

type ownerRec struct {
	key   string // lower-case login
	login string // as first seen
	id    int64
}

type repoRec struct {
	key   string // lower-case "owner/repo"
	owner *ownerRec
	name  string
	id    int64
	// defaultBranch is what GET /repos/{owner}/{repo} answers ("" : "main"; repos.go).
	defaultBranch string
}

type installationRec struct {
	id      int64
	owner   *ownerRec
	created time.Time
	perms   map[string]string // nil: installationPermissions() (permissions.go)
}

type installationToken struct {
	inst    *installationRec
	repos   map[string]bool // nil: all repositories of the owner
	expires time.Time
}

// scope is where a runner or token lives: an organization (repo == "") or a repository. Lower-case.
type scope struct{ owner, repo string }

func newScope(owner, repo string) scope {
	return scope{owner: strings.ToLower(owner), repo: strings.ToLower(repo)}
}

func (sc scope) String() string {
	if sc.repo == "" {
		return sc.owner
	}
	return sc.owner + "/" + sc.repo
}

// covers says whether a runner of this scope may run a job of owner/repo.
func (sc scope) covers(owner, repo string) bool {
	return sc.owner == strings.ToLower(owner) && (sc.repo == "" || sc.repo == strings.ToLower(repo))
}

const (
	purposeRegister = "registration"
	purposeRemove   = "remove"
)

type runnerToken struct {
	purpose string
	scope   scope
	expires time.Time
}

type runnerRec struct {
	id         int64
	name       string
	scope      scope
	owner      string // display names
	repo       string
	os, arch   string
	online     bool
	busy       bool
	ephemeral  bool
	jit        bool
	jitSecret  string
	jitUsed    bool
	groupID    int64
	custom     []string // custom labels, in order added
	credential string
	jobID      int64
	created    time.Time
	version    string // the runner's version, from its registration (runner_versions.go)
	// idleSince is when the runner last became idle (connected, or finished a job); polling counts
	// its open job polls. A scale set's assigned jobs go to its longest idle polling runner
	// (actions_queue_runners.go).
	idleSince time.Time
	polling   int
}

// readOnlyLabels are the labels GitHub gives every self-hosted runner.
func (rr *runnerRec) readOnlyLabels() []string { return []string{"self-hosted", rr.os, rr.arch} }

func (rr *runnerRec) allLabels() []string { return append(rr.readOnlyLabels(), rr.custom...) }

func (rr *runnerRec) hasLabel(name string) bool {
	return slices.ContainsFunc(rr.allLabels(), func(l string) bool { return strings.EqualFold(l, name) })
}

type groupRec struct {
	id                       int64
	name                     string
	visibility               string
	isDefault                bool
	allowsPublicRepositories bool
	restrictedToWorkflows    bool
	selectedWorkflows        []string
}

// Job status values, as in GitHub's workflow_job.
const (
	JobQueued     = "queued"
	JobInProgress = "in_progress"
	JobCompleted  = "completed"
)

type jobRec struct {
	Job
	repo            *repoRec
	cancelRequested bool
}

// Runner is a snapshot of a self-hosted runner as the fake holds it.
type Runner struct {
	ID            int64
	Name          string
	Owner         string
	Repo          string // "" for an organization runner
	OS            string
	Arch          string
	Status        string // "online" or "offline"
	Busy          bool
	Ephemeral     bool
	JIT           bool     // created by generate-jitconfig
	RunnerGroupID int64    // 1 = Default
	Labels        []string // read-only labels first, then custom ones
	JobID         int64    // the job it is running, 0 when none
	CreatedAt     time.Time
	Version       string // the runner's version (runner_versions.go)
}

// Job is a snapshot of a workflow job queued with QueueJob.
type Job struct {
	ID            int64
	RunID         int64
	RunAttempt    int64
	Owner         string
	Repo          string
	Name          string
	Labels        []string // runs-on
	Status        string   // JobQueued, JobInProgress or JobCompleted
	Conclusion    string   // set when completed: success, failure, cancelled, ...
	RunnerID      int64
	RunnerName    string
	RunnerGroupID int64
	QueuedAt      time.Time
	StartedAt     time.Time
	CompletedAt   time.Time
	// Outputs are what the job's steps set (CompleteJob): later jobs read them as
	// needs.<job>.outputs.<name>.
	Outputs map[string]string
}

// CancelledRun is a workflow run cancelled through POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel.
type CancelledRun struct {
	Owner string
	Repo  string
	RunID int64
	At    time.Time
}

func (rr *runnerRec) snapshot() Runner {
	status := "offline"
	if rr.online {
		status = "online"
	}
	return Runner{
		ID: rr.id, Name: rr.name, Owner: rr.owner, Repo: rr.repo, OS: rr.os, Arch: rr.arch,
		Status: status, Busy: rr.busy, Ephemeral: rr.ephemeral, JIT: rr.jit, RunnerGroupID: rr.groupID,
		Labels: rr.allLabels(), JobID: rr.jobID, CreatedAt: rr.created, Version: rr.version,
	}
}

func (j *jobRec) snapshot() Job {
	c := j.Job
	c.Labels = slices.Clone(j.Labels)
	c.Outputs = maps.Clone(j.Outputs)
	return c
}

// JSON shapes of the REST API (field names as GitHub's, matching go-github v62's types).

type labelJSON struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"` // "read-only" or "custom"
}

type runnerJSON struct {
	ID            int64       `json:"id"`
	Name          string      `json:"name"`
	OS            string      `json:"os"`
	Status        string      `json:"status"`
	Busy          bool        `json:"busy"`
	Ephemeral     bool        `json:"ephemeral"`
	RunnerGroupID int64       `json:"runner_group_id"`
	Labels        []labelJSON `json:"labels"`
}

type runnersJSON struct {
	TotalCount int          `json:"total_count"`
	Runners    []runnerJSON `json:"runners"`
}

type labelsJSON struct {
	TotalCount int         `json:"total_count"`
	Labels     []labelJSON `json:"labels"`
}

type tokenJSON struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

type groupJSON struct {
	ID                           int64    `json:"id"`
	Name                         string   `json:"name"`
	Visibility                   string   `json:"visibility"`
	Default                      bool     `json:"default"`
	RunnersURL                   string   `json:"runners_url"`
	SelectedRepositoriesURL      string   `json:"selected_repositories_url,omitempty"`
	Inherited                    bool     `json:"inherited"`
	AllowsPublicRepositories     bool     `json:"allows_public_repositories"`
	RestrictedToWorkflows        bool     `json:"restricted_to_workflows"`
	SelectedWorkflows            []string `json:"selected_workflows"`
	WorkflowRestrictionsReadOnly bool     `json:"workflow_restrictions_read_only"`
}

// accountJSON is GitHub's simple-user: an account (user or organization) as other objects embed it.
type accountJSON struct {
	Login             string  `json:"login"`
	ID                int64   `json:"id"`
	NodeID            string  `json:"node_id"`
	AvatarURL         string  `json:"avatar_url"`
	GravatarID        *string `json:"gravatar_id"`
	URL               string  `json:"url"`
	HTMLURL           string  `json:"html_url"`
	FollowersURL      string  `json:"followers_url"`
	FollowingURL      string  `json:"following_url"`
	GistsURL          string  `json:"gists_url"`
	StarredURL        string  `json:"starred_url"`
	SubscriptionsURL  string  `json:"subscriptions_url"`
	OrganizationsURL  string  `json:"organizations_url"`
	ReposURL          string  `json:"repos_url"`
	EventsURL         string  `json:"events_url"`
	ReceivedEventsURL string  `json:"received_events_url"`
	Type              string  `json:"type"`
	SiteAdmin         bool    `json:"site_admin"`
}

// account builds a simple-user with the URLs api.github.com gives it.
func account(login string, id int64, typ string) accountJSON {
	u := "https://api.github.com/users/" + login
	empty := ""
	return accountJSON{
		Login: login, ID: id, NodeID: fmt.Sprintf("MDEyOk9yZ2FuaXphdGlvbjE%d", id),
		AvatarURL: fmt.Sprintf("https://avatars.githubusercontent.com/u/%d?v=4", id), GravatarID: &empty,
		URL: u, HTMLURL: "https://github.com/" + login, FollowersURL: u + "/followers",
		FollowingURL: u + "/following{/other_user}", GistsURL: u + "/gists{/gist_id}",
		StarredURL: u + "/starred{/owner}{/repo}", SubscriptionsURL: u + "/subscriptions",
		OrganizationsURL: u + "/orgs", ReposURL: u + "/repos", EventsURL: u + "/events{/privacy}",
		ReceivedEventsURL: u + "/received_events", Type: typ,
	}
}

// organizationJSON is GitHub's organization-simple, the organization object of webhook payloads.
type organizationJSON struct {
	Login            string  `json:"login"`
	ID               int64   `json:"id"`
	NodeID           string  `json:"node_id"`
	URL              string  `json:"url"`
	ReposURL         string  `json:"repos_url"`
	EventsURL        string  `json:"events_url"`
	HooksURL         string  `json:"hooks_url"`
	IssuesURL        string  `json:"issues_url"`
	MembersURL       string  `json:"members_url"`
	PublicMembersURL string  `json:"public_members_url"`
	AvatarURL        string  `json:"avatar_url"`
	Description      *string `json:"description"`
}

func organization(login string, id int64) organizationJSON {
	u := "https://api.github.com/orgs/" + login
	return organizationJSON{
		Login: login, ID: id, NodeID: fmt.Sprintf("MDEyOk9yZ2FuaXphdGlvbjE%d", id), URL: u,
		ReposURL: u + "/repos", EventsURL: u + "/events", HooksURL: u + "/hooks", IssuesURL: u + "/issues",
		MembersURL: u + "/members{/member}", PublicMembersURL: u + "/public_members{/member}",
		AvatarURL: fmt.Sprintf("https://avatars.githubusercontent.com/u/%d?v=4", id),
	}
}

// webhookRepository is the repository object of a webhook payload (GitHub's repository-webhooks): the
// REST repository's URLs and counters, every one of them present.
func webhookRepository(owner accountJSON, name string, id int64, private bool) map[string]any {
	full := owner.Login + "/" + name
	u := "https://api.github.com/repos/" + full
	html := "https://github.com/" + full
	r := map[string]any{
		"id": id, "node_id": fmt.Sprintf("R_kgDOfake%d", id), "name": name, "full_name": full, "owner": owner,
		"private": private, "html_url": html, "description": nil, "fork": false, "url": u,
		"homepage": nil, "language": nil, "mirror_url": nil, "license": nil, "default_branch": "main",
		"clone_url": html + ".git", "git_url": "git://github.com/" + full + ".git", "ssh_url": "git@github.com:" + full + ".git",
		"svn_url": html, "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z", "pushed_at": "2024-01-01T00:00:00Z",
		"has_downloads": true, "has_issues": true, "has_projects": true, "has_wiki": false, "has_pages": false,
		"archived": false, "disabled": false, "size": 0, "forks": 0, "forks_count": 0, "open_issues": 0, "open_issues_count": 0,
		"stargazers_count": 0, "watchers": 0, "watchers_count": 0, "visibility": map[bool]string{true: "private", false: "public"}[private],
	}
	for k, v := range map[string]string{
		"archive_url": "/{archive_format}{/ref}", "assignees_url": "/assignees{/user}", "blobs_url": "/git/blobs{/sha}",
		"branches_url": "/branches{/branch}", "collaborators_url": "/collaborators{/collaborator}", "comments_url": "/comments{/number}",
		"commits_url": "/commits{/sha}", "compare_url": "/compare/{base}...{head}", "contents_url": "/contents/{+path}",
		"contributors_url": "/contributors", "deployments_url": "/deployments", "downloads_url": "/downloads", "events_url": "/events",
		"forks_url": "/forks", "git_commits_url": "/git/commits{/sha}", "git_refs_url": "/git/refs{/sha}", "git_tags_url": "/git/tags{/sha}",
		"hooks_url": "/hooks", "issue_comment_url": "/issues/comments{/number}", "issue_events_url": "/issues/events{/number}",
		"issues_url": "/issues{/number}", "keys_url": "/keys{/key_id}", "labels_url": "/labels{/name}", "languages_url": "/languages",
		"merges_url": "/merges", "milestones_url": "/milestones{/number}", "notifications_url": "/notifications{?since,all,participating}",
		"pulls_url": "/pulls{/number}", "releases_url": "/releases{/id}", "stargazers_url": "/stargazers", "statuses_url": "/statuses/{sha}",
		"subscribers_url": "/subscribers", "subscription_url": "/subscription", "tags_url": "/tags", "teams_url": "/teams",
		"trees_url": "/git/trees{/sha}",
	} {
		r[k] = u + v
	}
	return r
}

type repositoryJSON struct {
	ID       int64       `json:"id"`
	Name     string      `json:"name"`
	FullName string      `json:"full_name"`
	Owner    accountJSON `json:"owner"`
	Private  bool        `json:"private"`
	HTMLURL  string      `json:"html_url"`
}

func (o *ownerRec) json() accountJSON {
	return account(o.login, o.id, "Organization")
}

func (rp *repoRec) json() repositoryJSON {
	return repositoryJSON{
		ID: rp.id, Name: rp.name, FullName: rp.owner.login + "/" + rp.name, Owner: rp.owner.json(),
		Private: true, HTMLURL: "https://github.com/" + rp.owner.login + "/" + rp.name,
	}
}

func (s *Server) ensureOwnerLocked(login string) *ownerRec {
	key := strings.ToLower(login)
	if o, ok := s.owners[key]; ok {
		return o
	}
	o := &ownerRec{key: key, login: login, id: s.newIDLocked()}
	s.owners[key] = o
	return o
}

func (s *Server) ensureRepoLocked(owner, name string) *repoRec {
	o := s.ensureOwnerLocked(owner)
	key := o.key + "/" + strings.ToLower(name)
	if rp, ok := s.repos[key]; ok {
		return rp
	}
	rp := &repoRec{key: key, owner: o, name: name, id: s.newIDLocked()}
	s.repos[key] = rp
	return rp
}

func (s *Server) labelIDLocked(name string) int64 {
	key := strings.ToLower(name)
	id, ok := s.labelIDs[key]
	if !ok {
		id = s.newIDLocked()
		s.labelIDs[key] = id
	}
	return id
}

func (s *Server) runnerJSONLocked(rr *runnerRec) runnerJSON {
	out := runnerJSON{
		ID: rr.id, Name: rr.name, OS: rr.os, Status: "offline", Busy: rr.busy, Ephemeral: rr.ephemeral,
		RunnerGroupID: rr.groupID, Labels: s.labelsJSONLocked(rr),
	}
	if rr.online {
		out.Status = "online"
	}
	return out
}

func (s *Server) labelsJSONLocked(rr *runnerRec) []labelJSON {
	var out []labelJSON
	for _, l := range rr.readOnlyLabels() {
		out = append(out, labelJSON{ID: s.labelIDLocked(l), Name: l, Type: "read-only"})
	}
	for _, l := range rr.custom {
		out = append(out, labelJSON{ID: s.labelIDLocked(l), Name: l, Type: "custom"})
	}
	return out
}

// Runners returns the runners registered for a repository, or for an organization when repo is "",
// ordered by id.
func (s *Server) Runners(owner, repo string) []Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := newScope(owner, repo)
	var out []Runner
	for _, rr := range s.sortedRunnersLocked() {
		if rr.scope == sc {
			out = append(out, rr.snapshot())
		}
	}
	return out
}

func (s *Server) sortedRunnersLocked() []*runnerRec {
	out := make([]*runnerRec, 0, len(s.runners))
	for _, rr := range s.runners {
		out = append(out, rr)
	}
	slices.SortFunc(out, func(a, b *runnerRec) int { return int(a.id - b.id) })
	return out
}

// deleteRunnerLocked removes a runner; its credential stays known so the runner is told it was removed.
func (s *Server) deleteRunnerLocked(rr *runnerRec) {
	delete(s.runners, rr.id)
	s.broadcastLocked()
}
