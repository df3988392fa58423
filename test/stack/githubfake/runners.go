// This file serves the self-hosted runner REST API (registration and remove tokens, JIT configurations,
// runners and their labels), runner groups, and workflow run cancellation.

package githubfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

const upperAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// pathScope returns the owner (or org) and repository ("" at organization level) of a request.
func pathScope(r *http.Request) (owner, repo string) {
	return r.PathValue("owner") + r.PathValue("org"), r.PathValue("repo")
}

// displayScopeLocked creates the owner and repository records on demand and returns their display names.
func (s *Server) displayScopeLocked(owner, repo string) (string, string) {
	if repo == "" {
		return s.ensureOwnerLocked(owner).login, ""
	}
	rp := s.ensureRepoLocked(owner, repo)
	return rp.owner.login, rp.name
}

func (s *Server) createRunnerToken(purpose string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ *caller) {
		owner, repo := pathScope(r)
		token := randomString(29, upperAlnum)
		s.mu.Lock()
		s.displayScopeLocked(owner, repo)
		exp := s.now().Add(time.Hour).UTC().Truncate(time.Second)
		s.runnerTokens[token] = &runnerToken{purpose: purpose, scope: newScope(owner, repo), expires: exp}
		s.recordMintLocked(purpose, newScope(owner, repo))
		s.mu.Unlock()
		writeJSON(w, http.StatusCreated, tokenJSON{Token: token, ExpiresAt: exp})
	}
}

// validateLabels checks custom label names as GitHub does (non-empty, at most 256 characters, no commas).
func validateLabels(labels []string) error {
	if len(labels) > 100 {
		return fmt.Errorf("at most 100 labels, got %d", len(labels))
	}
	for _, l := range labels {
		if strings.TrimSpace(l) == "" || len(l) > 256 || strings.Contains(l, ",") {
			return fmt.Errorf("invalid label %q", l)
		}
	}
	return nil
}

// addCustomLabels appends labels not already on the runner (case-insensitively).
func addCustomLabels(rr *runnerRec, labels []string) {
	for _, l := range labels {
		if !rr.hasLabel(l) {
			rr.custom = append(rr.custom, l)
		}
	}
}

// findRunnerByNameLocked returns the runner of a scope with a name, case-insensitively.
func (s *Server) findRunnerByNameLocked(sc scope, name string) *runnerRec {
	for _, rr := range s.runners {
		if rr.scope == sc && strings.EqualFold(rr.name, name) {
			return rr
		}
	}
	return nil
}

// jitConfig is what encoded_jit_config decodes to (base64 of its JSON): enough for the fake to find the
// runner again when the fake runner presents it.
type jitConfig struct {
	Kind     string `json:"kind"` // always "githubfake-jit"
	RunnerID int64  `json:"runner_id"`
	Name     string `json:"runner_name"`
	Scope    string `json:"scope"`
	Secret   string `json:"secret"`
}

const jitKind = "githubfake-jit"

func decodeJITConfig(encoded string) (jitConfig, error) {
	var c jitConfig
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return c, fmt.Errorf("JIT config is not base64: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Kind != jitKind {
		return c, fmt.Errorf("not a JIT config of this fake")
	}
	return c, nil
}

// jitRequest is go-github's GenerateJITConfigRequest.
type jitRequest struct {
	Name          string   `json:"name"`
	RunnerGroupID int64    `json:"runner_group_id"`
	WorkFolder    *string  `json:"work_folder"`
	Labels        []string `json:"labels"`
}

func (s *Server) generateJITConfig(w http.ResponseWriter, r *http.Request, _ *caller) {
	owner, repo := pathScope(r)
	var req jitRequest
	if !decodeBody(w, r, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.Name) == "":
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: name is required")
		return
	case len(req.Labels) == 0:
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: labels needs at least 1 item")
		return
	}
	if err := validateLabels(req.Labels); err != nil {
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := newScope(owner, repo)
	if repo == "" {
		if s.groupLocked(owner, req.RunnerGroupID) == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("Runner group %d not found in organization %s", req.RunnerGroupID, owner))
			return
		}
	} else if req.RunnerGroupID != 1 {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid request: runner_group_id of a repository runner must be 1 (Default), got %d", req.RunnerGroupID))
		return
	}
	if s.findRunnerByNameLocked(sc, req.Name) != nil {
		writeError(w, http.StatusConflict, fmt.Sprintf("Already exists - A runner with the name %s already exists.", req.Name))
		return
	}
	dOwner, dRepo := s.displayScopeLocked(owner, repo)
	rr := &runnerRec{
		id: s.newIDLocked(), name: req.Name, scope: sc, owner: dOwner, repo: dRepo, os: "Linux", arch: "X64",
		ephemeral: true, jit: true, jitSecret: randomString(32, alnum), groupID: req.RunnerGroupID,
		created: s.now().UTC(),
	}
	addCustomLabels(rr, req.Labels)
	s.runners[rr.id] = rr
	s.recordMintLocked("jit", sc)
	blob, _ := json.Marshal(jitConfig{Kind: jitKind, RunnerID: rr.id, Name: rr.name, Scope: sc.String(), Secret: rr.jitSecret})
	writeJSON(w, http.StatusCreated, struct {
		Runner           runnerJSON `json:"runner"`
		EncodedJITConfig string     `json:"encoded_jit_config"`
	}{s.runnerJSONLocked(rr), base64.StdEncoding.EncodeToString(blob)})
}

