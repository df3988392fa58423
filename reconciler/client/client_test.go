package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/oidcissuer"
)

type countingTokens struct{ n atomic.Int32 }

func (c *countingTokens) Token(context.Context) (string, error) {
	c.n.Add(1)
	return "tok", nil
}

func fastRetry() Retry {
	return Retry{Attempts: 4, Initial: time.Millisecond, Max: 5 * time.Millisecond}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	type answer struct {
		status int
		body   string
	}
	ok := answer{200, `{"run_key":"1:2:1","label":"2","status":"succeeded","runners":[{"instance_id":"i-1","source":"reused"}]}`}
	tests := []struct {
		name      string
		answers   []answer
		wantCalls int32
		wantCode  string // "" for success
	}{
		{"first time", []answer{ok}, 1, ""},
		{"shutting down, then ok", []answer{{503, `{"error":"x","code":"shutting_down","retryable":true}`}, ok}, 2, ""},
		{"proxy 502, then ok", []answer{{502, `<html>bad gateway</html>`}, ok}, 2, ""},
		{"in progress twice, then ok", []answer{{409, `{"error":"x","code":"provision_in_progress","retryable":true}`}, {409, `{"error":"x","code":"provision_in_progress","retryable":true}`}, ok}, 3, ""},
		{"unsuccessful is final", []answer{{503, `{"error":"no capacity","code":"provision_unsuccessful","provision":{"undone":[{"instance_id":"i-9"}]}}`}}, 1, "provision_unsuccessful"},
		{"401 is final", []answer{{401, `{"error":"expired","code":"token_expired"}`}}, 1, "token_expired"},
		{"gives up", []answer{{503, `{"code":"unavailable","retryable":true}`}}, 4, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := int(calls.Add(1)) - 1
				a := tt.answers[min(n, len(tt.answers)-1)]
				if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/json" {
					t.Errorf("request headers %v", r.Header)
				}
				var req apiv1.ProvisionRequest
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Count != 2 {
					t.Errorf("request body: %+v %v", req, err)
				}
				w.WriteHeader(a.status)
				_, _ = w.Write([]byte(a.body))
			}))
			defer srv.Close()
			tokens := &countingTokens{}
			c, err := New(srv.URL+"/", tokens, Options{Retry: fastRetry()})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Provision(t.Context(), apiv1.ProvisionRequest{Count: 2})
			if calls.Load() != tt.wantCalls || tokens.n.Load() != tt.wantCalls {
				t.Errorf("%d calls with %d tokens, want %d each", calls.Load(), tokens.n.Load(), tt.wantCalls)
			}
			if tt.wantCode == "" {
				if err != nil || resp.Label != "2" || len(resp.Runners) != 1 {
					t.Errorf("Provision: %+v %v", resp, err)
				}
				return
			}
			var ae *APIError
			if !errors.As(err, &ae) || ae.Body.Code != tt.wantCode || Code(err) != tt.wantCode {
				t.Errorf("Provision: %v, want code %s", err, tt.wantCode)
			}
			if tt.wantCode == "provision_unsuccessful" && (ae.Body.Provision == nil || ae.Body.Provision.Undone[0].InstanceID != "i-9") {
				t.Errorf("failed provision detail lost: %+v", ae.Body)
			}
		})
	}
}

func TestConnectionRefusedIsRetried(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	tokens := &countingTokens{}
	var retries int
	c, err := New(url, tokens, Options{Retry: fastRetry(), OnRetry: func(int, time.Duration, error) { retries++ }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(t.Context(), apiv1.ReleaseRequest{}); err == nil {
		t.Fatal("release against a closed port succeeded")
	}
	if tokens.n.Load() != 4 || retries != 3 {
		t.Errorf("%d attempts, %d retries; want 4 and 3", tokens.n.Load(), retries)
	}
}

func TestActionsToken(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(nil)
	iss, err := oidcissuer.New("http://" + srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = iss
	srv.Start()
	defer srv.Close()
	iss.SetActionsContext("request-token", map[string]any{"repository": "acme/api", "run_id": "5"})

	env := map[string]string{EnvTokenRequestURL: iss.ActionsTokenURL(), EnvTokenRequestToken: "request-token"}
	at, err := ActionsTokenFromEnv(func(k string) string { return env[k] }, "my-audience")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := at.Token(t.Context())
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a JWT", tok)
	}
	if !strings.Contains(decodeSegment(t, parts[1]), `"aud":"my-audience"`) {
		t.Errorf("token claims %s lack the audience", decodeSegment(t, parts[1]))
	}

	at.RequestToken = "wrong"
	var te *TokenError
	if _, err := at.Token(t.Context()); !errors.As(err, &te) || te.Retryable {
		t.Errorf("wrong request token: %v, want a final TokenError", err)
	}
	if _, err := ActionsTokenFromEnv(func(string) string { return "" }, "aud"); err == nil || !strings.Contains(err.Error(), "id-token: write") {
		t.Errorf("without the variables: %v", err)
	}
}

func decodeSegment(t *testing.T, s string) string {
	t.Helper()
	for len(s)%4 != 0 {
		s += "="
	}
	b, err := base64.URLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteOutputs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(path, []byte("earlier=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values := []Output{
		{Name: "label", Value: "1001"},
		{Name: "runners", Value: "[\n  {\"instance_id\": \"i-1\"}\n]"},
		{Name: "tricky", Value: "EOF\nghadelimiter_\nname<<x"},
	}
	if err := WriteOutputs(path, values); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[0] != "earlier=1" {
		t.Errorf("earlier content lost: %q", lines[0])
	}
	got := map[string]string{}
	for i := 1; i < len(lines); i++ {
		name, delim, ok := strings.Cut(lines[i], "<<")
		if !ok {
			t.Fatalf("line %q is not a heredoc start", lines[i])
		}
		var val []string
		for i++; lines[i] != delim; i++ {
			val = append(val, lines[i])
		}
		got[name] = strings.Join(val, "\n")
	}
	for _, o := range values {
		if got[o.Name] != o.Value {
			t.Errorf("output %s = %q, want %q", o.Name, got[o.Name], o.Value)
		}
	}
	if err := WriteOutputs(path, []Output{{Name: "bad=name", Value: "x"}}); err == nil {
		t.Error("an output name with '=' was accepted")
	}
}
