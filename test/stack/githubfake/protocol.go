// This file serves the fake-only runner protocol under /_runner/ (what config.sh, run.sh and the runner's
// job listener do against real GitHub) and the test-side job queue (QueueJob, Job, Jobs).

package githubfake

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Limits of the NextJob long poll.
const (
	defaultJobWait = 50 * time.Second
	maxJobWait     = 2 * time.Minute
)

// registerRequest is the body of POST /_runner/register: config.sh's flags, or a JIT configuration.
type registerRequest struct {
	URL         string   `json:"url,omitempty"`
	Token       string   `json:"token,omitempty"`
	JITConfig   string   `json:"jit_config,omitempty"`
	Name        string   `json:"name,omitempty"`
	Labels      []string `json:"labels,omitempty"`
	RunnerGroup string   `json:"runner_group,omitempty"`
	Ephemeral   bool     `json:"ephemeral,omitempty"`
	Replace     bool     `json:"replace,omitempty"`
	OS          string   `json:"os,omitempty"`
	Arch        string   `json:"arch,omitempty"`
	WorkFolder  string   `json:"work_folder,omitempty"`
	Version     string   `json:"version,omitempty"`
}

// Registration is the answer to a registration: who the runner is and the credential it uses from then on.
type Registration struct {
	RunnerID      int64    `json:"runner_id"`
	Name          string   `json:"name"`
	Credential    string   `json:"credential"`
	Owner         string   `json:"owner"`
	Repo          string   `json:"repo,omitempty"`
	Labels        []string `json:"labels"`
	Ephemeral     bool     `json:"ephemeral"`
	RunnerGroupID int64    `json:"runner_group_id"`
}

// AssignedJob is a job handed to a runner by NextJob.
type AssignedJob struct {
	ID         int64    `json:"id"`
	RunID      int64    `json:"run_id"`
	RunAttempt int64    `json:"run_attempt"`
	Owner      string   `json:"owner"`
	Repo       string   `json:"repo"`
	Name       string   `json:"name"`
	Labels     []string `json:"labels"`
}

// scopeFromURL reads OWNER or OWNER/REPO from the path of config.sh's --url.
func scopeFromURL(raw string) (scope, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return scope{}, fmt.Errorf("invalid url %q: %w", raw, err)
	}
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	switch len(parts) {
	case 1:
		return newScope(parts[0], ""), nil
	case 2:
		return newScope(parts[0], parts[1]), nil
	}
	return scope{}, fmt.Errorf("url %q is neither https://HOST/OWNER nor https://HOST/OWNER/REPO", raw)
}

var validOS, validArch = []string{"Linux", "Windows", "macOS"}, []string{"X64", "ARM64", "ARM", "X86"}

