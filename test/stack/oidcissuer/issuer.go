// Package oidcissuer is a local OpenID Connect issuer that mints tokens shaped like GitHub Actions' OIDC
// tokens (token.actions.githubusercontent.com), for tests and the demo: the reconciler verifies them with
// the same discovery + JWKS code it uses against GitHub.
//
// An *Issuer is an http.Handler serving
//
//	GET  /.well-known/openid-configuration   discovery document, like GitHub's
//	GET  /.well-known/jwks                   the signing key (RS256)
//	POST /mint                               JSON object of claims -> signed token (text/plain)
//	GET  /_actions/token?audience=AUD        the runner's ID-token endpoint: {"value": "<jwt>"}
//
// The issuer URL must be known before the server starts, so serve it like this:
//
//	srv := httptest.NewUnstartedServer(nil)
//	iss, err := oidcissuer.New("http://" + srv.Listener.Addr().String())
//	srv.Config.Handler = iss
//	srv.Start()
//
// When the issuer URL has a path (http://host/oidc), requests under that path are served with the path
// stripped, so the handler can be mounted at /oidc/ on a shared mux.
//
// The /_actions/token endpoint emulates ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN:
// set ACTIONS_ID_TOKEN_REQUEST_URL to ActionsTokenURL() and ACTIONS_ID_TOKEN_REQUEST_TOKEN to the request
// token given to WithActionsContext (or SetActionsContext); the endpoint answers with a token carrying
// the configured claims and the requested audience.
package oidcissuer

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Defaults of minted tokens.
const (
	DefaultLifetime = 5 * time.Minute   // exp = iat + DefaultLifetime, as GitHub's tokens
	DefaultRef      = "refs/heads/main" // ref used in sub when the claims name none
)

// Issuer is a local OIDC issuer. Safe for concurrent use.
type Issuer struct {
	url      string // exactly as given: go-oidc compares it byte for byte
	base     string // url without a trailing slash
	path     string // path prefix of url, "" at the root
	now      func() time.Time
	kid      string
	signer   jose.Signer
	jwks     []byte
	discover []byte

	unknownOnce   sync.Once
	unknownSigner jose.Signer
	unknownErr    error

	mu            sync.Mutex
	requestToken  string
	actionsClaims map[string]any
}

// Option configures an Issuer.
type Option func(*Issuer)

// WithClock sets the clock used for iat, nbf and exp; time.Now by default.
func WithClock(now func() time.Time) Option {
	return func(i *Issuer) { i.now = now }
}

// WithActionsContext configures the /_actions/token endpoint: callers presenting requestToken as a bearer
// token get a token with these claims (plus the defaults of Mint and the requested audience).
func WithActionsContext(requestToken string, claims map[string]any) Option {
	return func(i *Issuer) { i.SetActionsContext(requestToken, claims) }
}

// New creates an issuer for issuerURL (absolute http or https URL, no query or fragment) with a freshly
// generated RSA 2048 signing key.
func New(issuerURL string, opts ...Option) (*Issuer, error) {
	u, err := url.Parse(issuerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("issuer URL %q: want an absolute http(s) URL without query or fragment", issuerURL)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generating signing key: %w", err)
	}
	pub := jose.JSONWebKey{Key: &key.PublicKey, Algorithm: string(jose.RS256), Use: "sig"}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("key thumbprint: %w", err)
	}
	i := &Issuer{
		url:  issuerURL,
		base: strings.TrimSuffix(issuerURL, "/"),
		path: strings.TrimSuffix(u.Path, "/"),
		now:  time.Now,
		kid:  base64.RawURLEncoding.EncodeToString(tp),
	}
	pub.KeyID = i.kid
	if i.signer, err = newSigner(key, i.kid); err != nil {
		return nil, err
	}
	if i.jwks, err = json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{pub}}); err != nil {
		return nil, fmt.Errorf("encoding JWKS: %w", err)
	}
	if i.discover, err = json.Marshal(i.discovery()); err != nil {
		return nil, fmt.Errorf("encoding discovery document: %w", err)
	}
	for _, o := range opts {
		o(i)
	}
	return i, nil
}

