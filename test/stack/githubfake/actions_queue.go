// The Actions service's message sessions, message queue and scale set jobs.

package githubfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

type sessionJSON struct {
	SessionID               string       `json:"sessionId"`
	OwnerName               string       `json:"ownerName"`
	RunnerScaleSet          ssJSON       `json:"runnerScaleSet"`
	MessageQueueURL         string       `json:"messageQueueUrl"`
	MessageQueueAccessToken string       `json:"messageQueueAccessToken"`
	Statistics              *ssStatsJSON `json:"statistics"`
}

func (s *Server) sessionJSONLocked(r *http.Request, st *actionsState, set *scaleSetRec) sessionJSON {
	stats := s.ssStatsLocked(st, set)
	return sessionJSON{
		SessionID: set.session.id, OwnerName: set.session.owner, RunnerScaleSet: s.ssJSONLocked(r, st, set),
		MessageQueueURL:         fmt.Sprintf("%s_queue/%d/%s/messages", tenantURL(r), set.id, set.session.id),
		MessageQueueAccessToken: set.session.token, Statistics: &stats,
	}
}

// expireSessionLocked drops the session of a scale set nobody has polled for SessionIdle.
func (s *Server) expireSessionLocked(st *actionsState, set *scaleSetRec) {
	if ss := set.session; ss != nil && ss.polling == 0 && s.now().Sub(ss.lastPoll) > st.timing.SessionIdle {
		s.log.Info("githubfake: scale set session expired", "scale_set", set.name, "session", ss.id)
		set.session = nil
	}
}

func (s *Server) newQueueTokenLocked(st *actionsState, ss *ssSession) {
	ss.token = "mqt_" + randomString(40, alnum)
	ss.tokenExp = s.now().Add(st.timing.QueueTokenTTL)
}

func (s *Server) ssCreateSession(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	set := s.setLocked(w, r, st, sc)
	var in struct {
		OwnerName string `json:"ownerName"`
	}
	if set == nil || !readJSON(w, r, &in) {
		return
	}
	s.expireSessionLocked(st, set)
	if set.session != nil {
		st.conflicts++
		actionsError(w, http.StatusConflict, "RunnerScaleSetSessionConflictException",
			fmt.Sprintf("The actions runner scaleset %s already has an active session.", set.name))
		return
	}
	set.session = &ssSession{id: newUUID(), owner: in.OwnerName, lastPoll: s.now()}
	s.newQueueTokenLocked(st, set.session)
	writeJSON(w, http.StatusOK, s.sessionJSONLocked(r, st, set))
}

// sessionOfLocked finds the {sid} session of the {id} scale set, or writes 404.
func (s *Server) sessionOfLocked(w http.ResponseWriter, r *http.Request, st *actionsState, set *scaleSetRec) bool {
	s.expireSessionLocked(st, set)
	if set.session == nil || set.session.id != r.PathValue("sid") {
		actionsError(w, http.StatusNotFound, "TaskAgentSessionExpiredException", fmt.Sprintf("Session %s not found", r.PathValue("sid")))
		return false
	}
	return true
}

// sessionGoneOnDelete answers a DELETE of a session the service does not know (expired, evicted or
// never there): 400 RunnerScaleSetSessionExpiredException, not 404
// (actions/actions-runner-controller#4285). It reports whether it answered.
func (s *Server) sessionGoneOnDelete(w http.ResponseWriter, r *http.Request, st *actionsState, set *scaleSetRec) bool {
	s.expireSessionLocked(st, set)
	if set.session != nil && set.session.id == r.PathValue("sid") {
		return false
	}
	actionsError(w, http.StatusBadRequest, "RunnerScaleSetSessionExpiredException",
		fmt.Sprintf("The session identifier %s is not valid.", r.PathValue("sid")))
	return true
}

func (s *Server) ssRefreshSession(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	set := s.setLocked(w, r, st, sc)
	if set == nil || !s.sessionOfLocked(w, r, st, set) {
		return
	}
	set.session.lastPoll = s.now()
	s.newQueueTokenLocked(st, set.session)
	writeJSON(w, http.StatusOK, s.sessionJSONLocked(r, st, set))
}

func (s *Server) ssDeleteSession(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) {
	set := s.setLocked(w, r, st, sc)
	if set == nil || s.sessionGoneOnDelete(w, r, st, set) {
		return
	}
	set.session = nil
	s.broadcastLocked()
	w.WriteHeader(http.StatusNoContent)
}

