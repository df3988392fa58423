// Package scaleset speaks GitHub Actions' runner scale set protocol: the one ARC's
// gha-runner-scale-set listener and GitHub's published client (github.com/actions/scaleset, MIT)
// use. Our own code, written from the protocol's facts (paths, headers, status codes, JSON names):
//
//   - the registration exchange: a runner registration token (minted by the reconciler's own
//     GitHub App or PAT access) is traded at POST {api}/actions/runner-registration
//     ("Authorization: RemoteAuth <token>", body {url, runner_event: "register"}) for the Actions
//     service's URL and an admin JWT; the JWT is reused until a minute before its exp claim;
//   - scale sets (_apis/runtime/runnerscalesets), runner groups (_apis/runtime/runnergroups/),
//     generatejitconfig and runner removal (_apis/distributedtask/pools/0/agents), every call with
//     api-version=6.0-preview and "Authorization: Bearer <admin token>";
//   - the message session (session.go): create (409 when another session holds the scale set),
//     refresh, delete, long-polled GetMessage with X-ScaleSetMaxCapacity, DeleteMessage, and
//     acquirejobs, the queue calls authenticated with the session's message queue token;
//   - the job messages (messages.go).
//
// The client holds no lock across calls other than the admin token's refresh; it is safe for
// concurrent use.
package scaleset

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Protocol facts shared with the fake Actions service.
const (
	// HeaderMaxCapacity carries, on every GetMessage, how many runners the listener can still
	// bring up: the service offers no more jobs than that.
	HeaderMaxCapacity = "X-ScaleSetMaxCapacity"
	// APIVersion is the api-version query parameter every Actions-service call carries.
	APIVersion = "6.0-preview"
	// RegistrationPath is the registration exchange, relative to the REST API base.
	RegistrationPath = "actions/runner-registration"

	scaleSetsPath = "_apis/runtime/runnerscalesets"
	groupsPath    = "_apis/runtime/runnergroups/"
	agentsPath    = "_apis/distributedtask/pools/0/agents"
)

// Config configures a Client.
type Config struct {
	// APIURL is GitHub's REST API base (https://api.github.com/, https://HOST/api/v3/, the fake).
	APIURL string
	// RegistrationToken mints a runner registration token for the scale set's scope and returns it
	// with the scope's config URL (https://github.com/OWNER[/REPO]); the reconciler passes its
	// ghaccess client's RegistrationToken.
	RegistrationToken func(ctx context.Context) (token, configURL string, err error)
	// HTTPClient makes the calls; GetMessage's long poll needs a timeout above the service's ~50 s
	// (default: 90 s).
	HTTPClient *http.Client
	// RetryMax is how often a call is sent again after a connection error, 429 or 5xx, with
	// exponential back-off between RetryWaitMin and RetryWaitMax (Retry-After honoured), before
	// its error is returned: GitHub's client retries 4 times, waiting up to 30 s (actions/scaleset
	// client.go, common_client.go, on hashicorp/go-retryablehttp). Defaults 4, 1 s, 30 s; a
	// negative RetryMax sends each call once.
	RetryMax                   int
	RetryWaitMin, RetryWaitMax time.Duration
	Now                        func() time.Time
	Logger                     *slog.Logger
}

// Client is a scale set client for one scope (organisation or repository).
type Client struct {
	cfg Config
	api *url.URL

	mu        sync.Mutex // guards the admin connection
	adminURL  string
	adminTok  string
	adminExp  time.Time
	refreshes int
}

