// Package auth authenticates workflow callers of the reconciler API with their GitHub Actions OIDC
// token and decides what they may touch.
//
// A token is verified against the configured issuer (github.com's
// https://token.actions.githubusercontent.com, a GHES host's /_services/token, or the local issuer):
// discovery and the key set (JWKS, cached; refetched for an unknown key id at most once per
// RefetchInterval, see keys.go), RS256 signature, issuer, expiry, and the deployment's audience. Its claims then give the caller's
// identity: repository, repository id and owner, run id and attempt, and the event that started the
// run (event_name), which decides the run's trust level (pool.TrustedEvent). GitHub sends the ids
// as strings; numbers are accepted too.
//
// Rejections are typed (*Error) with the HTTP status the API answers: 401 when the token is missing
// or not valid for this deployment (the caller is not authenticated), 403 when a valid token may
// not do what it asks (repository not allowed, another repository's or another run's provision),
// 503 only while the issuer was never reached (no discovery document or no key set yet: nothing can
// be verified). A token that is malformed, names another issuer, or does not verify against the
// key set held is a 401 whether the issuer answers or not.
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// Identity is who a verified token says the caller is.
type Identity struct {
	Repository      string // owner/name as the token names it
	RepositoryID    string
	RepositoryOwner string
	RunID           string
	RunAttempt      int
	// Event is the token's event_name claim, "the name of the event that triggered the workflow
	// run" (https://docs.github.com/en/actions/reference/security/oidc): "push", "pull_request",
	// ... Empty when the token has none, which pool.TrustedEvent treats as untrusted.
	Event string
	// Ref and BaseRef are the token's ref ("refs/heads/main", "refs/pull/7/merge") and base_ref
	// (a pull request's base branch, "main"; empty otherwise) claims: the run's cache scope
	// (cache.ScopeOf). Empty when the token has none, or one that is not a plain ref: a run
	// without a ref gets no cache of ours (the runner's cache server forwards to GitHub's).
	Ref, BaseRef string
	Subject      string
	Expiry       time.Time
}

// Error is a rejected request. Status is 401, 403 or 503 (the issuer could not be reached).
type Error struct {
	Status int
	Code   string // apiv1.Code*
	Msg    string
	Err    error // the verifier's error behind a 401, for logs
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func unauthorized(code, msg string, err error) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: code, Msg: msg, Err: err}
}

func forbidden(code, msg string) *Error {
	return &Error{Status: http.StatusForbidden, Code: code, Msg: msg}
}