// queueLocked checks a queue request: service up, scale set and session known, queue token valid.
func (s *Server) queueLocked(w http.ResponseWriter, r *http.Request, st *actionsState) *scaleSetRec {
	id, _ := pathInt(r, "id")
	set := st.sets[id]
	switch {
	case st.down:
		actionsError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "The Actions service is unavailable")
		return nil
	case set == nil:
		actionsError(w, http.StatusNotFound, "RunnerScaleSetNotFoundException", "Runner scale set not found")
		return nil
	}
	if r.PathValue("sid") == "" {
		r.SetPathValue("sid", sessionIDOfToken(set, bearer(r)))
	}
	if !s.sessionOfLocked(w, r, st, set) {
		return nil
	}
	if bearer(r) != set.session.token || !s.now().Before(set.session.tokenExp) {
		actionsError(w, http.StatusUnauthorized, "VssUnauthorizedException", "Message queue token expired or invalid")
		return nil
	}
	return set
}

func sessionIDOfToken(set *scaleSetRec, tok string) string {
	if set.session != nil && set.session.token == tok {
		return set.session.id
	}
	return "-"
}

func (s *Server) ssGetMessage(w http.ResponseWriter, r *http.Request, _ *caller) {
	capacity, err := strconv.Atoi(r.Header.Get("X-ScaleSetMaxCapacity"))
	if err != nil || capacity < 0 {
		actionsError(w, http.StatusBadRequest, "ArgumentException", "X-ScaleSetMaxCapacity must be a non-negative integer")
		return
	}
	last, _ := strconv.ParseInt(r.URL.Query().Get("lastMessageId"), 10, 64)
	s.mu.Lock()
	st := s.actionsLocked()
	timer := time.NewTimer(st.timing.LongPoll)
	defer timer.Stop()
	tick := time.NewTicker(max(min(st.timing.AcquireTimeout, st.timing.StartTimeout)/4, 10*time.Millisecond))
	defer tick.Stop()
	var ss *ssSession
	defer func() {
		if ss != nil {
			s.mu.Lock()
			ss.polling--
			ss.lastPoll = s.now()
			s.mu.Unlock()
		}
	}()
	for {
		set := s.queueLocked(w, r, st)
		if set == nil {
			s.mu.Unlock()
			return
		}
		if ss == nil {
			ss = set.session
			ss.polling++
		}
		if set.session != ss {
			s.mu.Unlock()
			actionsError(w, http.StatusNotFound, "TaskAgentSessionExpiredException", "Session deleted")
			return
		}
		set.capacity, ss.lastPoll = capacity, s.now()
		s.ssRequeueLocked(st)
		if i := slices.IndexFunc(set.msgs, func(m ssMessage) bool { return m.id > last }); i >= 0 {
			b, _ := json.Marshal(set.msgs[i].jobs)
			typ, body := "RunnerScaleSetJobMessages", string(b)
			if raw := set.msgs[i].raw; raw != nil {
				typ, body = raw.typ, raw.body
			}
			stats := s.ssStatsLocked(st, set)
			set.msgs[i].delivered = true
			s.mu.Unlock()
			writeJSON(w, http.StatusOK, map[string]any{"messageId": set.msgs[i].id, "messageType": typ, "body": body, "statistics": stats})
			return
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-tick.C:
		case <-timer.C:
			w.WriteHeader(http.StatusAccepted)
			return
		case <-r.Context().Done():
			return
		}
		s.mu.Lock()
	}
}

