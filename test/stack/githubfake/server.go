// This file holds the Server itself: construction, routing, the middleware every request goes through
// (recover, /api/v3 prefix, call counting, injected faults, authentication) and the test-side inspection
// and fault methods.

package githubfake

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Now is the fake's clock for token expiry and timestamps; time.Now when nil. App JWTs are checked
	// against the wall clock regardless, because their clients sign them with it.
	Now func() time.Time
	// Logger receives request and delivery logs; discarded when nil.
	Logger *slog.Logger
	// AppID is the GitHub App id App JWTs must carry as iss; 1 when zero.
	AppID int64
	// AppPrivateKeyPEM is the App's RSA private key (PKCS#1 or PKCS#8 PEM). When nil the fake generates a
	// key pair and exposes the private half through AppPrivateKeyPEM. New panics on an unusable key.
	AppPrivateKeyPEM []byte
	// Webhook, when set, receives workflow_job events (queued, in_progress, completed) for jobs queued
	// with QueueJob, delivered in order by one background goroutine that Close stops.
	Webhook *WebhookSender
}

// Server is the fake GitHub. It implements http.Handler; every method is safe for concurrent use.
type Server struct {
	now    func() time.Time
	log    *slog.Logger
	appID  int64
	keyPEM []byte
	pub    *rsa.PublicKey
	pat    string
	// patScopes are the classic scopes of the PAT (X-OAuth-Scopes); nil: defaultPATScopes.
	patScopes []string
	mux       *http.ServeMux
	hooks     *webhookQueue // nil without Options.Webhook

	mu          sync.Mutex
	closed      bool
	changed     chan struct{} // closed and replaced on every change a long poll may wait for
	calls       map[string]int
	secondary   fault
	tooMany     fault
	limits      Limits                // limits.go
	use         map[string]*callerUse // by caller key
	usage       Usage
	outageUntil time.Time

	owners        map[string]*ownerRec // key: lower-case login
	repos         map[string]*repoRec  // key: lower-case "owner/repo"
	installations map[int64]*installationRec
	instByOwner   map[string]int64
	instTokens    map[string]*installationToken
	runnerTokens  map[string]*runnerToken // registration and remove tokens
	minted        []Mint                  // every runner credential handed out (minted.go)
	runners       map[int64]*runnerRec
	listingSkips  func(Runner) bool // runners.go: SkipInListings
	credentials   map[string]int64  // runner credential -> runner id, kept after the runner is deleted
	labelIDs      map[string]int64  // lower-case label name -> id
	groups        map[string][]*groupRec
	jobs          map[int64]*jobRec
	queue         []int64 // queued job ids, oldest first
	cancelled     []CancelledRun
	reruns        []Rerun
	runs          map[int64]*runRec // workflow runs started with StartRun (runs.go)
	nextID        int64
	actions       *actionsState // the Actions service's scale sets (actions.go), created on first use

	releases          []runnerversion.Release // runner releases published (runner_versions.go); nil: the default
	versionRefusals   int                     // registrations and job polls refused for the runner's version
	publicReleasesOff bool                    // actions/runner's public releases answer 404 (runner_versions.go)
	enterprises       map[string]bool         // enterprise slugs known, lower-case (enterprise.go)
}

type fault struct {
	n          int
	retryAfter time.Duration
}

// New builds a fake GitHub. See the package documentation for how to point clients at it.
func New(opts Options) *Server {
	s := &Server{
		now:           opts.Now,
		log:           opts.Logger,
		appID:         opts.AppID,
		changed:       make(chan struct{}),
		calls:         map[string]int{},
		owners:        map[string]*ownerRec{},
		repos:         map[string]*repoRec{},
		installations: map[int64]*installationRec{},
		instByOwner:   map[string]int64{},
		instTokens:    map[string]*installationToken{},
		runnerTokens:  map[string]*runnerToken{},
		runners:       map[int64]*runnerRec{},
		credentials:   map[string]int64{},
		labelIDs:      map[string]int64{},
		groups:        map[string][]*groupRec{},
		jobs:          map[int64]*jobRec{},
		nextID:        100,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.appID == 0 {
		s.appID = 1
	}
	s.setLimitsLocked(Limits{})
	key, keyPEM, err := appKey(opts.AppPrivateKeyPEM)
	if err != nil {
		panic(fmt.Sprintf("githubfake: Options.AppPrivateKeyPEM: %v", err))
	}
	s.keyPEM, s.pub = keyPEM, &key.PublicKey
	s.pat = "ghp_" + randomString(36, alnum)
	if opts.Webhook != nil {
		s.hooks = newWebhookQueue(opts.Webhook, s.log)
	}
	s.routes()
	return s
}

// appKey parses the App key, or generates one when none is given.
func appKey(p []byte) (*rsa.PrivateKey, []byte, error) {
	if p == nil {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, nil, fmt.Errorf("generating key: %w", err)
		}
		return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
	}
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, nil, errors.New("no PEM block")
	}
	if key, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return key, p, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing private key: %w", err)
	}
	key, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("want an RSA key, got %T", k)
	}
	return key, p, nil
}

