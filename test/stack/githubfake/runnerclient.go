// This file is the client side of the fake runner protocol: what a fake actions-runner program (driven by
// the instance agent in tests and the demo) uses to register, take jobs and go away.

package githubfake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// ErrRunnerRemoved is returned when the runner's registration no longer exists (deleted through the REST
// API, replaced, or an ephemeral runner after its job): the runner must stop or register again.
var ErrRunnerRemoved = errors.New("githubfake: runner registration was removed")

// APIError is an error answer of the fake.
type APIError struct {
	StatusCode int
	Message    string
	// Kind is the broker's errorKind when there is one, such as RunnerVersionTooOld.
	Kind string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("githubfake: %d %s", e.StatusCode, e.Message)
}

// RegisterOptions are config.sh's flags. Give Token (a registration token) or JITConfig (an
// encoded_jit_config), not both.
type RegisterOptions struct {
	// URL is config.sh's --url, https://HOST/OWNER or https://HOST/OWNER/REPO. Optional; when given, the
	// fake checks it names the registration token's scope (only the path is looked at).
	URL         string
	Token       string
	JITConfig   string
	Name        string
	Labels      []string // custom labels; self-hosted, the OS and the architecture are added by the fake
	RunnerGroup string   // organization runners only; Default when empty
	Ephemeral   bool
	Replace     bool   // replace a runner of the same name instead of failing
	OS          string // Linux (default), Windows, macOS
	Arch        string // X64 (default), ARM64, ARM, X86
	WorkFolder  string
	// Version is the runner's version, which GitHub checks at configuration and before assigning
	// jobs (runner_versions.go); empty is the fake's current release, for tests that do not model it.
	Version string
}

// RunnerClient speaks the fake runner protocol for one runner. Register (or SetRegistration) comes
// first; the other methods may then be called from any goroutine.
type RunnerClient struct {
	baseURL string
	hc      *http.Client

	mu  sync.Mutex
	reg Registration
}

// NewRunnerClient returns a client for the fake mounted at baseURL (the same URL as the REST API, without
// /api/v3). hc may be nil for http.DefaultClient.
func NewRunnerClient(baseURL string, hc *http.Client) *RunnerClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &RunnerClient{baseURL: strings.TrimRight(baseURL, "/"), hc: hc}
}

// Registration returns the runner's registration (zero before Register).
func (c *RunnerClient) Registration() Registration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg
}

// SetRegistration restores a registration saved earlier, for a runner process that restarts (the real
// runner keeps it in .runner and .credentials).
func (c *RunnerClient) SetRegistration(r Registration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reg = r
}

// Register registers the runner (config.sh, or run.sh --jitconfig) and keeps its credential.
func (c *RunnerClient) Register(ctx context.Context, o RegisterOptions) (Registration, error) {
	var reg Registration
	err := c.do(ctx, http.MethodPost, "/_runner/register", false, registerRequest(o), &reg)
	if err != nil {
		return Registration{}, fmt.Errorf("registering runner: %w", err)
	}
	c.SetRegistration(reg)
	return reg, nil
}

// Connect opens the runner's session: it shows "online" until Disconnect.
func (c *RunnerClient) Connect(ctx context.Context) error {
	if err := c.do(ctx, http.MethodPost, "/_runner/connect", true, nil, nil); err != nil {
		return fmt.Errorf("connecting runner: %w", err)
	}
	return nil
}

// NextJob waits up to wait (at most 2 minutes) for a job this runner can run. It returns nil, nil when
// none came in time. Once it returns a job the runner is busy until Complete.
func (c *RunnerClient) NextJob(ctx context.Context, wait time.Duration) (*AssignedJob, error) {
	var job AssignedJob
	err := c.do(ctx, http.MethodPost, "/_runner/jobs/next?wait="+url.QueryEscape(wait.String()), true, nil, &job)
	if err != nil {
		return nil, fmt.Errorf("polling for a job: %w", err)
	}
	if job.ID == 0 {
		return nil, nil
	}
	return &job, nil
}

// Complete reports the job done with a conclusion (success when empty). An ephemeral runner is removed
// by the fake afterwards.
func (c *RunnerClient) Complete(ctx context.Context, jobID int64, conclusion string) error {
	body := map[string]string{"conclusion": conclusion}
	if err := c.do(ctx, http.MethodPost, fmt.Sprintf("/_runner/jobs/%d/complete", jobID), true, body, nil); err != nil {
		return fmt.Errorf("completing job %d: %w", jobID, err)
	}
	return nil
}

// Disconnect closes the session: the runner shows "offline". A removed runner disconnects without error.
func (c *RunnerClient) Disconnect(ctx context.Context) error {
	if err := c.do(ctx, http.MethodPost, "/_runner/disconnect", true, nil, nil); err != nil {
		return fmt.Errorf("disconnecting runner: %w", err)
	}
	return nil
}

// Deregister removes the runner with a remove token (config.sh remove --token). Removing a runner that is
// already gone succeeds.
func (c *RunnerClient) Deregister(ctx context.Context, removeToken string) error {
	body := map[string]string{"token": removeToken}
	if err := c.do(ctx, http.MethodPost, "/_runner/deregister", true, body, nil); err != nil {
		return fmt.Errorf("deregistering runner: %w", err)
	}
	return nil
}

func (c *RunnerClient) do(ctx context.Context, method, path string, auth bool, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, body)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		cred := c.Registration().Credential
		if cred == "" {
			return errors.New("runner is not registered")
		}
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("reading response: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusGone:
		return ErrRunnerRemoved
	case resp.StatusCode/100 != 2:
		var e apiError
		_ = json.Unmarshal(b, &e)
		return &APIError{StatusCode: resp.StatusCode, Message: cmpOr(e.Message, http.StatusText(resp.StatusCode)), Kind: e.ErrorKind}
	case out != nil && resp.StatusCode != http.StatusNoContent:
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decoding response: %w", err)
		}
	}
	return nil
}