// Config configures a Verifier.
type Config struct {
	// Issuer is the OIDC issuer URL, exactly as it appears in the tokens' iss claim.
	Issuer string
	// Audience is the aud every token must carry.
	Audience string
	// Allowed lists repositories ("owner/repo") and owners ("owner"); case-insensitive.
	Allowed []string
	// HTTPClient fetches discovery and keys (default: 10 s timeout).
	HTTPClient *http.Client
	// RefetchInterval is the least time between two fetches of the key set caused by a token
	// naming a key id the cached set lacks (default DefaultRefetchInterval).
	RefetchInterval time.Duration
	// Now is the clock of the expiry check (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Verifier verifies tokens. Discovery happens on first use (and is retried, at most once a second,
// until it succeeds), so the reconciler starts even while the issuer is briefly unreachable.
type Verifier struct {
	cfg     Config
	allowed []string
	log     *slog.Logger

	mu        sync.Mutex
	verifier  *oidc.IDTokenVerifier
	keys      *keySet
	flight    *discovery // the discovery under way, nil when none
	lastTry   time.Time
	lastError error
}

// discoveryRetry is the least time between two discovery attempts.
const discoveryRetry = time.Second

// New checks the configuration and returns a Verifier.
func New(cfg Config) (*Verifier, error) {
	var errs []error
	if cfg.Issuer == "" {
		errs = append(errs, errors.New("issuer is required"))
	}
	if cfg.Audience == "" {
		errs = append(errs, errors.New("audience is required"))
	}
	if len(cfg.Allowed) == 0 {
		errs = append(errs, errors.New("at least one allowed repository or owner is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("oidc verifier: %w", err)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RefetchInterval <= 0 {
		cfg.RefetchInterval = DefaultRefetchInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	v := &Verifier{cfg: cfg, log: cfg.Logger}
	for _, a := range cfg.Allowed {
		v.allowed = append(v.allowed, strings.ToLower(strings.TrimSpace(a)))
	}
	return v, nil
}

// idVerifier returns the go-oidc verifier and the key set, running discovery if it has not
// succeeded yet. Discovery runs once at a time on its own deadline, outside the mutex: a caller
// waits for it within its own context, and a caller that gives up (a readiness probe's short
// timeout) neither cancels it for the others nor holds them up.
func (v *Verifier) idVerifier(ctx context.Context) (*oidc.IDTokenVerifier, *keySet, error) {
	v.mu.Lock()
	if v.verifier != nil {
		defer v.mu.Unlock()
		return v.verifier, v.keys, nil
	}
	f := v.flight
	if f == nil {
		if v.lastError != nil && time.Since(v.lastTry) < discoveryRetry {
			defer v.mu.Unlock()
			return nil, nil, v.lastError
		}
		f = &discovery{done: make(chan struct{})}
		v.flight, v.lastTry = f, time.Now()
		go v.discover(f)
	}
	v.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("oidc discovery of %s: still running: %w", v.cfg.Issuer, ctx.Err())
	}
	if f.err != nil {
		return nil, nil, f.err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.verifier, v.keys, nil
}

// discovery is one discovery attempt callers wait for.
type discovery struct {
	done chan struct{}
	err  error
}

// discoveryTimeout bounds one discovery attempt (the issuer's document, not the key set).
const discoveryTimeout = 30 * time.Second

// discover runs one discovery attempt and publishes its outcome.
func (v *Verifier) discover(f *discovery) {
	ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
	defer cancel()
	var verifier *oidc.IDTokenVerifier
	var keys *keySet
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, v.cfg.HTTPClient), v.cfg.Issuer)
	if err != nil {
		err = fmt.Errorf("oidc discovery of %s: %w", v.cfg.Issuer, err)
	} else {
		var doc struct {
			JWKSURL string `json:"jwks_uri"`
		}
		if cerr := p.Claims(&doc); cerr != nil || doc.JWKSURL == "" {
			err = fmt.Errorf("oidc discovery of %s: no jwks_uri", v.cfg.Issuer)
		} else {
			keys = newKeySet(doc.JWKSURL, v.cfg.HTTPClient, v.cfg.Now, v.cfg.RefetchInterval, v.log)
			// The key set is ours (refetched on a budget); the audience is checked below, with an
			// error of its own; everything else by go-oidc.
			verifier = oidc.NewVerifier(v.cfg.Issuer, keys, &oidc.Config{
				SkipClientIDCheck:    true,
				SupportedSigningAlgs: []string{oidc.RS256},
				Now:                  v.cfg.Now,
			})
		}
	}
	if err != nil {
		v.log.Warn("oidc discovery failed; retried on the next request", "issuer", v.cfg.Issuer, "err", err)
	}
	v.mu.Lock()
	v.flight = nil
	v.lastError = err
	if err == nil {
		v.verifier, v.keys = verifier, keys
	}
	v.mu.Unlock()
	f.err = err
	close(f.done)
}

// Ready reports whether discovery succeeded and a key set is held (fetching them if needed).
func (v *Verifier) Ready(ctx context.Context) error {
	_, keys, err := v.idVerifier(ctx)
	if err != nil {
		return err
	}
	if ks, _ := keys.cached(""); ks == nil {
		return keys.prepare(ctx, "")
	}
	return nil
}

// KeySetFetches is how many times the key set was fetched (attempts, failed ones included).
func (v *Verifier) KeySetFetches() int {
	v.mu.Lock()
	keys := v.keys
	v.mu.Unlock()
	if keys == nil {
		return 0
	}
	return keys.fetchCount()
}

// precheck refuses, without the issuer, a token that cannot be one of its: not a compact JWS with
// one RS256 signature, or an iss claim that is not the issuer's. It returns the parsed token.
func (v *Verifier) precheck(raw string) (*jose.JSONWebSignature, error) {
	jws, err := jose.ParseSignedCompact(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("malformed token: want exactly one signature")
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &c); err != nil {
		return nil, fmt.Errorf("malformed token payload: %w", err)
	}
	if c.Issuer != v.cfg.Issuer {
		if len(c.Issuer) > 200 { // the caller's text, bound for the log
			c.Issuer = c.Issuer[:200] + "..."
		}
		return nil, fmt.Errorf("issued by %q, not by %q", c.Issuer, v.cfg.Issuer)
	}
	return jws, nil
}

// Authenticate verifies the bearer token of r and checks the allow-list. The error is an *Error.
func (v *Verifier) Authenticate(r *http.Request) (Identity, error) {
	raw, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return Identity{}, unauthorized(apiv1.CodeMissingToken, "an Authorization: Bearer <GitHub Actions OIDC token> header is required", nil)
	}
	id, err := v.Verify(r.Context(), raw)
	if err != nil {
		return Identity{}, err
	}
	if err := v.Allow(id); err != nil {
		return Identity{}, err
	}
	return id, nil
}

func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// Verify checks a raw token and returns the identity it carries. The error is an *Error.
func (v *Verifier) Verify(ctx context.Context, raw string) (Identity, error) {
	jws, err := v.precheck(raw)
	if err != nil {
		return Identity{}, unauthorized(apiv1.CodeInvalidToken, "the token is not valid", err)
	}
	kid := jws.Signatures[0].Header.KeyID
	ctx = withParsed(ctx, raw, jws) // the key set verifies the signature without parsing again
	iv, keys, err := v.idVerifier(ctx)
	if err != nil {
		return Identity{}, &Error{Status: http.StatusServiceUnavailable, Code: apiv1.CodeUnavailable, Msg: "the OIDC issuer cannot be reached to verify tokens", Err: err}
	}
	if err := keys.prepare(ctx, kid); err != nil {
		// No key set was ever fetched: nothing can be verified. Once one is held, a token it
		// does not verify is a 401 below, whether the issuer answers or not.
		return Identity{}, &Error{Status: http.StatusServiceUnavailable, Code: apiv1.CodeUnavailable, Msg: "the OIDC issuer's keys cannot be fetched", Err: err}
	}
	tok, err := iv.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) {
			return Identity{}, unauthorized(apiv1.CodeTokenExpired, "the token expired at "+expired.Expiry.UTC().Format(time.RFC3339), nil)
		}
		return Identity{}, unauthorized(apiv1.CodeInvalidToken, "the token is not valid", err)
	}
	if !slices.Contains(tok.Audience, v.cfg.Audience) {
		return Identity{}, unauthorized(apiv1.CodeWrongAudience, fmt.Sprintf("the token's audience %q is not this deployment's", tok.Audience), nil)
	}
	var c claims
	if err := tok.Claims(&c); err != nil {
		return Identity{}, unauthorized(apiv1.CodeInvalidClaims, "the token's claims cannot be read", err)
	}
	id := Identity{
		Repository: string(c.Repository), RepositoryID: string(c.RepositoryID), RepositoryOwner: string(c.RepositoryOwner),
		RunID: string(c.RunID), Subject: tok.Subject, Expiry: tok.Expiry,
	}
	var missing []string
	for name, val := range map[string]string{"repository": id.Repository, "repository_id": id.RepositoryID, "run_id": id.RunID} {
		if val == "" {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		return Identity{}, unauthorized(apiv1.CodeInvalidClaims, "not a GitHub Actions run token: no "+strings.Join(missing, ", "), nil)
	}
	if owner, name, ok := strings.Cut(id.Repository, "/"); !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return Identity{}, unauthorized(apiv1.CodeInvalidClaims, fmt.Sprintf("repository claim %q is not owner/name", id.Repository), nil)
	}
	if id.RepositoryOwner == "" {
		id.RepositoryOwner, _, _ = strings.Cut(id.Repository, "/")
	}
	if !isID(id.RepositoryID) || !isID(id.RunID) {
		return Identity{}, unauthorized(apiv1.CodeInvalidClaims, "repository_id and run_id must be numbers", nil)
	}
	if id.Event = string(c.EventName); !isEventName(id.Event) {
		return Identity{}, unauthorized(apiv1.CodeInvalidClaims, fmt.Sprintf("event_name %q is not an event name (lower-case letters and '_')", truncate(id.Event)), nil)
	}
	if isRef(string(c.Ref)) && isRef(string(c.BaseRef)) {
		id.Ref, id.BaseRef = string(c.Ref), string(c.BaseRef)
	}
	id.RunAttempt = 1
	if c.RunAttempt != "" {
		n, err := strconv.Atoi(string(c.RunAttempt))
		if err != nil || n < 1 {
			return Identity{}, unauthorized(apiv1.CodeInvalidClaims, fmt.Sprintf("run_attempt %q is not a positive number", c.RunAttempt), nil)
		}
		id.RunAttempt = n
	}
	return id, nil
}