func newSigner(key *rsa.PrivateKey, kid string) (jose.Signer, error) {
	s, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"),
	)
	if err != nil {
		return nil, fmt.Errorf("creating signer: %w", err)
	}
	return s, nil
}

// URL returns the issuer URL (the iss claim).
func (i *Issuer) URL() string { return i.url }

// JWKSURL returns the URL of the key set.
func (i *Issuer) JWKSURL() string { return i.base + "/.well-known/jwks" }

// ActionsTokenURL returns the value for ACTIONS_ID_TOKEN_REQUEST_URL; like GitHub's it already has a
// query, so clients append "&audience=...".
func (i *Issuer) ActionsTokenURL() string { return i.base + "/_actions/token?api-version=2.0" }

// SetActionsContext (re)configures the /_actions/token endpoint; see WithActionsContext. An empty
// requestToken disables the endpoint.
func (i *Issuer) SetActionsContext(requestToken string, claims map[string]any) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.requestToken, i.actionsClaims = requestToken, maps.Clone(claims)
}

// discovery is GitHub's discovery document, pointed at this issuer.
func (i *Issuer) discovery() map[string]any {
	return map[string]any{
		"issuer":                                i.url,
		"jwks_uri":                              i.JWKSURL(),
		"subject_types_supported":               []string{"public", "pairwise"},
		"response_types_supported":              []string{"id_token"},
		"id_token_signing_alg_values_supported": []string{string(jose.RS256)},
		"scopes_supported":                      []string{"openid"},
		"claims_supported": []string{
			"sub", "aud", "exp", "iat", "iss", "jti", "nbf", "ref", "sha", "repository", "repository_id",
			"repository_owner", "repository_owner_id", "enterprise", "enterprise_id", "run_id", "run_number",
			"run_attempt", "actor", "actor_id", "workflow", "workflow_ref", "workflow_sha", "head_ref",
			"base_ref", "event_name", "ref_type", "ref_protected", "environment", "environment_node_id",
			"job_workflow_ref", "job_workflow_sha", "repository_visibility", "runner_environment",
			"issuer_scope",
		},
	}
}

// Mint signs a token. Defaults: iss = the issuer URL, iat = nbf = now, exp = now + 5m, a random jti, and
// when the claims name a repository ("OWNER/REPO"): repository_owner, ref (refs/heads/main), ref_type,
// aud = https://github.com/OWNER and sub as GitHub builds it ("repo:OWNER/REPO:ref:REF", or
// ":environment:ENV" with an environment, ":pull_request" for pull_request events). The caller's claims
// override every default; a claim given as nil is left out. time.Time values become Unix seconds.
func (i *Issuer) Mint(claims map[string]any) (string, error) {
	return i.mint(i.signer, claims)
}

// MintWithUnknownKey is Mint signed by a key that is not in the JWKS (but with the same key id), for
// tests that verification rejects forged tokens.
func (i *Issuer) MintWithUnknownKey(claims map[string]any) (string, error) {
	i.unknownOnce.Do(func() {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			i.unknownErr = fmt.Errorf("generating key: %w", err)
			return
		}
		i.unknownSigner, i.unknownErr = newSigner(key, i.kid)
	})
	if i.unknownErr != nil {
		return "", i.unknownErr
	}
	return i.mint(i.unknownSigner, claims)
}

func (i *Issuer) mint(signer jose.Signer, in map[string]any) (string, error) {
	tok, err := jwt.Signed(signer).Claims(i.claims(in)).Serialize()
	if err != nil {
		return "", fmt.Errorf("signing token: %w", err)
	}
	return tok, nil
}

func (i *Issuer) claims(in map[string]any) map[string]any {
	now := i.now()
	c := map[string]any{
		"iss": i.url,
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"exp": now.Add(DefaultLifetime).Unix(),
		"jti": newJTI(),
	}
	repo, _ := in["repository"].(string)
	if repo != "" {
		owner, _, _ := strings.Cut(repo, "/")
		c["repository_owner"] = owner
		c["aud"] = "https://github.com/" + owner
		c["ref"] = DefaultRef
		c["ref_type"] = "branch"
	}
	for k, v := range in {
		switch v := v.(type) {
		case nil:
			delete(c, k)
		case time.Time:
			c[k] = v.Unix()
		default:
			c[k] = plainNumbers(v)
		}
	}
	if _, given := in["sub"]; !given && repo != "" {
		ref, _ := c["ref"].(string)
		env, _ := c["environment"].(string)
		event, _ := c["event_name"].(string)
		switch {
		case env != "":
			c["sub"] = "repo:" + repo + ":environment:" + env
		case event == "pull_request":
			c["sub"] = "repo:" + repo + ":pull_request"
		default:
			c["sub"] = "repo:" + repo + ":ref:" + ref
		}
	}
	return c
}

