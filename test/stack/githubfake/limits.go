// This file holds GitHub's documented REST API limits as the fake enforces them ("Rate limits for the
// REST API", docs.github.com): the primary limit per caller with its x-ratelimit-* headers, the
// secondary limit in points per minute, concurrent requests, and outages (5xx for a window). All are
// off unless set, so unit tests see an unlimited GitHub; the headers are on every REST answer.

package githubfake

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Limits are the REST limits the fake enforces. The zero value enforces none.
type Limits struct {
	// Primary is how many requests one caller (an App installation, the App itself, or the PAT) may
	// make per PrimaryWindow. GitHub: 5,000 an hour for an installation (up to 12,500, or 15,000 on
	// Enterprise Cloud). Past it GitHub answers Status with x-ratelimit-remaining: 0 and
	// x-ratelimit-reset (epoch seconds) until the window resets. 0: unlimited.
	Primary       int
	PrimaryWindow time.Duration // 1 h when zero
	// Points is the secondary limit: points one caller may spend per PointsWindow. GitHub: 900 a
	// minute for REST, where GET, HEAD and OPTIONS cost 1 point and other methods 5. Past it GitHub
	// answers Status with retry-after (seconds). 0: unlimited.
	Points       int
	PointsWindow time.Duration // 1 min when zero
	// Concurrent is how many requests one caller may have in flight (GitHub: 100); the next one gets
	// a secondary limit answer with retry-after: 1. 0: unlimited.
	Concurrent int
	// Status is the status of a limit answer: 403 (the default) or 429; GitHub documents both.
	Status int
}

// DocumentedLimits are GitHub's documented limits for one App installation: 5,000 requests an
// hour, 900 points a minute (GET 1, writes 5), 100 concurrent requests. The bench and the
// contention tests run under them.
var DocumentedLimits = Limits{Primary: 5000, Points: 900, Concurrent: 100}

// Usage is what the REST API served: requests answered and the secondary-limit points they cost,
// and requests refused by a limit or an outage (not charged).
type Usage struct {
	Requests int
	Points   int
	Refused  int
}

// callerUse is one caller's position in its windows.
type callerUse struct {
	primaryStart time.Time
	used         int
	pointsStart  time.Time
	points       int
	inflight     int
}

// SetLimits replaces the limits the fake enforces; the callers' windows start again.
func (s *Server) SetLimits(l Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLimitsLocked(l)
}

func (s *Server) setLimitsLocked(l Limits) {
	if l.PrimaryWindow <= 0 {
		l.PrimaryWindow = time.Hour
	}
	if l.PointsWindow <= 0 {
		l.PointsWindow = time.Minute
	}
	if l.Status != http.StatusTooManyRequests {
		l.Status = http.StatusForbidden
	}
	s.limits = l
	if s.use == nil {
		s.use = map[string]*callerUse{}
	}
	for k, u := range s.use {
		s.use[k] = &callerUse{inflight: u.inflight}
	}
}

// SetOutage makes every REST request fail with 503 for d from now (the runner protocol is not
// affected). d <= 0 ends an outage.
func (s *Server) SetOutage(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outageUntil = s.now().Add(d)
}

// Usage returns what the REST API served since the fake started.
func (s *Server) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// points is what a request costs against the secondary limit.
func points(method string) int {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return 1
	}
	return 5
}

// callerKeyLocked names who a REST request counts against: the installation of its token, the PAT,
// the App (a JWT), or "" for an unauthenticated or unknown credential (not limited).
func (s *Server) callerKeyLocked(r *http.Request) string {
	_, cred, ok := credential(r)
	switch {
	case !ok:
		return ""
	case cred == s.pat:
		return "pat"
	case strings.Count(cred, ".") == 2:
		return "app"
	}
	if t, ok := s.instTokens[cred]; ok {
		return "installation:" + strconv.FormatInt(t.inst.id, 10)
	}
	return ""
}

// refusal is a REST answer a limit, an outage or an injected fault gives instead of the handler's.
type refusal struct {
	status     int
	retryAfter time.Duration // < 0: no retry-after header
	body       apiError
}

// rateState is what the x-ratelimit-* headers of one answer say.
type rateState struct {
	limit, remaining, used int
	reset                  time.Time
}

const rateDocs = "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api"