// isRef reports whether s is empty or may be a git ref or branch name as the ref and base_ref
// claims carry it: up to 255 printable ASCII characters without spaces (git check-ref-format
// refuses spaces and control characters; the cache escapes everything else).
func isRef(s string) bool {
	return len(s) <= 255 && !strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c >= 0x7f })
}

// isEventName reports whether s may be a GitHub event name ("push", "pull_request_target"): empty
// (no claim), or up to 64 lower-case letters and '_'.
func isEventName(s string) bool {
	return len(s) <= 64 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz_") == ""
}

// truncate bounds a claim's text for an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func isID(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Allow checks the identity against the allow-list: its repository, or its owner, must be listed.
func (v *Verifier) Allow(id Identity) error {
	repo := strings.ToLower(id.Repository)
	owner := strings.ToLower(id.RepositoryOwner)
	if ro, _, _ := strings.Cut(repo, "/"); ro != owner {
		// A token whose repository and owner claims disagree is not trusted with either.
		return forbidden(apiv1.CodeNotAllowed, fmt.Sprintf("repository %s and owner %s disagree", id.Repository, id.RepositoryOwner))
	}
	if slices.Contains(v.allowed, repo) || slices.Contains(v.allowed, owner) {
		return nil
	}
	return forbidden(apiv1.CodeNotAllowed, fmt.Sprintf("repository %s is not allowed to use this deployment", id.Repository))
}

