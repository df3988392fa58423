// The GitHub Actions side of a workflow step: the job's OIDC token and the step's outputs.
//
// A job with `permissions: id-token: write` gets two environment variables:
// ACTIONS_ID_TOKEN_REQUEST_URL (which already has a query string) and
// ACTIONS_ID_TOKEN_REQUEST_TOKEN. GET $URL&audience=AUD with "Authorization: bearer $TOKEN" answers
// {"value": "<JWT>"}: a token signed by GitHub's issuer naming the repository, run and attempt.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Environment variables of a GitHub Actions job.
const (
	EnvTokenRequestURL   = "ACTIONS_ID_TOKEN_REQUEST_URL"
	EnvTokenRequestToken = "ACTIONS_ID_TOKEN_REQUEST_TOKEN"
	EnvGitHubOutput      = "GITHUB_OUTPUT"
)

// TokenError is a failure to get the OIDC token; Retryable for outages of the token endpoint.
type TokenError struct {
	Retryable bool
	Err       error
}

func (e *TokenError) Error() string { return e.Err.Error() }
func (e *TokenError) Unwrap() error { return e.Err }

// ActionsToken fetches the job's OIDC token for an audience.
type ActionsToken struct {
	RequestURL   string
	RequestToken string
	Audience     string
	HTTPClient   *http.Client // default: 30 s timeout
}

// ActionsTokenFromEnv reads the token request variables. Their absence is the usual mistake of a
// workflow without `permissions: id-token: write`, and the error says so.
func ActionsTokenFromEnv(getenv func(string) string, audience string) (*ActionsToken, error) {
	u, t := getenv(EnvTokenRequestURL), getenv(EnvTokenRequestToken)
	if u == "" || t == "" {
		return nil, fmt.Errorf("%s and %s are not set: run this in a GitHub Actions job with `permissions: id-token: write`", EnvTokenRequestURL, EnvTokenRequestToken)
	}
	if audience == "" {
		return nil, errors.New("an audience is required (the deployment's OIDC audience)")
	}
	return &ActionsToken{RequestURL: u, RequestToken: t, Audience: audience}, nil
}

// Token fetches a fresh token.
func (a *ActionsToken) Token(ctx context.Context) (string, error) {
	u, err := url.Parse(a.RequestURL)
	if err != nil {
		return "", &TokenError{Err: fmt.Errorf("%s: %w", EnvTokenRequestURL, err)}
	}
	q := u.Query()
	q.Set("audience", a.Audience)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", &TokenError{Err: err}
	}
	req.Header.Set("Authorization", "bearer "+a.RequestToken)
	req.Header.Set("Accept", "application/json")
	hc := a.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", &TokenError{Retryable: ctx.Err() == nil, Err: fmt.Errorf("requesting the OIDC token: %w", err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", &TokenError{Retryable: true, Err: fmt.Errorf("reading the OIDC token: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		return "", &TokenError{
			Retryable: resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests,
			Err:       fmt.Errorf("the OIDC token endpoint answered %d: %s", resp.StatusCode, truncate(strings.TrimSpace(string(b)), 200)),
		}
	}
	var v struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Value == "" {
		return "", &TokenError{Err: errors.New("the OIDC token endpoint answered without a token value")}
	}
	return v.Value, nil
}

// Output is one step output.
type Output struct {
	Name, Value string
}

// WriteOutputs appends outputs to the file $GITHUB_OUTPUT names, in the multi-line form
// (name<<DELIMITER, value, DELIMITER) with a random delimiter that does not occur in the value, so
// any value (JSON, several lines) is safe.
func WriteOutputs(path string, outputs []Output) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s: %w", EnvGitHubOutput, err)
	}
	if err := writeOutputs(f, outputs); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", EnvGitHubOutput, err)
	}
	return nil
}

func writeOutputs(w io.Writer, outputs []Output) error {
	var b strings.Builder
	for _, o := range outputs {
		if o.Name == "" || strings.ContainsAny(o.Name, "\r\n=<") {
			return fmt.Errorf("output name %q is not valid", o.Name)
		}
		delim := delimiter()
		for strings.Contains(o.Value, delim) {
			delim = delimiter()
		}
		fmt.Fprintf(&b, "%s<<%s\n%s\n%s\n", o.Name, delim, o.Value, delim)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing %s: %w", EnvGitHubOutput, err)
	}
	return nil
}

func delimiter() string {
	var r [12]byte
	_, _ = rand.Read(r[:])
	return "ghadelimiter_" + hex.EncodeToString(r[:])
}