// admitLocked charges a REST request to its caller, or says why it is refused. It returns the
// caller's rate state for the headers and whether an in-flight slot was taken (release it after).
func (s *Server) admitLocked(r *http.Request, key string) (rateState, *refusal, bool) {
	now := s.now()
	u := s.use[key]
	if u == nil {
		u = &callerUse{}
		s.use[key] = u
	}
	l := s.limits
	window := l.PrimaryWindow
	if u.primaryStart.IsZero() || !now.Before(u.primaryStart.Add(window)) {
		u.primaryStart, u.used = now, 0
	}
	if !now.Before(u.pointsStart.Add(l.PointsWindow)) {
		u.pointsStart, u.points = now, 0
	}
	rs := rateState{limit: 5000, used: u.used, reset: u.primaryStart.Add(window)}
	if l.Primary > 0 {
		rs.limit = l.Primary
	}
	enforced := key != "" && l.Primary > 0
	rs.remaining = rs.limit - u.used
	if !enforced {
		rs.remaining = max(rs.remaining, 1) // an unlimited GitHub never tells a client to stop
	}
	refuse := func(rf *refusal) (rateState, *refusal, bool) {
		s.usage.Refused++
		return rs, rf, false
	}
	if f := s.injectedLocked(); f != nil {
		return refuse(f)
	}
	if now.Before(s.outageUntil) {
		return refuse(&refusal{status: http.StatusServiceUnavailable, retryAfter: -1,
			body: apiError{Message: "Service Unavailable", DocumentationURL: "https://www.githubstatus.com", Status: "503"}})
	}
	if key == "" {
		s.usage.Requests++
		s.usage.Points += points(r.Method)
		return rs, nil, false
	}
	if enforced && u.used >= l.Primary {
		rs.remaining = 0
		return refuse(&refusal{status: l.Status, retryAfter: -1, body: apiError{
			Message:          fmt.Sprintf("API rate limit exceeded for %s.", strings.ReplaceAll(key, ":", " ID ")),
			DocumentationURL: rateDocs + "#about-the-primary-rate-limit", Status: strconv.Itoa(l.Status)}})
	}
	cost := points(r.Method)
	if l.Points > 0 && u.points+cost > l.Points {
		return refuse(secondaryRefusal(l.Status, u.pointsStart.Add(l.PointsWindow).Sub(now)))
	}
	if l.Concurrent > 0 && u.inflight >= l.Concurrent {
		return refuse(secondaryRefusal(l.Status, time.Second))
	}
	u.used++
	u.points += cost
	u.inflight++
	rs.used = u.used
	rs.remaining = rs.limit - u.used
	if !enforced {
		rs.remaining = max(rs.remaining, 1)
	}
	s.usage.Requests++
	s.usage.Points += cost
	return rs, nil, true
}

// releaseLocked gives back the in-flight slot admitLocked took.
func (s *Server) releaseLocked(key string) {
	if u := s.use[key]; u != nil && u.inflight > 0 {
		u.inflight--
	}
}

// injectedLocked serves the one-shot faults of SetSecondaryRateLimit and SetTooManyRequests.
func (s *Server) injectedLocked() *refusal {
	switch {
	case s.secondary.n > 0:
		s.secondary.n--
		return secondaryRefusal(http.StatusForbidden, s.secondary.retryAfter)
	case s.tooMany.n > 0:
		s.tooMany.n--
		return &refusal{status: http.StatusTooManyRequests, retryAfter: max(s.tooMany.retryAfter, 0),
			body: apiError{Message: "Too Many Requests", DocumentationURL: rateDocs, Status: "429"}}
	}
	return nil
}

// secondaryRefusal is GitHub's secondary rate limit answer. go-github recognises a 403 as
// *github.AbuseRateLimitError by the documentation_url's "secondary-rate-limits" suffix.
func secondaryRefusal(status int, retryAfter time.Duration) *refusal {
	return &refusal{status: status, retryAfter: max(retryAfter, 0), body: apiError{
		Message:          "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID.",
		DocumentationURL: rateDocs + "#about-secondary-rate-limits",
		Status:           strconv.Itoa(status),
	}}
}

// writeRateHeaders sets GitHub's x-ratelimit-* headers, which every REST answer carries.
func writeRateHeaders(w http.ResponseWriter, rs rateState) {
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(rs.limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(rs.remaining, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(rs.used))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(rs.reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
	h.Set("X-GitHub-Media-Type", "github.v3; format=json")
}

// writeRefusal writes a limit, outage or fault answer.
func writeRefusal(w http.ResponseWriter, rf *refusal) {
	if rf.retryAfter >= 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(rf.retryAfter.Seconds())), 10))
	}
	writeJSON(w, rf.status, rf.body)
}