// Close wakes every long poll (they answer 503) and stops webhook delivery. It does not close any
// listener: whoever serves the handler owns that. Close is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.broadcastLocked()
	s.mu.Unlock()
	if s.hooks != nil {
		s.hooks.close()
	}
}

// AppPrivateKeyPEM returns the App's private key (the one given in Options or the generated one).
func (s *Server) AppPrivateKeyPEM() []byte { return slices.Clone(s.keyPEM) }

// AppID returns the App id App JWTs must carry as iss.
func (s *Server) AppID() int64 { return s.appID }

// PAT returns a personal access token the fake accepts for every owner and repository.
func (s *Server) PAT() string { return s.pat }

// AddInstallation installs the App on an organization or user and returns the installation id. It is
// idempotent: the same owner gets the same id. Repositories of the owner are created on demand.
func (s *Server) AddInstallation(owner string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ensureOwnerLocked(owner)
	if id, ok := s.instByOwner[o.key]; ok {
		return id
	}
	id := s.newIDLocked()
	s.installations[id] = &installationRec{id: id, owner: o, created: s.now().UTC()}
	s.instByOwner[o.key] = id
	return id
}

// SetSecondaryRateLimit makes the next n REST requests fail with 403 and GitHub's secondary rate limit
// message, with Retry-After set to retryAfter (rounded up to whole seconds). n = 0 clears the fault.
func (s *Server) SetSecondaryRateLimit(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secondary = fault{n: max(n, 0), retryAfter: retryAfter}
}

// SetTooManyRequests makes the next n REST requests fail with 429 and Retry-After. n = 0 clears it.
// When both faults are set, the secondary rate limit is served first.
func (s *Server) SetTooManyRequests(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tooMany = fault{n: max(n, 0), retryAfter: retryAfter}
}

// Calls returns how many requests each operation received, keyed by method and route pattern, for
// example "POST /repos/{owner}/{repo}/actions/runners/registration-token". Requests that matched no route
// are counted as "UNMATCHED <method> <path>". Requests refused by an injected fault are counted too.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

// CancelledRuns returns the workflow runs cancelled through the API, oldest first.
func (s *Server) CancelledRuns() []CancelledRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cancelled)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("githubfake: handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
			writeError(w, http.StatusInternalServerError, "Server Error")
		}
	}()
	if p, ok := strings.CutPrefix(r.URL.Path, "/api/v3"); ok && (p == "" || p[0] == '/') {
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = p, ""
		r = r2.WithContext(context.WithValue(r2.Context(), prefixKey{}, "/api/v3"))
	}
	s.mux.ServeHTTP(w, r)
}

type prefixKey struct{}

// authKind says which credential a route takes.
type authKind int

const (
	authApp    authKind = iota // App JWT
	authToken                  // installation token or PAT
	authRunner                 // runner credential (fake runner protocol)
	authNone                   // the fake runner's register call: the body carries the credential
	authPublic                 // a public repository's REST route: any valid token, or none
)

// caller is who made an authenticated REST request.
type caller struct {
	pat   bool
	inst  *installationRec
	repos map[string]bool // lower-case repository names the installation token is limited to; nil = all
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, c *caller)

func (s *Server) handle(pattern string, kind authKind, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		rest := kind != authRunner && kind != authNone
		s.mu.Lock()
		s.calls[r.Pattern]++
		var rs rateState
		var rf *refusal
		var key string
		var held bool
		if rest {
			key = s.callerKeyLocked(r)
			rs, rf, held = s.admitLocked(r, key)
		}
		s.mu.Unlock()
		if held {
			defer func() {
				s.mu.Lock()
				s.releaseLocked(key)
				s.mu.Unlock()
			}()
		}
		s.log.Debug("githubfake: request", "op", r.Pattern, "path", r.URL.Path)
		if rest {
			writeRateHeaders(w, rs)
		}
		if rf != nil {
			writeRefusal(w, rf)
			return
		}
		var c *caller
		switch kind {
		case authApp:
			if err := s.verifyAppJWT(r); err != nil {
				s.log.Info("githubfake: refused App credentials", "op", r.Pattern, "reason", err)
				writeError(w, http.StatusUnauthorized, "Bad credentials")
				return
			}
		case authPublic:
			if _, _, ok := credential(r); ok {
				var err error
				if c, err = s.tokenCaller(r); err != nil {
					writeError(w, http.StatusUnauthorized, "Bad credentials")
					return
				}
			}
		case authToken:
			var err error
			if c, err = s.tokenCaller(r); err != nil {
				s.log.Info("githubfake: refused token", "op", r.Pattern, "reason", err)
				writeError(w, http.StatusUnauthorized, "Bad credentials")
				return
			}
			if !c.allowed(r.PathValue("owner")+r.PathValue("org"), r.PathValue("repo")) {
				writeError(w, http.StatusForbidden, "Resource not accessible by integration")
				return
			}
			if s.refusedPermission(w, r, c) { // permissions.go
				return
			}
		}
		h(w, r, c)
	})
}