// runnerInScopeLocked finds the runner of the request's {runner_id} in the request's scope.
func (s *Server) runnerInScopeLocked(r *http.Request) *runnerRec {
	id, ok := pathInt(r, "runner_id")
	if !ok {
		return nil
	}
	rr, ok := s.runners[id]
	if !ok || rr.scope != newScope(pathScope(r)) {
		return nil
	}
	return rr
}

func (s *Server) listRunners(w http.ResponseWriter, r *http.Request, _ *caller) {
	sc := newScope(pathScope(r))
	name := r.URL.Query().Get("name")
	s.mu.Lock()
	var all []runnerJSON
	for _, rr := range s.sortedRunnersLocked() {
		if rr.scope == sc && (name == "" || strings.EqualFold(rr.name, name)) && (s.listingSkips == nil || !s.listingSkips(rr.snapshot())) {
			all = append(all, s.runnerJSONLocked(rr))
		}
	}
	s.mu.Unlock()
	page, ok := paginate(w, r, all)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, runnersJSON{TotalCount: len(all), Runners: append([]runnerJSON{}, page...)})
}

// SkipInListings makes every runner listing leave out the runners skip reports (nil: none), while
// each stays readable by its id and keeps running its job. It models what a paginated listing
// shows when runners are removed between the requests of two of its pages: GitHub's pages are
// offsets into the current list (GitHub Docs, "Using pagination in the REST API": page and
// per_page), so every runner after a removed one moves up one place and the first runner of the
// next page is in neither page. Busy scopes remove ephemeral runners every few seconds.
func (s *Server) SkipInListings(skip func(Runner) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listingSkips = skip
}

func (s *Server) getRunner(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rr := s.runnerInScopeLocked(r)
	if rr == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, s.runnerJSONLocked(rr))
}

func (s *Server) deleteRunner(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rr := s.runnerInScopeLocked(r)
	switch {
	case rr == nil:
		writeError(w, http.StatusNotFound, "Not Found")
	case rr.busy:
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Bad request - Runner %q is still running a job\"", rr.name))
	default:
		s.deleteRunnerLocked(rr)
		w.WriteHeader(http.StatusNoContent)
	}
}

type labelsOp int

const (
	labelsGet labelsOp = iota
	labelsAdd
	labelsSet
	labelsClear
	labelsRemove
)

