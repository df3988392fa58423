// This file serves the Actions service's runner scale set protocol, the way GitHub's published client
// (github.com/actions/scaleset) and ARC's listener use it:
//
//   - POST /actions/runner-registration ("Authorization: RemoteAuth <registration token>", body
//     {url, runner_event}) answers 201 {url, token}: the service's URL (this fake's /_actions/) and an
//     admin JWT (exp claim; AdminTokenTTL);
//   - under /_actions/, every call with ?api-version and "Authorization: Bearer <admin token>":
//     runner groups, scale sets (create, get by name or id, update, delete; RunnerSetting, such as
//     disableUpdate, kept as written: actions/scaleset types.go RunnerSetting), generatejitconfig,
//     runner removal, sessions (create: 409 while another lives; refresh; delete), acquirejobs
//     (with the session's queue token);
//   - the message queue, /_actions/_queue/{scale set}/{session}/messages: GET long-polls (LongPoll,
//     about 50 s: 200 with a message, 202 when none came) and needs X-ScaleSetMaxCapacity; DELETE
//     .../messages/{id} acknowledges. An expired queue token answers 401, an expired or deleted
//     session 404. A session nobody polls for SessionIdle expires.
//
// The service's answers for sessions it no longer knows, and its error names, as published:
//   - deleting an expired or unknown session answers 400 RunnerScaleSetSessionExpiredException
//     (actions/actions-runner-controller#4285), refreshing one 404 ("session ID that doesn't
//     exist", actions/scaleset#123);
//   - error type names arrive fully qualified, "GitHub.Actions.Runtime.WebApi.<Name>,
//     GitHub.Actions.Runtime.WebApi"; the session conflict is RunnerScaleSetSessionConflictException
//     (the 409 quoted in actions/actions-runner-controller#4285).
//   - a message carries at most 50 job messages (actions/scaleset README, "Autoscaling"): job
//     messages pushed before a message is first delivered join it, up to 50.
//
// Two service shapes, per fake (SetScaleSetShape, for the scale sets created after) or per scale
// set (SetScaleSetShapeOf); see actions_queue_assigned.go:
//   - ShapeAssigned, github.com's (the default): the service assigns each job to the scale set
//     itself (JobAssigned, runnerRequestId 0, identified by jobId), no acquisition; an assignment no
//     runner of the set took within StartTimeout is cancelled (JobCompleted, result canceled) and
//     assigned again, up to 3 times (actions/scaleset README, "Job Reassignment"; about every 5
//     min, actions/actions-runner-controller#4602; runnerRequestId 0: cloudbase/garm#459);
//   - ShapeAvailable, GHES versions that still need acquisition (actions/scaleset#75, #90): a job
//     offered (JobAvailable) and not acquired within AcquireTimeout is offered again; one acquired
//     (JobAssigned) that no runner of the scale set takes within StartTimeout goes back to
//     available and is offered again.
//
// Tests queue scale set jobs with QueueScaleSetJob. Runners of a scale set (from its
// generatejitconfig) take only its assigned (acquired) jobs, through the fake runner protocol
// (JobStarted, JobCompleted). SetActionsServiceDown makes the whole service answer 503.

package githubfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ScaleSetTiming sets the Actions service's clocks; zero fields keep the defaults.
type ScaleSetTiming struct {
	LongPoll       time.Duration // GetMessage's long poll (50 s)
	AdminTokenTTL  time.Duration // admin JWTs (1 h)
	QueueTokenTTL  time.Duration // message queue tokens (1 h)
	SessionIdle    time.Duration // a session nobody polls this long expires (2 min)
	AcquireTimeout time.Duration // an offered job is offered again after this (1 min)
	StartTimeout   time.Duration // an acquired job no runner took goes back to available (5 min)
}

func (t ScaleSetTiming) withDefaults() ScaleSetTiming {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.LongPoll, 50*time.Second)
	def(&t.AdminTokenTTL, time.Hour)
	def(&t.QueueTokenTTL, time.Hour)
	def(&t.SessionIdle, 2*time.Minute)
	def(&t.AcquireTimeout, time.Minute)
	def(&t.StartTimeout, 5*time.Minute)
	return t
}

// Scale set job states.
const (
	ssAvailable = "available"
	ssAcquired  = "acquired"
	ssRunning   = "running"
	ssDone      = "done"
)

type actionsState struct {
	timing      ScaleSetTiming
	shape       ScaleSetShape // of the scale sets created from now
	down        bool
	adminTokens map[string]expiring // admin JWT -> scope
	sets        map[int64]*scaleSetRec
	runnerSet   map[int64]int64 // runner id -> scale set id
	jobs        map[int64]*ssJob
	conflicts   int
}

