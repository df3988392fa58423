// Package client is the workflow side of the reconciler API: it gets the job's GitHub Actions OIDC
// token (ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN, with the deployment's
// audience), calls the API, and retries with exponential backoff what may succeed later:
// connection errors, answers the server marks retryable (shutting down, throttled, a provision of
// the run still in progress), and 502/503/504 from a proxy. Provision and release are idempotent
// on the server (per run and attempt), so a retry never gets a second set of runners.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// TokenSource gives the bearer token of a request; it is asked again for every attempt, since
// GitHub's tokens live five minutes.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// StaticToken is a token given as is (tests, or an operator holding a token).
type StaticToken string

// Token returns the token.
func (t StaticToken) Token(context.Context) (string, error) {
	if t == "" {
		return "", errors.New("no token")
	}
	return string(t), nil
}

// Retry is the retry policy. Zero values take the defaults.
type Retry struct {
	Attempts int           // total attempts, default 6
	Initial  time.Duration // first backoff, default 1 s; doubled each time with jitter
	Max      time.Duration // longest backoff, default 30 s
}

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = 6
	}
	if r.Initial <= 0 {
		r.Initial = time.Second
	}
	if r.Max <= 0 {
		r.Max = 30 * time.Second
	}
	return r
}

// Options configure a Client.
type Options struct {
	HTTPClient *http.Client // default: no overall timeout (a provision may take minutes); ctx bounds it
	Retry      Retry
	UserAgent  string
	// OnRetry, if set, is told about each retry (the CLI prints it).
	OnRetry func(attempt int, wait time.Duration, err error)
}

// Client calls one reconciler API.
type Client struct {
	base   *url.URL
	tokens TokenSource
	o      Options
}

// New returns a client of the API at baseURL.
func New(baseURL string, tokens TokenSource, o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("api url %q: want an http(s) URL", baseURL)
	}
	if tokens == nil {
		return nil, errors.New("a token source is required")
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 0, IdleConnTimeout: 90 * time.Second,
		}}
	}
	o.Retry = o.Retry.withDefaults()
	if o.UserAgent == "" {
		o.UserAgent = "runnerpool-client"
	}
	return &Client{base: u, tokens: tokens, o: o}, nil
}

// APIError is an error answer of the API.
type APIError struct {
	Status int
	Body   apiv1.Error
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%d %s", e.Status, e.Body.Code)
	if e.Body.Error != "" {
		msg += ": " + e.Body.Error
	}
	if e.Body.RequestID != "" {
		msg += " (request " + e.Body.RequestID + ")"
	}
	return msg
}

// Code returns the API error code of err, or "".
func Code(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Body.Code
	}
	return ""
}

// Provision asks for runners for the token's run. A failed provision is an *APIError whose
// Body.Provision says what was undone.
func (c *Client) Provision(ctx context.Context, req apiv1.ProvisionRequest) (apiv1.ProvisionResponse, error) {
	var out apiv1.ProvisionResponse
	err := c.do(ctx, http.MethodPost, apiv1.PathProvision, req, &out)
	return out, err
}

// Release returns the token's run's runners to the pool.
func (c *Client) Release(ctx context.Context, req apiv1.ReleaseRequest) (apiv1.ReleaseResponse, error) {
	var out apiv1.ReleaseResponse
	err := c.do(ctx, http.MethodPost, apiv1.PathRelease, req, &out)
	return out, err
}

// Run reads what a provision of a run did: ref is a run id (attempt 0: the token's) or a run key.
func (c *Client) Run(ctx context.Context, ref string, attempt int) (apiv1.RunResponse, error) {
	p := apiv1.PathRuns + url.PathEscape(ref)
	if attempt > 0 {
		p += "?attempt=" + strconv.Itoa(attempt)
	}
	var out apiv1.RunResponse
	err := c.do(ctx, http.MethodGet, p, nil, &out)
	return out, err
}

// Pools reads the live counts and the caller's active runs.
func (c *Client) Pools(ctx context.Context) (apiv1.PoolsResponse, error) {
	var out apiv1.PoolsResponse
	err := c.do(ctx, http.MethodGet, apiv1.PathPools, nil, &out)
	return out, err
}

// do sends the request, retrying what may succeed later, and decodes a 2xx answer into out.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encoding the request: %w", err)
		}
	}
	backoff := c.o.Retry.Initial
	for attempt := 1; ; attempt++ {
		retryable, after, err := c.once(ctx, method, path, body, out)
		if err == nil || !retryable || attempt >= c.o.Retry.Attempts || ctx.Err() != nil {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if after > wait {
			wait = min(after, c.o.Retry.Max)
		}
		if c.o.OnRetry != nil {
			c.o.OnRetry(attempt, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up retrying: %w)", err, ctx.Err())
		case <-t.C:
		}
		backoff = min(backoff*2, c.o.Retry.Max)
	}
}

// once makes one attempt. retryable says whether another may succeed; after is the server's
// Retry-After.
func (c *Client) once(ctx context.Context, method, path string, body []byte, out any) (retryable bool, after time.Duration, err error) {
	tok, err := c.tokens.Token(ctx)
	if err != nil {
		var te *TokenError
		return errors.As(err, &te) && te.Retryable, 0, fmt.Errorf("getting the OIDC token: %w", err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return false, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.o.UserAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.o.HTTPClient.Do(req)
	if err != nil {
		// Connection refused or reset, a timeout: the replica may be restarting.
		return ctx.Err() == nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return ctx.Err() == nil, 0, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
		after = time.Duration(s) * time.Second
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out == nil {
			return false, 0, nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return false, 0, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
		return false, 0, nil
	}
	ae := &APIError{Status: resp.StatusCode}
	if json.Unmarshal(b, &ae.Body) != nil || ae.Body.Code == "" {
		// Not our server's answer: a proxy or load balancer in between.
		ae.Body = apiv1.Error{Code: "http_" + strconv.Itoa(resp.StatusCode), Error: strings.TrimSpace(truncate(string(b), 300))}
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
			return true, after, ae
		}
		return false, 0, ae
	}
	return ae.Body.Retryable, after, ae
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