func (s *Server) runnerRegister(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req registerRequest
	if !decodeBody(w, r, &req) {
		return
	}
	req.OS, req.Arch = cmpOr(req.OS, "Linux"), cmpOr(req.Arch, "X64")
	if !slices.Contains(validOS, req.OS) || !slices.Contains(validArch, req.Arch) {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid request: os must be one of %v and arch one of %v", validOS, validArch))
		return
	}
	switch {
	case (req.Token == "") == (req.JITConfig == ""):
		writeError(w, http.StatusBadRequest, "Give exactly one of token and jit_config")
	case req.JITConfig != "":
		s.registerJIT(w, req)
	default:
		s.registerWithToken(w, req)
	}
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (s *Server) registerJIT(w http.ResponseWriter, req registerRequest) {
	if req.Name != "" || len(req.Labels) > 0 || req.RunnerGroup != "" || req.Ephemeral || req.Replace || req.URL != "" {
		writeError(w, http.StatusBadRequest, "A JIT configuration carries name, labels, group and url: give none of them")
		return
	}
	cfg, err := decodeJITConfig(req.JITConfig)
	if err != nil {
		writeError(w, http.StatusBadRequest, "Invalid JIT configuration: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rr, ok := s.runners[cfg.RunnerID]
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, "The runner of this JIT configuration no longer exists")
		return
	case !rr.jit || rr.jitSecret != cfg.Secret:
		writeError(w, http.StatusUnauthorized, "Bad credentials")
		return
	case rr.jitUsed:
		writeError(w, http.StatusConflict, "This JIT configuration was already used")
		return
	}
	if !s.admitVersionLocked(w, &req) {
		return
	}
	rr.jitUsed, rr.os, rr.arch, rr.version = true, req.OS, req.Arch, req.Version
	s.issueCredentialLocked(w, rr)
}

func (s *Server) registerWithToken(w http.ResponseWriter, req registerRequest) {
	if strings.TrimSpace(req.Name) == "" {
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: name is required")
		return
	}
	if err := validateLabels(req.Labels); err != nil {
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.admitVersionLocked(w, &req) {
		return
	}
	t, ok := s.runnerTokens[req.Token]
	switch {
	case !ok:
		writeError(w, http.StatusUnauthorized, "Bad credentials: unknown registration token")
		return
	case t.purpose != purposeRegister:
		writeError(w, http.StatusUnauthorized, "Bad credentials: a remove token cannot register a runner")
		return
	case !s.now().Before(t.expires):
		writeError(w, http.StatusUnauthorized, "Bad credentials: registration token expired")
		return
	}
	if req.URL != "" {
		sc, err := scopeFromURL(req.URL)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if sc != t.scope {
			writeError(w, http.StatusForbidden, fmt.Sprintf("The registration token is for %s, not for %s", t.scope, sc))
			return
		}
	}
	groupID := int64(1)
	if req.RunnerGroup != "" {
		if t.scope.repo != "" {
			writeError(w, http.StatusBadRequest, "Runner groups apply to organization runners only")
			return
		}
		i := slices.IndexFunc(s.groupsLocked(t.scope.owner), func(g *groupRec) bool { return strings.EqualFold(g.name, req.RunnerGroup) })
		if i < 0 {
			writeError(w, http.StatusNotFound, fmt.Sprintf("Runner group %q not found", req.RunnerGroup))
			return
		}
		groupID = s.groupsLocked(t.scope.owner)[i].id
	}
	if old := s.findRunnerByNameLocked(t.scope, req.Name); old != nil {
		if !req.Replace {
			writeError(w, http.StatusConflict, fmt.Sprintf("A runner exists with the same name %s.", req.Name))
			return
		}
		s.deleteRunnerLocked(old)
	}
	owner, repo := s.displayScopeLocked(t.scope.owner, t.scope.repo)
	rr := &runnerRec{
		id: s.newIDLocked(), name: req.Name, scope: t.scope, owner: owner, repo: repo, os: req.OS,
		arch: req.Arch, ephemeral: req.Ephemeral, groupID: groupID, created: s.now().UTC(), version: req.Version,
	}
	addCustomLabels(rr, req.Labels)
	s.runners[rr.id] = rr
	s.issueCredentialLocked(w, rr)
}

func (s *Server) issueCredentialLocked(w http.ResponseWriter, rr *runnerRec) {
	rr.credential = "grc_" + randomString(40, alnum)
	s.credentials[rr.credential] = rr.id
	s.broadcastLocked()
	writeJSON(w, http.StatusCreated, Registration{
		RunnerID: rr.id, Name: rr.name, Credential: rr.credential, Owner: rr.owner, Repo: rr.repo,
		Labels: rr.allLabels(), Ephemeral: rr.ephemeral, RunnerGroupID: rr.groupID,
	})
}

// errRunnerGone is the lookup result for a credential whose runner was deleted.
var errRunnerGone = errors.New("runner was removed")

// runnerLocked returns the runner whose credential the request carries.
func (s *Server) runnerLocked(r *http.Request) (*runnerRec, error) {
	_, cred, ok := credential(r)
	if !ok {
		return nil, errors.New("no runner credential")
	}
	id, ok := s.credentials[cred]
	if !ok {
		return nil, errors.New("unknown runner credential")
	}
	rr, ok := s.runners[id]
	if !ok || rr.credential != cred {
		return nil, errRunnerGone
	}
	return rr, nil
}

// writeRunnerError answers 410 for a removed runner (the runner must re-register) and 401 otherwise.
func writeRunnerError(w http.ResponseWriter, err error) {
	if errors.Is(err, errRunnerGone) {
		writeError(w, http.StatusGone, "The runner registration was removed")
		return
	}
	writeError(w, http.StatusUnauthorized, "Bad credentials: "+err.Error())
}

func (s *Server) runnerConnect(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rr, err := s.runnerLocked(r)
	switch {
	case err != nil:
		writeRunnerError(w, err)
	case s.closed:
		writeError(w, http.StatusServiceUnavailable, "Server closed")
	default:
		if !rr.online {
			rr.idleSince = s.now()
		}
		rr.online = true
		s.broadcastLocked()
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) runnerDisconnect(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rr, err := s.runnerLocked(r)
	switch {
	case errors.Is(err, errRunnerGone):
		w.WriteHeader(http.StatusNoContent) // nothing left to disconnect
	case err != nil:
		writeRunnerError(w, err)
	default:
		rr.online = false
		s.broadcastLocked()
		w.WriteHeader(http.StatusNoContent)
	}
}

// runnerNextJob long-polls for a job the runner can run: ?wait=30s (Go duration; default 50s, at most 2m).
// 200 with the job, 204 when none came in time.
func (s *Server) runnerNextJob(w http.ResponseWriter, r *http.Request, _ *caller) {
	wait := defaultJobWait
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid wait %q: want a non-negative Go duration", v))
			return
		}
		wait = min(d, maxJobWait)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var tracked *runnerRec
	for {
		s.mu.Lock()
		rr, err := s.runnerLocked(r)
		switch {
		case err != nil:
			s.mu.Unlock()
			writeRunnerError(w, err)
			return
		case s.closed:
			s.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, "Server closed")
			return
		case !rr.online:
			s.mu.Unlock()
			writeError(w, http.StatusConflict, "The runner is not connected: connect first")
			return
		case rr.busy:
			s.mu.Unlock()
			writeError(w, http.StatusConflict, fmt.Sprintf("The runner is already running job %d", rr.jobID))
			return
		}
		if tracked == nil {
			tracked = rr
			rr.polling++
			defer s.donePolling(rr)
		}
		if err := s.assignableLocked(rr); err != nil {
			s.mu.Unlock()
			writeVersionError(w, err)
			return
		}
		if j := s.assignLocked(rr); j != nil {
			out := AssignedJob{ID: j.ID, RunID: j.RunID, RunAttempt: j.RunAttempt, Owner: j.Owner, Repo: j.Repo, Name: j.Name, Labels: slices.Clone(j.Labels)}
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, out)
			return
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// assignLocked hands the oldest queued job the runner can run to it, if any.
func (s *Server) assignLocked(rr *runnerRec) *jobRec {
	for i, id := range s.queue {
		j := s.jobs[id]
		lacksLabel := slices.ContainsFunc(j.Labels, func(l string) bool { return !rr.hasLabel(l) })
		if lacksLabel || !rr.scope.covers(j.Owner, j.Repo) || !s.ssMayAssignLocked(j, rr) {
			continue
		}
		s.queue = slices.Delete(s.queue, i, i+1)
		j.Status, j.StartedAt = JobInProgress, s.now().UTC()
		j.RunnerID, j.RunnerName, j.RunnerGroupID = rr.id, rr.name, rr.groupID
		rr.busy, rr.jobID = true, j.ID
		s.emitLocked(j, "in_progress")
		return j
	}
	return nil
}

var conclusions = []string{"success", "failure", "cancelled", "skipped", "neutral", "timed_out"}

func (s *Server) runnerComplete(w http.ResponseWriter, r *http.Request, _ *caller) {
	jobID, _ := pathInt(r, "job_id")
	var req struct {
		Conclusion string `json:"conclusion"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	req.Conclusion = cmpOr(req.Conclusion, "success")
	if !slices.Contains(conclusions, req.Conclusion) {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Invalid request: conclusion must be one of %v", conclusions))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rr, err := s.runnerLocked(r)
	if err != nil {
		writeRunnerError(w, err)
		return
	}
	if rr.jobID != jobID || jobID == 0 {
		writeError(w, http.StatusConflict, fmt.Sprintf("The runner is not running job %d", jobID))
		return
	}
	j := s.jobs[jobID]
	j.Status, j.Conclusion, j.CompletedAt = JobCompleted, req.Conclusion, s.now().UTC()
	if j.cancelRequested {
		j.Conclusion = "cancelled"
	}
	rr.busy, rr.jobID, rr.idleSince = false, 0, s.now()
	s.completedLocked(j) // its own steps' failure, then the jobs that wait for it (runs.go)
	if rr.ephemeral {
		s.deleteRunnerLocked(rr) // GitHub removes an ephemeral runner after its one job
	}
	s.broadcastLocked()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) runnerDeregister(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req struct {
		Token string `json:"token"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rr, err := s.runnerLocked(r)
	if errors.Is(err, errRunnerGone) {
		w.WriteHeader(http.StatusNoContent) // already gone: removal is idempotent
		return
	}
	if err != nil {
		writeRunnerError(w, err)
		return
	}
	t, ok := s.runnerTokens[req.Token]
	switch {
	case !ok || t.purpose != purposeRemove:
		writeError(w, http.StatusUnauthorized, "Bad credentials: not a remove token")
	case !s.now().Before(t.expires):
		writeError(w, http.StatusUnauthorized, "Bad credentials: remove token expired")
	case t.scope != rr.scope:
		writeError(w, http.StatusForbidden, fmt.Sprintf("The remove token is for %s, the runner belongs to %s", t.scope, rr.scope))
	case rr.busy:
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("Bad request - Runner %q is still running a job", rr.name))
	default:
		s.deleteRunnerLocked(rr)
		w.WriteHeader(http.StatusNoContent)
	}
}

// QueueJob queues a workflow job of a run whose runs-on labels are labels, and returns its id. A runner
// polling with NextJob gets it when its scope covers owner/repo and it has all the labels.
func (s *Server) QueueJob(owner, repo string, runID int64, labels []string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.ensureRepoLocked(owner, repo)
	j := &jobRec{repo: rp, Job: Job{
		ID: s.newIDLocked(), RunID: runID, RunAttempt: 1, Owner: rp.owner.login, Repo: rp.name, Name: "job",
		Labels: slices.Clone(labels), Status: JobQueued, QueuedAt: s.now().UTC(),
	}}
	s.jobs[j.ID] = j
	s.queue = append(s.queue, j.ID)
	s.emitLocked(j, "queued")
	s.broadcastLocked()
	return j.ID
}

// Job returns a snapshot of a job queued with QueueJob.
func (s *Server) Job(id int64) (Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return Job{}, false
	}
	return j.snapshot(), true
}

// Jobs returns snapshots of every job queued with QueueJob, by id.
func (s *Server) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, j.snapshot())
	}
	slices.SortFunc(out, func(a, b Job) int { return int(a.ID - b.ID) })
	return out
}