type expiring struct {
	scope   scope
	expires time.Time
}

type scaleSetRec struct {
	id        int64
	name      string
	scope     scope
	groupID   int64
	groupName string
	labels    []string
	created   time.Time
	session   *ssSession
	msgs      []ssMessage // undeleted, by id
	nextMsg   int64
	capacity  int // last X-ScaleSetMaxCapacity
	shape     ScaleSetShape
	// disableUpdate is the scale set's RunnerSetting.disableUpdate, kept as written.
	disableUpdate bool
}

type ssSession struct {
	id, owner string
	token     string
	tokenExp  time.Time
	lastPoll  time.Time
	polling   int
}

type ssMessage struct {
	id        int64
	jobs      []ssJobMessage
	delivered bool // returned by a GetMessage: job messages pushed later go to a new message
	// raw, when set, replaces the message's type and body (InjectScaleSetMessage).
	raw *rawMessage
}

type rawMessage struct{ typ, body string }

type ssJob struct {
	set   int64
	state string
	since time.Time
	// reassigned counts the assignments cancelled because no runner took the job (assigned shape).
	reassigned int
}

// ssJobMessage is a job message as the service sends it (the fake's own copy of the shape).
type ssJobMessage struct {
	MessageType        string    `json:"messageType"`
	RunnerRequestID    int64     `json:"runnerRequestId"`
	RepositoryName     string    `json:"repositoryName"`
	OwnerName          string    `json:"ownerName"`
	JobID              string    `json:"jobId"`
	JobWorkflowRef     string    `json:"jobWorkflowRef"`
	JobDisplayName     string    `json:"jobDisplayName"`
	WorkflowRunID      int64     `json:"workflowRunId"`
	EventName          string    `json:"eventName"`
	RequestLabels      []string  `json:"requestLabels"`
	QueueTime          time.Time `json:"queueTime"`
	ScaleSetAssignTime time.Time `json:"scaleSetAssignTime"`
	RunnerAssignTime   time.Time `json:"runnerAssignTime"`
	FinishTime         time.Time `json:"finishTime"`
	AcquireJobURL      string    `json:"acquireJobUrl,omitempty"`
	RunnerID           int64     `json:"runnerId,omitempty"`
	RunnerName         string    `json:"runnerName,omitempty"`
	Result             string    `json:"result,omitempty"`
}

// actionsLocked returns the Actions service's state, created on first use. s.mu must be held.
func (s *Server) actionsLocked() *actionsState {
	if s.actions == nil {
		s.actions = &actionsState{
			timing: ScaleSetTiming{}.withDefaults(), shape: ShapeAssigned, adminTokens: map[string]expiring{},
			sets: map[int64]*scaleSetRec{}, runnerSet: map[int64]int64{}, jobs: map[int64]*ssJob{},
		}
	}
	return s.actions
}

// SetScaleSetTiming changes the Actions service's clocks (tests scale them down).
func (s *Server) SetScaleSetTiming(t ScaleSetTiming) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actionsLocked().timing = t.withDefaults()
	s.broadcastLocked()
}

// SetActionsServiceDown makes every Actions-service call (and the registration exchange) answer
// 503 while down is true; long polls in progress end with 503 too.
func (s *Server) SetActionsServiceDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actionsLocked().down = down
	s.broadcastLocked()
}

func (s *Server) actionsRoutes() {
	s.handle("POST /actions/runner-registration", authNone, s.runnerRegistration)
	a := "/_actions/_apis/runtime/"
	s.handle("GET "+a+"runnergroups/", authNone, s.actionsAdmin(s.ssListGroups))
	s.handle("GET "+a+"runnerscalesets", authNone, s.actionsAdmin(s.ssList))
	s.handle("POST "+a+"runnerscalesets", authNone, s.actionsAdmin(s.ssCreate))
	s.handle("GET "+a+"runnerscalesets/{id}", authNone, s.actionsAdmin(s.ssGet))
	s.handle("PATCH "+a+"runnerscalesets/{id}", authNone, s.actionsAdmin(s.ssUpdate))
	s.handle("DELETE "+a+"runnerscalesets/{id}", authNone, s.actionsAdmin(s.ssDelete))
	s.handle("POST "+a+"runnerscalesets/{id}/generatejitconfig", authNone, s.actionsAdmin(s.ssGenerateJIT))
	s.handle("POST "+a+"runnerscalesets/{id}/sessions", authNone, s.actionsAdmin(s.ssCreateSession))
	s.handle("PATCH "+a+"runnerscalesets/{id}/sessions/{sid}", authNone, s.actionsAdmin(s.ssRefreshSession))
	s.handle("DELETE "+a+"runnerscalesets/{id}/sessions/{sid}", authNone, s.actionsAdmin(s.ssDeleteSession))
	s.handle("POST "+a+"runnerscalesets/{id}/acquirejobs", authNone, s.ssAcquireJobs)
	s.handle("DELETE /_actions/_apis/distributedtask/pools/0/agents/{rid}", authNone, s.actionsAdmin(s.ssRemoveRunner))
	s.handle("GET /_actions/_queue/{id}/{sid}/messages", authNone, s.ssGetMessage)
	s.handle("DELETE /_actions/_queue/{id}/{sid}/messages/{mid}", authNone, s.ssDeleteMessage)
}