// plainNumbers turns encoding/json Numbers (from /mint) into int64 or float64, recursively: go-jose
// serializes claims with its own JSON package, which would write a json.Number as a string.
func plainNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return v.String()
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = plainNumbers(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = plainNumbers(x)
		}
		return out
	}
	return v
}

func newJTI() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// ServeHTTP implements http.Handler.
func (i *Issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("internal error: %v", v))
		}
	}()
	p := r.URL.Path
	if i.path != "" {
		rest, ok := strings.CutPrefix(p, i.path)
		if ok && (rest == "" || rest[0] == '/') {
			p = rest
		}
	}
	switch {
	case p == "/.well-known/openid-configuration" && isGet(r):
		writeBody(w, http.StatusOK, "application/json", i.discover)
	case p == "/.well-known/jwks" && isGet(r):
		w.Header().Set("Cache-Control", "public, max-age=60")
		writeBody(w, http.StatusOK, "application/json", i.jwks)
	case p == "/mint" && r.Method == http.MethodPost:
		i.serveMint(w, r)
	case p == "/_actions/token" && (isGet(r) || r.Method == http.MethodPost):
		i.serveActionsToken(w, r)
	case p == "/.well-known/openid-configuration" || p == "/.well-known/jwks" || p == "/mint" || p == "/_actions/token":
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	default:
		writeError(w, http.StatusNotFound, "not found")
	}
}

func isGet(r *http.Request) bool { return r.Method == http.MethodGet || r.Method == http.MethodHead }

const maxClaimsBody = 64 << 10

// serveMint signs the JSON object of claims in the body (empty body: defaults only).
func (i *Issuer) serveMint(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxClaimsBody+1))
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	case len(b) > maxClaimsBody:
		writeError(w, http.StatusRequestEntityTooLarge, "body too large")
		return
	}
	claims := map[string]any{}
	if strings.TrimSpace(string(b)) != "" {
		if claims, err = decodeClaims(b); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	tok, err := i.Mint(claims)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeBody(w, http.StatusOK, "text/plain; charset=utf-8", []byte(tok))
}

// decodeClaims decodes exactly one JSON object, keeping numbers as json.Number so that large integers
// (run_id, repository_id) stay exact integers in the token.
func decodeClaims(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var claims map[string]any
	if err := dec.Decode(&claims); err != nil {
		return nil, fmt.Errorf("claims must be a JSON object: %v", err)
	}
	if claims == nil {
		return nil, errors.New("claims must be a JSON object, got null")
	}
	if dec.More() {
		return nil, errors.New("trailing data after the claims object")
	}
	return claims, nil
}

// serveActionsToken is the runner's ID-token endpoint: bearer request token in, {"value": jwt} out.
func (i *Issuer) serveActionsToken(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	want, claims := i.requestToken, maps.Clone(i.actionsClaims)
	i.mu.Unlock()
	if want == "" {
		writeError(w, http.StatusUnauthorized, "no Actions context configured (WithActionsContext or SetActionsContext)")
		return
	}
	scheme, got, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(want)) != 1 {
		writeError(w, http.StatusUnauthorized, "bad or missing bearer request token")
		return
	}
	if claims == nil {
		claims = map[string]any{}
	}
	if aud := r.URL.Query().Get("audience"); aud != "" {
		claims["aud"] = aud
	}
	tok, err := i.Mint(claims)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	b, _ := json.Marshal(map[string]string{"value": tok})
	writeBody(w, http.StatusOK, "application/json", b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"message": msg})
	writeBody(w, status, "application/json", b)
}

func writeBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