// New checks the configuration and returns a client. No call is made until first use.
func New(cfg Config) (*Client, error) {
	if cfg.APIURL == "" || cfg.RegistrationToken == nil {
		return nil, errors.New("scale set client: API URL and registration token source are required")
	}
	api, err := url.Parse(strings.TrimSuffix(cfg.APIURL, "/") + "/")
	if err != nil {
		return nil, fmt.Errorf("scale set client: API URL: %w", err)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 90 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.HTTPClient = retrying(cfg)
	return &Client{cfg: cfg, api: api}, nil
}

// retrying wraps the configured HTTP client in go-retryablehttp's retries (see Config.RetryMax).
// After the last attempt the service's own answer is returned, so its status and error name stay
// readable.
func retrying(cfg Config) *http.Client {
	rc := retryablehttp.NewClient()
	rc.HTTPClient = cfg.HTTPClient
	rc.RetryMax = cfg.RetryMax
	switch {
	case cfg.RetryMax < 0:
		rc.RetryMax = 0
	case cfg.RetryMax == 0:
		rc.RetryMax = 4
	}
	rc.RetryWaitMin, rc.RetryWaitMax = cmp.Or(cfg.RetryWaitMin, time.Second), cmp.Or(cfg.RetryWaitMax, 30*time.Second)
	rc.Logger = cfg.Logger
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	return rc.StandardClient() // each attempt bounded by the configured client's timeout
}

// Error is an unexpected answer of GitHub or the Actions service. TypeName is the service's
// exception name when it gave one, fully qualified as the service sends it (for example
// "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException, GitHub.Actions.Runtime.WebApi").
type Error struct {
	Op       string
	Status   int
	TypeName string
	Message  string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: status %d", e.Op, e.Status)
	if e.TypeName != "" {
		msg += " " + e.TypeName
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// StatusOf returns the HTTP status of an *Error in err's chain, 0 when there is none.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func readError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Op: op, Status: resp.StatusCode}
	var ex struct {
		TypeName string `json:"typeName"`
		Message  string `json:"message"`
	}
	if json.Unmarshal(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), &ex) == nil && (ex.TypeName != "" || ex.Message != "") {
		e.TypeName, e.Message = ex.TypeName, ex.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200]
		}
	}
	return e
}

// admin returns the Actions service URL and admin token, exchanging a fresh registration token
// when there is none or the one held expires within a minute.
func (c *Client) admin(ctx context.Context) (string, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adminTok != "" && c.cfg.Now().Add(time.Minute).Before(c.adminExp) {
		return c.adminURL, c.adminTok, nil
	}
	token, configURL, err := c.cfg.RegistrationToken(ctx)
	if err != nil {
		return "", "", fmt.Errorf("registration token for the actions service: %w", err)
	}
	body, _ := json.Marshal(map[string]string{"url": configURL, "runner_event": "register"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.api.JoinPath(RegistrationPath).String(), bytes.NewReader(body))
	if err != nil {
		return "", "", fmt.Errorf("runner registration: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "RemoteAuth "+token)
	var conn struct {
		URL   string `json:"url"`
		Token string `json:"token"`
	}
	if err := c.do(req, "runner registration", []int{http.StatusOK, http.StatusCreated}, &conn); err != nil {
		return "", "", err
	}
	if conn.URL == "" || conn.Token == "" {
		return "", "", errors.New("runner registration: answer without url or token")
	}
	exp, err := jwtExpiry(conn.Token)
	if err != nil {
		return "", "", fmt.Errorf("runner registration: admin token: %w", err)
	}
	c.adminURL, c.adminTok, c.adminExp = conn.URL, conn.Token, exp
	c.refreshes++
	c.cfg.Logger.Debug("actions service admin token refreshed", "expires", exp)
	return c.adminURL, c.adminTok, nil
}

// jwtExpiry reads the exp claim of a JWT without verifying it: the token is the service's, the
// client only needs to know when to ask for a new one.
func jwtExpiry(tok string) (time.Time, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, fmt.Errorf("JWT payload: %w", err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Exp == 0 {
		return time.Time{}, errors.New("JWT without exp claim")
	}
	return time.Unix(claims.Exp, 0), nil
}

// serviceRequest builds an Actions-service request for path (with its own query) under the admin
// URL, with api-version and the admin token.
func (c *Client) serviceRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	base, tok, err := c.admin(ctx)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("actions service url %q: %w", base, err)
	}
	u = u.JoinPath(path)
	if strings.HasSuffix(path, "/") && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("api-version", APIVersion)
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	return req, nil
}

// send sends req and returns the status and body when the status is one of want.
func (c *Client) send(req *http.Request, op string, want ...int) (int, []byte, error) {
	req.Header.Set("User-Agent", "runnerpool-scaleset")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	if !slices.Contains(want, resp.StatusCode) {
		return resp.StatusCode, nil, readError(op, resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s: reading answer: %w", op, err)
	}
	return resp.StatusCode, bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")), nil
}

// do sends req, checks the status is one of want and decodes the answer into out (when not nil).
func (c *Client) do(req *http.Request, op string, want []int, out any) error {
	_, b, err := c.send(req, op, want...)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: decoding answer: %w", op, err)
	}
	return nil
}

func (c *Client) call(ctx context.Context, op, method, path string, query url.Values, body any, want int, out any) error {
	req, err := c.serviceRequest(ctx, method, path, query, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return c.do(req, op, []int{want}, out)
}