func (s *Server) ssDeleteMessage(w http.ResponseWriter, r *http.Request, _ *caller) {
	mid, _ := pathInt(r, "mid")
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.actionsLocked()
	set := s.queueLocked(w, r, st)
	if set == nil {
		return
	}
	i := slices.IndexFunc(set.msgs, func(m ssMessage) bool { return m.id == mid })
	if i < 0 {
		actionsError(w, http.StatusNotFound, "MessageNotFoundException", fmt.Sprintf("Message %d not found", mid))
		return
	}
	set.msgs = slices.Delete(set.msgs, i, i+1)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ssAcquireJobs(w http.ResponseWriter, r *http.Request, _ *caller) {
	var ids []int64
	if !readJSON(w, r, &ids) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.actionsLocked()
	if r.URL.Query().Get("api-version") == "" {
		actionsError(w, http.StatusBadRequest, "VssVersionNotSpecifiedException", "api-version is required")
		return
	}
	set := s.queueLocked(w, r, st)
	if set == nil {
		return
	}
	got := []int64{}
	for _, id := range ids {
		j, ok := st.jobs[id]
		if !ok || j.set != set.id {
			continue
		}
		switch j.state {
		case ssAvailable:
			j.state, j.since = ssAcquired, s.now()
			s.ssPushLocked(set, s.ssJobMessageLocked("JobAssigned", id))
			got = append(got, id)
		case ssAcquired, ssRunning:
			got = append(got, id) // acquiring again is idempotent
		}
	}
	s.broadcastLocked()
	writeJSON(w, http.StatusOK, map[string]any{"count": len(got), "value": got})
}

// maxJobMessages is how many job messages one message carries at most (actions/scaleset README,
// "Autoscaling": "Responses contain at most 50 messages").
const maxJobMessages = 50

// ssPushLocked adds job messages to a scale set's queue: to its last message while that was never
// delivered and has room (the service batches what piles up between two polls), else to new ones.
func (s *Server) ssPushLocked(set *scaleSetRec, ms ...ssJobMessage) {
	for _, m := range ms {
		if n := len(set.msgs); n > 0 && !set.msgs[n-1].delivered && set.msgs[n-1].raw == nil && len(set.msgs[n-1].jobs) < maxJobMessages {
			set.msgs[n-1].jobs = append(set.msgs[n-1].jobs, m)
			continue
		}
		set.nextMsg++
		set.msgs = append(set.msgs, ssMessage{id: set.nextMsg, jobs: []ssJobMessage{m}})
	}
	s.broadcastLocked()
}

func (s *Server) ssJobMessageLocked(typ string, jobID int64) ssJobMessage {
	j := s.jobs[jobID]
	st := s.actionsLocked()
	m := ssJobMessage{
		MessageType: typ, RunnerRequestID: st.requestID(st.jobs[jobID], j.ID), RepositoryName: j.Repo, OwnerName: j.Owner,
		JobID: newUUIDFrom(j.ID), JobWorkflowRef: fmt.Sprintf("%s/%s/.github/workflows/ci.yml@refs/heads/main", j.Owner, j.Repo),
		JobDisplayName: j.Name, WorkflowRunID: j.RunID, EventName: "push", RequestLabels: slices.Clone(j.Labels),
		QueueTime: j.QueuedAt,
	}
	if typ == "JobAvailable" {
		m.AcquireJobURL = fmt.Sprintf("/_apis/runtime/runnerscalesets/%d/acquirejobs", st.jobs[jobID].set)
	}
	if typ != "JobAvailable" {
		m.ScaleSetAssignTime = st.jobs[jobID].since
	}
	if j.RunnerID != 0 {
		m.RunnerID, m.RunnerName, m.RunnerAssignTime = j.RunnerID, j.RunnerName, j.StartedAt
	}
	if j.Status == JobCompleted {
		m.Result, m.FinishTime = j.Conclusion, j.CompletedAt
	}
	return m
}

// ssRequeueLocked offers again the jobs nobody acquired in time, and puts back to available the
// acquired jobs no runner of the scale set took in time.
func (s *Server) ssRequeueLocked(st *actionsState) {
	now := s.now()
	for id, j := range st.jobs {
		set := st.sets[j.set]
		switch {
		case set == nil:
		case set.shape == ShapeAssigned:
			s.ssReassignLocked(st, set, id, j)
		case j.state == ssAvailable && now.Sub(j.since) > st.timing.AcquireTimeout,
			j.state == ssAcquired && now.Sub(j.since) > st.timing.StartTimeout:
			j.state, j.since = ssAvailable, now
			s.ssPushLocked(set, s.ssJobMessageLocked("JobAvailable", id))
		}
	}
}

// QueueScaleSetJob queues a workflow job with runs-on: <scale set name> in owner/repo and returns its
// id (the runner request id of its messages). The scale set must exist in the repository or its
// organisation; it panics otherwise (a test's mistake).
func (s *Server) QueueScaleSetJob(owner, repo string, runID int64, scaleSetName string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.actionsLocked()
	var set *scaleSetRec
	for _, c := range st.sets {
		if strings.EqualFold(c.name, scaleSetName) && c.scope.covers(owner, repo) {
			set = c
		}
	}
	if set == nil {
		panic(fmt.Sprintf("githubfake: no scale set %q for %s/%s", scaleSetName, owner, repo))
	}
	rp := s.ensureRepoLocked(owner, repo)
	j := &jobRec{repo: rp, Job: Job{
		ID: s.newIDLocked(), RunID: runID, RunAttempt: 1, Owner: rp.owner.login, Repo: rp.name, Name: "job",
		Labels: []string{set.name}, Status: JobQueued, QueuedAt: s.now().UTC(),
	}}
	s.jobs[j.ID] = j
	s.queue = append(s.queue, j.ID)
	st.jobs[j.ID] = &ssJob{set: set.id, state: ssAvailable, since: s.now()}
	s.emitLocked(j, "queued")
	if set.shape == ShapeAssigned {
		st.jobs[j.ID].state = ssAcquired // github.com assigns it to the scale set itself
		s.ssPushLocked(set, s.ssJobMessageLocked("JobAssigned", j.ID))
		return j.ID
	}
	s.ssPushLocked(set, s.ssJobMessageLocked("JobAvailable", j.ID))
	return j.ID
}

// ssMayAssignLocked says whether the fake runner protocol may hand job j to runner rr: a scale set's
// job goes only to that scale set's runners once acquired, and a scale set's runners take nothing
// else.
func (s *Server) ssMayAssignLocked(j *jobRec, rr *runnerRec) bool {
	if s.actions == nil {
		return true
	}
	sj, isJob := s.actions.jobs[j.ID]
	set, isRunner := s.actions.runnerSet[rr.id]
	switch {
	case isJob:
		return isRunner && set == sj.set && sj.state == ssAcquired && s.ssRunnerChosenLocked(set, rr)
	case isRunner:
		return false
	}
	return true
}

// ssJobEventLocked follows a scale set job through the fake runner protocol: JobStarted when a
// runner takes it, JobCompleted when it ends.
func (s *Server) ssJobEventLocked(j *jobRec, action string) {
	if s.actions == nil {
		return
	}
	sj, ok := s.actions.jobs[j.ID]
	if !ok || s.actions.sets[sj.set] == nil || sj.state == ssDone {
		return
	}
	switch action {
	case "in_progress":
		sj.state = ssRunning
		s.ssPushLocked(s.actions.sets[sj.set], s.ssJobMessageLocked("JobStarted", j.ID))
	case "completed":
		sj.state = ssDone
		s.ssPushLocked(s.actions.sets[sj.set], s.ssJobMessageLocked("JobCompleted", j.ID))
	}
}

// ScaleSetSession describes a scale set's message session as the service holds it (tests).
type ScaleSetSession struct {
	ID, Owner string
}

// ScaleSetState is a snapshot of a scale set at the service (tests).
type ScaleSetState struct {
	ID          int64
	Name        string
	Labels      []string
	GroupID     int64
	Session     *ScaleSetSession
	MaxCapacity int // the last X-ScaleSetMaxCapacity
	Pending     int // undeleted messages
	Conflicts   int // 409s answered to session creations (all scale sets)
	// DisableUpdate is the scale set's RunnerSetting.disableUpdate.
	DisableUpdate bool
}

// ScaleSet returns a snapshot of the named scale set of a scope ("owner" or "owner/repo").
func (s *Server) ScaleSet(scopeName, name string) (ScaleSetState, bool) {
	owner, repo, _ := strings.Cut(scopeName, "/")
	sc := newScope(owner, repo)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.actionsLocked()
	for _, set := range st.sets {
		if set.scope == sc && strings.EqualFold(set.name, name) {
			s.expireSessionLocked(st, set)
			out := ScaleSetState{ID: set.id, Name: set.name, Labels: slices.Clone(set.labels), GroupID: set.groupID,
				MaxCapacity: set.capacity, Pending: len(set.msgs), Conflicts: st.conflicts, DisableUpdate: set.disableUpdate}
			if set.session != nil {
				out.Session = &ScaleSetSession{ID: set.session.id, Owner: set.session.owner}
			}
			return out, true
		}
	}
	return ScaleSetState{}, false
}

// ScaleSetCount is how many scale sets a scope ("owner" or "owner/repo") has, in all its groups.
func (s *Server) ScaleSetCount(scopeName string) int {
	owner, repo, _ := strings.Cut(scopeName, "/")
	sc := newScope(owner, repo)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, set := range s.actionsLocked().sets {
		if set.scope == sc {
			n++
		}
	}
	return n
}

// InjectScaleSetMessage queues a message of any type and body (a string the service would send as
// the envelope's body) on a scale set's queue: bad input for listener tests. It reports whether the
// scale set exists.
func (s *Server) InjectScaleSetMessage(scopeName, name, messageType, body string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.namedSetLocked(scopeName, name)
	if set == nil {
		return false
	}
	set.nextMsg++
	set.msgs = append(set.msgs, ssMessage{id: set.nextMsg, raw: &rawMessage{typ: messageType, body: body}})
	s.broadcastLocked()
	return true
}

// namedSetLocked finds a scope's ("owner" or "owner/repo") scale set by name, nil when none.
func (s *Server) namedSetLocked(scopeName, name string) *scaleSetRec {
	owner, repo, _ := strings.Cut(scopeName, "/")
	sc := newScope(owner, repo)
	for _, set := range s.actionsLocked().sets {
		if set.scope == sc && strings.EqualFold(set.name, name) {
			return set
		}
	}
	return nil
}

// newUUIDFrom renders a job id as the UUID-shaped job id of the messages.
func newUUIDFrom(id int64) string {
	return fmt.Sprintf("00000000-0000-4000-a000-%012x", id)
}