// actionsError writes the service's error shape: {typeName, message}, the type name fully
// qualified as the service sends it ("GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException,
// GitHub.Actions.Runtime.WebApi", actions/actions-runner-controller#4285).
func actionsError(w http.ResponseWriter, status int, typeName, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if !strings.Contains(typeName, ".") {
		typeName = "GitHub.Actions.Runtime.WebApi." + typeName + ", GitHub.Actions.Runtime.WebApi"
	}
	b, _ := json.Marshal(map[string]string{"typeName": typeName, "message": msg})
	_, _ = w.Write(b)
}

func bearer(r *http.Request) string {
	v, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return v
}

// fakeJWT builds an unsigned-looking JWT whose payload carries exp: clients read exp, never verify.
func fakeJWT(exp time.Time, sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	p, _ := json.Marshal(map[string]any{"exp": exp.Unix(), "sub": sub, "jti": randomString(16, alnum)})
	return enc(h) + "." + enc(p) + "." + enc([]byte(randomString(32, alnum)))
}

func (s *Server) runnerRegistration(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req struct {
		URL         string `json:"url"`
		RunnerEvent string `json:"runner_event"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "RemoteAuth ")
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.actionsLocked()
	t, known := s.runnerTokens[tok]
	switch {
	case st.down:
		writeError(w, http.StatusServiceUnavailable, "Service Unavailable")
		return
	case !ok || !known || t.purpose != purposeRegister || !s.now().Before(t.expires):
		writeError(w, http.StatusUnauthorized, "Bad credentials: want RemoteAuth <registration token>")
		return
	case req.RunnerEvent != "register":
		writeError(w, http.StatusUnprocessableEntity, "Invalid request: runner_event must be register")
		return
	}
	sc, err := scopeFromURL(req.URL)
	if err != nil || sc != t.scope {
		writeError(w, http.StatusForbidden, fmt.Sprintf("The registration token is for %s, not for url %q", t.scope, req.URL))
		return
	}
	jwt := fakeJWT(s.now().Add(st.timing.AdminTokenTTL), sc.String())
	st.adminTokens[jwt] = expiring{scope: sc, expires: s.now().Add(st.timing.AdminTokenTTL)}
	writeJSON(w, http.StatusCreated, map[string]string{"url": tenantURL(r), "token": jwt})
}

func tenantURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/_actions/"
}

type actionsHandler func(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope)

// actionsAdmin checks the service is up, the api-version and the admin token, then runs h under s.mu.
func (s *Server) actionsAdmin(h actionsHandler) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ *caller) {
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.actionsLocked()
		t, ok := st.adminTokens[bearer(r)]
		switch {
		case st.down:
			actionsError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "The Actions service is unavailable")
		case r.URL.Query().Get("api-version") == "":
			actionsError(w, http.StatusBadRequest, "VssVersionNotSpecifiedException", "api-version is required")
		case !ok || !s.now().Before(t.expires):
			actionsError(w, http.StatusUnauthorized, "VssUnauthorizedException", "Bad or expired admin token")
		default:
			s.ssRequeueLocked(st)
			h(w, r, st, t.scope)
		}
	}
}

// setLocked finds the {id} scale set of the request in the caller's scope, or writes 404.
func (s *Server) setLocked(w http.ResponseWriter, r *http.Request, st *actionsState, sc scope) *scaleSetRec {
	id, _ := pathInt(r, "id")
	set, ok := st.sets[id]
	if !ok || set.scope != sc {
		actionsError(w, http.StatusNotFound, "RunnerScaleSetNotFoundException", fmt.Sprintf("Runner scale set %s not found", r.PathValue("id")))
		return nil
	}
	return set
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		actionsError(w, http.StatusBadRequest, "ArgumentException", "Invalid body: "+err.Error())
		return false
	}
	return true
}