// AllowsRepository reports whether a repository ("owner/name") is on the deployment's allow-list,
// by itself or through its owner.
func (v *Verifier) AllowsRepository(repository string) bool {
	repo := strings.ToLower(repository)
	owner, _, _ := strings.Cut(repo, "/")
	return slices.Contains(v.allowed, repo) || slices.Contains(v.allowed, owner)
}

// CheckRun is the binding check: a provision belongs to the repository and run that made it, and
// only a token of that same repository and run may read or release it.
func (id Identity) CheckRun(repositoryID, runID string) error {
	if repositoryID != id.RepositoryID {
		return forbidden(apiv1.CodeOtherRepository, "the run belongs to another repository")
	}
	if runID != id.RunID {
		return forbidden(apiv1.CodeOtherRun, "the token is of run "+id.RunID+", not of run "+runID)
	}
	return nil
}

// claims are the GitHub Actions claims the reconciler reads.
type claims struct {
	Repository      flexString `json:"repository"`
	RepositoryID    flexString `json:"repository_id"`
	RepositoryOwner flexString `json:"repository_owner"`
	RunID           flexString `json:"run_id"`
	RunAttempt      flexString `json:"run_attempt"`
	EventName       flexString `json:"event_name"`
	Ref             flexString `json:"ref"`
	BaseRef         flexString `json:"base_ref"`
}

// flexString is a claim GitHub sends as a string ("12345") that other issuers may send as a number.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = flexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a string or a number, got %s", b)
	}
	if _, err := n.Int64(); err != nil {
		return fmt.Errorf("want an integer, got %s", b)
	}
	*f = flexString(n.String())
	return nil
}