func (c *caller) allowed(owner, repo string) bool {
	if c.pat || owner == "" {
		return true
	}
	if !strings.EqualFold(c.inst.owner.login, owner) {
		return false
	}
	return repo == "" || c.repos == nil || c.repos[strings.ToLower(repo)]
}

// credential returns the scheme and credential of an "Authorization: token X" or "Bearer X" header.
func credential(r *http.Request) (scheme, cred string, ok bool) {
	scheme, cred, ok = strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	cred = strings.TrimSpace(cred)
	if !ok || cred == "" || (!strings.EqualFold(scheme, "token") && !strings.EqualFold(scheme, "bearer")) {
		return "", "", false
	}
	return scheme, cred, true
}

func (s *Server) tokenCaller(r *http.Request) (*caller, error) {
	_, cred, ok := credential(r)
	if !ok {
		return nil, errors.New("no token or bearer credential")
	}
	if cred == s.pat {
		return &caller{pat: true}, nil
	}
	if strings.Count(cred, ".") == 2 {
		return nil, errors.New("an App JWT cannot be used here: exchange it for an installation token")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.instTokens[cred]
	if !ok {
		return nil, errors.New("unknown token")
	}
	if !s.now().Before(t.expires) {
		return nil, errors.New("installation token expired")
	}
	return &caller{inst: t.inst, repos: t.repos}, nil
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls["UNMATCHED "+r.Method+" "+r.URL.Path]++
		s.mu.Unlock()
		s.log.Info("githubfake: no such route", "method", r.Method, "path", r.URL.Path)
		writeError(w, http.StatusNotFound, "Not Found")
	})

	// GitHub App.
	s.handle("GET /app", authApp, s.getApp)
	s.handle("GET /app/installations", authApp, s.listInstallations)
	s.handle("GET /app/installations/{installation_id}", authApp, s.getInstallation)
	s.handle("POST /app/installations/{installation_id}/access_tokens", authApp, s.createInstallationToken)
	s.handle("GET /repos/{owner}/{repo}/installation", authApp, s.findInstallation)
	s.handle("GET /orgs/{org}/installation", authApp, s.findInstallation)
	s.handle("GET /users/{username}/installation", authApp, s.findInstallation)

	// Self-hosted runners, repository and organization level.
	for _, p := range []string{"/repos/{owner}/{repo}", "/orgs/{org}"} {
		s.handle("POST "+p+"/actions/runners/registration-token", authToken, s.createRunnerToken(purposeRegister))
		s.handle("POST "+p+"/actions/runners/remove-token", authToken, s.createRunnerToken(purposeRemove))
		s.handle("POST "+p+"/actions/runners/generate-jitconfig", authToken, s.generateJITConfig)
		s.handle("GET "+p+"/actions/runners", authToken, s.listRunners)
		s.handle("GET "+p+"/actions/runners/{runner_id}", authToken, s.getRunner)
		s.handle("DELETE "+p+"/actions/runners/{runner_id}", authToken, s.deleteRunner)
		s.handle("GET "+p+"/actions/runners/{runner_id}/labels", authToken, s.runnerLabels(labelsGet))
		s.handle("POST "+p+"/actions/runners/{runner_id}/labels", authToken, s.runnerLabels(labelsAdd))
		s.handle("PUT "+p+"/actions/runners/{runner_id}/labels", authToken, s.runnerLabels(labelsSet))
		s.handle("DELETE "+p+"/actions/runners/{runner_id}/labels", authToken, s.runnerLabels(labelsClear))
		s.handle("DELETE "+p+"/actions/runners/{runner_id}/labels/{name}", authToken, s.runnerLabels(labelsRemove))
	}

	// Runner groups.
	s.handle("GET /orgs/{org}/actions/runner-groups", authToken, s.listGroups)
	s.handle("POST /orgs/{org}/actions/runner-groups", authToken, s.createGroup)
	s.handle("GET /orgs/{org}/actions/runner-groups/{group_id}", authToken, s.getGroup)
	s.handle("DELETE /orgs/{org}/actions/runner-groups/{group_id}", authToken, s.deleteGroup)
	s.handle("GET /orgs/{org}/actions/runner-groups/{group_id}/runners", authToken, s.listGroupRunners)

	// The repository (repos.go).
	s.handle("GET /repos/{owner}/{repo}", authToken, s.getRepository)

	// Workflow runs and jobs.
	s.handle("POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel", authToken, s.cancelRun)
	s.handle("POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs", authToken, s.rerunFailedJobs)
	s.handle("POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun", authToken, s.rerunRun)
	s.handle("POST /repos/{owner}/{repo}/actions/jobs/{job_id}/rerun", authToken, s.rerunJob)
	s.handle("GET /repos/{owner}/{repo}/actions/jobs/{job_id}", authToken, s.getJob)

	// The Actions service's scale set protocol (actions.go).
	s.actionsRoutes()

	s.runnerVersionRoutes() // runner_versions.go
	s.enterpriseRoutes()    // enterprise.go

	// The fake runner protocol.
	s.handle("POST /_runner/register", authNone, s.runnerRegister)
	s.handle("POST /_runner/connect", authRunner, s.runnerConnect)
	s.handle("POST /_runner/jobs/next", authRunner, s.runnerNextJob)
	s.handle("POST /_runner/jobs/{job_id}/complete", authRunner, s.runnerComplete)
	s.handle("POST /_runner/disconnect", authRunner, s.runnerDisconnect)
	s.handle("POST /_runner/deregister", authRunner, s.runnerDeregister)
}