// runnerLabels serves GET, POST (add), PUT (replace custom), DELETE (remove all custom) and
// DELETE .../labels/{name} of a runner's labels.
func (s *Server) runnerLabels(op labelsOp) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ *caller) {
		var req struct {
			Labels *[]string `json:"labels"`
		}
		if op == labelsAdd || op == labelsSet {
			if !decodeBody(w, r, &req) {
				return
			}
			if req.Labels == nil || (op == labelsAdd && len(*req.Labels) == 0) {
				writeError(w, http.StatusUnprocessableEntity, "Invalid request: labels is required")
				return
			}
			if err := validateLabels(*req.Labels); err != nil {
				writeError(w, http.StatusUnprocessableEntity, "Invalid request: "+err.Error())
				return
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		rr := s.runnerInScopeLocked(r)
		if rr == nil {
			writeError(w, http.StatusNotFound, "Not Found")
			return
		}
		before := slices.Clone(rr.custom)
		switch op {
		case labelsAdd:
			addCustomLabels(rr, *req.Labels)
		case labelsSet:
			rr.custom = nil
			addCustomLabels(rr, *req.Labels)
		case labelsClear:
			rr.custom = nil
		case labelsRemove:
			name := r.PathValue("name")
			i := slices.IndexFunc(rr.custom, func(l string) bool { return strings.EqualFold(l, name) })
			if i < 0 {
				if rr.hasLabel(name) {
					writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Label %q is read-only", name))
				} else {
					writeError(w, http.StatusNotFound, "Not Found")
				}
				return
			}
			rr.custom = slices.Delete(rr.custom, i, i+1)
		}
		if len(rr.custom) > 100 {
			rr.custom = before
			writeError(w, http.StatusUnprocessableEntity, "Invalid request: a runner can have at most 100 custom labels")
			return
		}
		if op != labelsGet {
			s.broadcastLocked()
		}
		labels := s.labelsJSONLocked(rr)
		writeJSON(w, http.StatusOK, labelsJSON{TotalCount: len(labels), Labels: labels})
	}
}

// groupsLocked returns an organization's runner groups, creating the Default group (id 1) on first use.
func (s *Server) groupsLocked(org string) []*groupRec {
	key := strings.ToLower(org)
	if _, ok := s.groups[key]; !ok {
		s.ensureOwnerLocked(org)
		s.groups[key] = []*groupRec{{id: 1, name: "Default", visibility: "all", isDefault: true}}
	}
	return s.groups[key]
}

func (s *Server) groupLocked(org string, id int64) *groupRec {
	for _, g := range s.groupsLocked(org) {
		if g.id == id {
			return g
		}
	}
	return nil
}

func groupToJSON(r *http.Request, org string, g *groupRec) groupJSON {
	base := fmt.Sprintf("%s/orgs/%s/actions/runner-groups/%d", apiBase(r), org, g.id)
	out := groupJSON{
		ID: g.id, Name: g.name, Visibility: g.visibility, Default: g.isDefault, RunnersURL: base + "/runners",
		AllowsPublicRepositories: g.allowsPublicRepositories, RestrictedToWorkflows: g.restrictedToWorkflows,
		SelectedWorkflows: append([]string{}, g.selectedWorkflows...),
	}
	if g.visibility == "selected" {
		out.SelectedRepositoriesURL = base + "/repositories"
	}
	return out
}

func (s *Server) listGroups(w http.ResponseWriter, r *http.Request, _ *caller) {
	org := r.PathValue("org")
	s.mu.Lock()
	var all []groupJSON
	for _, g := range s.groupsLocked(org) {
		all = append(all, groupToJSON(r, org, g))
	}
	s.mu.Unlock()
	page, ok := paginate(w, r, all)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		TotalCount   int         `json:"total_count"`
		RunnerGroups []groupJSON `json:"runner_groups"`
	}{len(all), append([]groupJSON{}, page...)})
}

// createGroupRequest is go-github's CreateRunnerGroupRequest.
type createGroupRequest struct {
	Name                     *string  `json:"name"`
	Visibility               *string  `json:"visibility"`
	SelectedRepositoryIDs    []int64  `json:"selected_repository_ids"`
	Runners                  []int64  `json:"runners"`
	AllowsPublicRepositories *bool    `json:"allows_public_repositories"`
	RestrictedToWorkflows    *bool    `json:"restricted_to_workflows"`
	SelectedWorkflows        []string `json:"selected_workflows"`
	NetworkConfigurationID   *string  `json:"network_configuration_id"`
}

func (s *Server) createGroup(w http.ResponseWriter, r *http.Request, _ *caller) {
	org := r.PathValue("org")
	var req createGroupRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Name == nil || strings.TrimSpace(*req.Name) == "" {
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: name is required")
		return
	}
	g := &groupRec{name: *req.Name, visibility: "all", selectedWorkflows: req.SelectedWorkflows}
	if req.Visibility != nil {
		g.visibility = *req.Visibility
	}
	if !slices.Contains([]string{"all", "selected", "private"}, g.visibility) {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid request: visibility %q is not one of all, selected, private", g.visibility))
		return
	}
	g.allowsPublicRepositories = req.AllowsPublicRepositories != nil && *req.AllowsPublicRepositories
	g.restrictedToWorkflows = req.RestrictedToWorkflows != nil && *req.RestrictedToWorkflows
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.groupsLocked(org) {
		if strings.EqualFold(other.name, g.name) {
			writeError(w, http.StatusConflict, fmt.Sprintf("A runner group named %q already exists", g.name))
			return
		}
	}
	sc := newScope(org, "")
	for _, id := range req.Runners {
		if rr, ok := s.runners[id]; !ok || rr.scope != sc {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid request: runner %d is not an organization runner of %s", id, org))
			return
		}
	}
	g.id = s.newIDLocked()
	for _, id := range req.Runners {
		s.runners[id].groupID = g.id
	}
	s.groups[strings.ToLower(org)] = append(s.groupsLocked(org), g)
	writeJSON(w, http.StatusCreated, groupToJSON(r, org, g))
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request, _ *caller) {
	org := r.PathValue("org")
	id, _ := pathInt(r, "group_id")
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(org, id)
	if g == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, groupToJSON(r, org, g))
}

