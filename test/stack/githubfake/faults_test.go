// Tests of injected faults (secondary rate limit, 429) as go-github surfaces them, and of the fake's
// answers to bad credentials and bad input: always a 4xx with GitHub's JSON error body.

package githubfake_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

func TestFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		set   func(*githubfake.Server)
		check func(t *testing.T, err error)
	}{
		{"secondary rate limit", func(s *githubfake.Server) { s.SetSecondaryRateLimit(2, 1500*time.Millisecond) }, func(t *testing.T, err error) {
			var rl *github.AbuseRateLimitError
			if !errors.As(err, &rl) {
				t.Fatalf("err = %T %v, want *github.AbuseRateLimitError", err, err)
			}
			if rl.RetryAfter == nil || *rl.RetryAfter != 2*time.Second {
				t.Errorf("RetryAfter = %v, want 2s (rounded up)", rl.RetryAfter)
			}
			if rl.Response.StatusCode != http.StatusForbidden || !strings.Contains(rl.Message, "secondary rate limit") {
				t.Errorf("status %d message %q", rl.Response.StatusCode, rl.Message)
			}
		}},
		{"too many requests", func(s *githubfake.Server) { s.SetTooManyRequests(2, 3*time.Second) }, func(t *testing.T, err error) {
			var er *github.ErrorResponse
			if !errors.As(err, &er) || er.Response.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("err = %T %v, want a 429 *github.ErrorResponse", err, err)
			}
			if got := er.Response.Header.Get("Retry-After"); got != "3" {
				t.Errorf("Retry-After = %q, want 3", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake, base := newFake(t, githubfake.Options{})
			tt.set(fake)
			// A fresh client per call: go-github refuses to send anything until a secondary limit's
			// Retry-After has passed, which is the behaviour the reconciler relies on, not the fake's.
			for i := range 2 {
				_, _, err := tokenClient(t, base, fake.PAT()).Actions.CreateRegistrationToken(t.Context(), "acme", "app")
				if err == nil {
					t.Fatalf("call %d succeeded, want the fault", i+1)
				}
				tt.check(t, err)
			}
			if _, _, err := tokenClient(t, base, fake.PAT()).Actions.CreateRegistrationToken(t.Context(), "acme", "app"); err != nil {
				t.Errorf("third call: %v, want success once the fault is used up", err)
			}
			if n := fake.Calls()["POST /repos/{owner}/{repo}/actions/runners/registration-token"]; n != 3 {
				t.Errorf("Calls = %d, want 3 (refused calls count)", n)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	pat := "token " + fake.PAT()
	jit := "/repos/acme/app/actions/runners/generate-jitconfig"
	tests := []struct {
		name    string
		method  string
		path    string
		auth    string
		body    string
		status  int
		message string // substring of the JSON message
	}{
		{"no credentials", "POST", "/repos/acme/app/actions/runners/registration-token", "", "", 401, "Bad credentials"},
		{"unknown token", "POST", "/repos/acme/app/actions/runners/registration-token", "token ghp_nope", "", 401, "Bad credentials"},
		{"basic auth", "POST", "/repos/acme/app/actions/runners/registration-token", "Basic eDp5", "", 401, "Bad credentials"},
		{"garbage JWT", "GET", "/app/installations", "Bearer a.b.c", "", 401, "Bad credentials"},
		{"token scheme on an App endpoint", "GET", "/app/installations", pat, "", 401, "Bad credentials"},
		{"invalid JSON", "POST", jit, pat, `{"name":`, 400, "Problems parsing JSON"},
		{"unknown field", "POST", jit, pat, `{"name":"x","runner_group_id":1,"labels":["a"],"extra":1}`, 422, "unknown field"},
		{"wrong type", "POST", jit, pat, `{"name":"x","runner_group_id":"one","labels":["a"]}`, 422, "Invalid request"},
		{"trailing data", "POST", jit, pat, `{"name":"x","runner_group_id":1,"labels":["a"]} {}`, 400, "trailing data"},
		{"body too large", "POST", jit, pat, `{"name":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "too large"},
		{"unknown route", "GET", "/repos/acme/app/nothing-here", pat, "", 404, "Not Found"},
		{"non-numeric runner id", "GET", "/repos/acme/app/actions/runners/abc", pat, "", 404, "Not Found"},
		{"labels missing", "POST", "/repos/acme/app/actions/runners/1/labels", pat, `{}`, 422, "labels is required"},
		{"bad per_page", "GET", "/repos/acme/app/actions/runners?per_page=abc", pat, "", 400, "per_page"},
		{"runner register bad JSON", "POST", "/_runner/register", "", `[`, 400, "Problems parsing JSON"},
		{"runner register without token", "POST", "/_runner/register", "", `{"name":"x"}`, 400, "exactly one of token and jit_config"},
		{"runner connect without credential", "POST", "/_runner/connect", "", "", 401, "Bad credentials"},
		{"runner next with bad wait", "POST", "/_runner/jobs/next?wait=soon", "Bearer x", "", 400, "Invalid wait"},
		{"api/v3 prefix still authenticates", "POST", "/api/v3/repos/acme/app/actions/runners/registration-token", "", "", 401, "Bad credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct {
				Message          string `json:"message"`
				DocumentationURL string `json:"documentation_url"`
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("body %q is not JSON: %v", b, err)
			}
			if resp.StatusCode != tt.status || !strings.Contains(e.Message, tt.message) || e.DocumentationURL == "" {
				t.Errorf("got %d %q (doc %q), want %d with a message containing %q", resp.StatusCode, e.Message, e.DocumentationURL, tt.status, tt.message)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
}