// apiError is GitHub's error body.
type apiError struct {
	Message          string `json:"message"`
	DocumentationURL string `json:"documentation_url"`
	Status           string `json:"status,omitempty"`
	ErrorKind        string `json:"errorKind,omitempty"` // the broker's BrokerError.errorKind (runner_versions.go)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Message: msg, DocumentationURL: "https://docs.github.com/rest", Status: strconv.Itoa(status)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"message":"Server Error","documentation_url":"https://docs.github.com/rest"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

const maxBody = 1 << 20

// decodeBody decodes a JSON request body strictly: unknown fields, trailing data and bodies over 1 MiB are
// refused. An empty body or "null" leaves v untouched. On failure it has written a 400 or 422.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "Problems reading the request body: "+err.Error())
		return false
	}
	if len(b) > maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, "Request body too large")
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return true
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) || strings.Contains(err.Error(), "unknown field") {
			writeError(w, http.StatusUnprocessableEntity, "Invalid request: "+err.Error())
		} else {
			writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		}
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON: trailing data after the JSON value")
		return false
	}
	return true
}

func pathInt(r *http.Request, name string) (int64, bool) {
	v, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	return v, err == nil && v > 0
}

// apiBase is the URL clients reach the fake on, for the URLs inside responses.
func apiBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	prefix, _ := r.Context().Value(prefixKey{}).(string)
	return scheme + "://" + r.Host + prefix
}

// paginate applies GitHub's per_page (default 30, at most 100) and page (from 1) parameters and sets a
// Link header go-github understands.
func paginate[T any](w http.ResponseWriter, r *http.Request, items []T) ([]T, bool) {
	q := r.URL.Query()
	perPage, page := 30, 1
	for name, dst := range map[string]*int{"per_page": &perPage, "page": &page} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid %s parameter %q", name, v))
				return nil, false
			}
			*dst = n
		}
	}
	perPage = min(perPage, 100)
	last := max((len(items)+perPage-1)/perPage, 1)
	var links []string
	link := func(p int, rel string) {
		q.Set("page", strconv.Itoa(p))
		q.Set("per_page", strconv.Itoa(perPage))
		links = append(links, fmt.Sprintf(`<%s%s?%s>; rel="%s"`, apiBase(r), r.URL.Path, q.Encode(), rel))
	}
	if page < last {
		link(page+1, "next")
		link(last, "last")
	}
	if page > 1 {
		link(1, "first")
		link(min(page-1, last), "prev")
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	start := min((page-1)*perPage, len(items))
	return items[start:min(start+perPage, len(items))], true
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func randomString(n int, alphabet string) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func (s *Server) newIDLocked() int64 {
	s.nextID++
	return s.nextID
}

// broadcastLocked wakes every long poll so it re-examines the state.
func (s *Server) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}