func (s *Server) deleteGroup(w http.ResponseWriter, r *http.Request, _ *caller) {
	org := r.PathValue("org")
	id, _ := pathInt(r, "group_id")
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groupLocked(org, id)
	switch {
	case g == nil:
		writeError(w, http.StatusNotFound, "Not Found")
		return
	case g.isDefault:
		writeError(w, http.StatusUnprocessableEntity, "The Default runner group cannot be deleted")
		return
	}
	key := strings.ToLower(org)
	s.groups[key] = slices.DeleteFunc(s.groups[key], func(x *groupRec) bool { return x == g })
	for _, rr := range s.runners {
		if rr.scope == newScope(org, "") && rr.groupID == id {
			rr.groupID = 1 // GitHub moves the runners of a deleted group to Default
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listGroupRunners(w http.ResponseWriter, r *http.Request, _ *caller) {
	org := r.PathValue("org")
	id, _ := pathInt(r, "group_id")
	s.mu.Lock()
	if s.groupLocked(org, id) == nil {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	var all []runnerJSON
	for _, rr := range s.sortedRunnersLocked() {
		if rr.scope == newScope(org, "") && rr.groupID == id {
			all = append(all, s.runnerJSONLocked(rr))
		}
	}
	s.mu.Unlock()
	page, ok := paginate(w, r, all)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, runnersJSON{TotalCount: len(all), Runners: append([]runnerJSON{}, page...)})
}

// cancelRun records the cancellation; queued jobs of the run complete as cancelled at once, running ones
// complete as cancelled when their runner reports them done. Like GitHub it answers 202 with {}.
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, _ *caller) {
	runID, ok := pathInt(r, "run_id")
	if !ok {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	owner, repo := pathScope(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	dOwner, dRepo := s.displayScopeLocked(owner, repo)
	now := s.now().UTC()
	s.cancelled = append(s.cancelled, CancelledRun{Owner: dOwner, Repo: dRepo, RunID: runID, At: now})
	for _, j := range s.jobs {
		if j.RunID != runID || !newScope(owner, repo).covers(j.Owner, j.Repo) {
			continue
		}
		switch j.Status {
		case JobQueued:
			s.queue = slices.DeleteFunc(s.queue, func(id int64) bool { return id == j.ID })
			j.Status, j.Conclusion, j.CompletedAt = JobCompleted, "cancelled", now
			s.completedLocked(j)
		case JobInProgress:
			j.cancelRequested = true
		}
	}
	writeJSON(w, http.StatusAccepted, struct{}{})
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobLocked(w, r); j != nil {
		writeJSON(w, http.StatusOK, workflowJobJSON(j))
	}
}

// jobLocked finds the request's job_id within the request's repository, or answers 404.
func (s *Server) jobLocked(w http.ResponseWriter, r *http.Request) *jobRec {
	id, _ := pathInt(r, "job_id")
	owner, repo := pathScope(r)
	j, ok := s.jobs[id]
	if !ok || !newScope(owner, repo).covers(j.Owner, j.Repo) {
		writeError(w, http.StatusNotFound, "Not Found")
		return nil
	}
	return j
}

// rerunFailedJobs re-runs a workflow run's failed (or cancelled) jobs, as GitHub does: with their
// dependents, in the run's next attempt (runs.go). Jobs queued alone (QueueJob) are each queued
// again as a new job of the next attempt. A run with nothing to re-run is refused (403), as GitHub
// refuses it.
func (s *Server) rerunFailedJobs(w http.ResponseWriter, r *http.Request, _ *caller) {
	runID, ok := pathInt(r, "run_id")
	if !ok {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	owner, repo := pathScope(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if run := s.runOfLocked(r, runID); run != nil {
		s.rerunFailedOfRun(w, run)
		return
	}
	var failed []*jobRec
	attempt := int64(0)
	for _, j := range s.jobs {
		if j.RunID != runID || !newScope(owner, repo).covers(j.Owner, j.Repo) {
			continue
		}
		attempt = max(attempt, j.RunAttempt)
		if j.Status == JobCompleted && j.Conclusion != "success" && j.Conclusion != "skipped" {
			failed = append(failed, j)
		}
	}
	failed = slices.DeleteFunc(failed, func(j *jobRec) bool { return j.RunAttempt != attempt })
	if len(failed) == 0 {
		writeError(w, http.StatusForbidden, "This workflow run cannot be rerun: it has no failed jobs in its latest attempt.")
		return
	}
	s.requeueLocked(failed, attempt+1)
	writeJSON(w, http.StatusCreated, struct{}{})
}

// Rerun is a job run again by one of the re-run endpoints (runs.go).
type Rerun struct {
	Owner, Repo string
	RunID       int64
	Job, NewJob int64 // the job re-run and the one queued (or skipped) in its place
}

// Reruns returns the jobs re-run through the API, oldest first.
func (s *Server) Reruns() []Rerun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reruns)
}
