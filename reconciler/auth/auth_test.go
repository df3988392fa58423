package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/oidcissuer"
)

const audience = "runnerpool-test"

func issuer(t *testing.T) *oidcissuer.Issuer {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	iss, err := newIssuer(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return iss
}

// newIssuer starts srv serving a local issuer at its own address.
func newIssuer(srv *httptest.Server) (*oidcissuer.Issuer, error) {
	iss, err := oidcissuer.New("http://" + srv.Listener.Addr().String())
	if err != nil {
		return nil, err
	}
	srv.Config.Handler = iss
	srv.Start()
	return iss, nil
}

func claims(extra map[string]any) map[string]any {
	c := map[string]any{
		"repository": "acme/api", "repository_id": "4242", "repository_owner": "acme", "run_id": "1001", "run_attempt": "2", "aud": audience,
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	iss := issuer(t)
	v, err := auth.New(auth.Config{Issuer: iss.URL(), Audience: audience, Allowed: []string{"ACME/api", "trusted"}})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(extra map[string]any) string {
		tok, err := iss.Mint(claims(extra))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	unknown, err := iss.MintWithUnknownKey(claims(nil))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tests := []struct {
		name   string
		header string
		want   auth.Identity // compared on the ids when no error is wanted
		status int
		code   string
	}{
		{"valid", "Bearer " + mint(nil), auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: "1001", RunAttempt: 2}, 0, ""},
		{"lower-case scheme", "bearer " + mint(nil), auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: "1001", RunAttempt: 2}, 0, ""},
		{"numbers instead of strings", "Bearer " + mint(map[string]any{"repository_id": 4242, "run_id": 1001, "run_attempt": 3}),
			auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: "1001", RunAttempt: 3}, 0, ""},
		{"owner allowed", "Bearer " + mint(map[string]any{"repository": "trusted/x", "repository_owner": "trusted", "repository_id": "7"}),
			auth.Identity{Repository: "trusted/x", RepositoryID: "7", RepositoryOwner: "trusted", RunID: "1001", RunAttempt: 2}, 0, ""},
		{"audience among several", "Bearer " + mint(map[string]any{"aud": []string{"other", audience}}),
			auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: "1001", RunAttempt: 2}, 0, ""},
		{"event name", "Bearer " + mint(map[string]any{"event_name": "pull_request"}),
			auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: "1001", RunAttempt: 2, Event: "pull_request"}, 0, ""},
		{"bad event name", "Bearer " + mint(map[string]any{"event_name": "push;x"}), auth.Identity{}, 401, apiv1.CodeInvalidClaims},
		// The cache scope's ref and base ref (cache.ScopeOf); a ref that is not one is dropped
		// ("none": no cache of ours for the run), not refused.
		{"ref and base ref", "Bearer " + mint(map[string]any{"ref": "refs/pull/7/merge", "base_ref": "main"}),
			auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: "1001", RunAttempt: 2, Ref: "refs/pull/7/merge", BaseRef: "main"}, 0, ""},
		{"ref with a space", "Bearer " + mint(map[string]any{"ref": "refs/heads/a b", "base_ref": "main"}),
			auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: "1001", RunAttempt: 2, Ref: "none"}, 0, ""},
		{"no header", "", auth.Identity{}, 401, apiv1.CodeMissingToken},
		{"basic scheme", "Basic dXNlcjpwYXNz", auth.Identity{}, 401, apiv1.CodeMissingToken},
		{"empty bearer", "Bearer ", auth.Identity{}, 401, apiv1.CodeMissingToken},
		{"garbage", "Bearer abc.def.ghi", auth.Identity{}, 401, apiv1.CodeInvalidToken},
		{"unknown key", "Bearer " + unknown, auth.Identity{}, 401, apiv1.CodeInvalidToken},
		{"bad signature", "Bearer " + mint(nil)[:len(mint(nil))-4] + "AAAA", auth.Identity{}, 401, apiv1.CodeInvalidToken},
		{"other issuer", "Bearer " + mint(map[string]any{"iss": "https://token.actions.githubusercontent.com"}), auth.Identity{}, 401, apiv1.CodeInvalidToken},
		{"expired", "Bearer " + mint(map[string]any{"iat": now.Add(-time.Hour), "nbf": now.Add(-time.Hour), "exp": now.Add(-time.Minute)}), auth.Identity{}, 401, apiv1.CodeTokenExpired},
		{"wrong audience", "Bearer " + mint(map[string]any{"aud": "https://github.com/acme"}), auth.Identity{}, 401, apiv1.CodeWrongAudience},
		{"no repository id", "Bearer " + mint(map[string]any{"repository_id": nil}), auth.Identity{}, 401, apiv1.CodeInvalidClaims},
		{"non-numeric run id", "Bearer " + mint(map[string]any{"run_id": "12a"}), auth.Identity{}, 401, apiv1.CodeInvalidClaims},
		{"bad attempt", "Bearer " + mint(map[string]any{"run_attempt": "0"}), auth.Identity{}, 401, apiv1.CodeInvalidClaims},
		{"fractional id", "Bearer " + mint(map[string]any{"run_id": 1.5}), auth.Identity{}, 401, apiv1.CodeInvalidClaims},
		{"not allowed", "Bearer " + mint(map[string]any{"repository": "acme/other"}), auth.Identity{}, 403, apiv1.CodeNotAllowed},
		{"owner claim disagrees", "Bearer " + mint(map[string]any{"repository_owner": "trusted"}), auth.Identity{}, 403, apiv1.CodeNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/v1/pools", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			id, err := v.Authenticate(r)
			if tt.status == 0 {
				if err != nil {
					t.Fatalf("Authenticate: %v", err)
				}
				if id.Repository != tt.want.Repository || id.RepositoryID != tt.want.RepositoryID || id.RepositoryOwner != tt.want.RepositoryOwner ||
					id.RunID != tt.want.RunID || id.RunAttempt != tt.want.RunAttempt || id.Event != tt.want.Event {
					t.Errorf("identity %+v, want %+v", id, tt.want)
				}
				switch tt.want.Ref {
				case "":
				case "none":
					if id.Ref != "" || id.BaseRef != "" {
						t.Errorf("ref %q, base ref %q: want none", id.Ref, id.BaseRef)
					}
				default:
					if id.Ref != tt.want.Ref || id.BaseRef != tt.want.BaseRef {
						t.Errorf("ref %q, base ref %q: want %q, %q", id.Ref, id.BaseRef, tt.want.Ref, tt.want.BaseRef)
					}
				}
				return
			}
			var ae *auth.Error
			if !errors.As(err, &ae) || ae.Status != tt.status || ae.Code != tt.code {
				t.Errorf("Authenticate: %v (%+v), want %d %s", err, ae, tt.status, tt.code)
			}
		})
	}
}

func TestCheckRun(t *testing.T) {
	t.Parallel()
	id := auth.Identity{RepositoryID: "4242", RunID: "1001"}
	for _, tt := range []struct {
		repo, run, code string
	}{
		{"4242", "1001", ""},
		{"4242", "1002", apiv1.CodeOtherRun},
		{"5555", "1001", apiv1.CodeOtherRepository},
		{"5555", "1002", apiv1.CodeOtherRepository},
	} {
		err := id.CheckRun(tt.repo, tt.run)
		var ae *auth.Error
		switch {
		case tt.code == "" && err != nil:
			t.Errorf("CheckRun(%s, %s): %v", tt.repo, tt.run, err)
		case tt.code != "" && (!errors.As(err, &ae) || ae.Code != tt.code || ae.Status != http.StatusForbidden):
			t.Errorf("CheckRun(%s, %s): %v, want 403 %s", tt.repo, tt.run, err, tt.code)
		}
	}
}

func TestIssuerUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	v, err := auth.New(auth.Config{Issuer: srv.URL, Audience: audience, Allowed: []string{"acme"}})
	if err != nil {
		t.Fatal(err)
	}
	// A well-formed token of the issuer cannot be judged: 503. A malformed one is 401 all the same.
	forged := newForger(t).forge(t, srv.URL, "k1")
	_, err = v.Verify(t.Context(), forged)
	var ae *auth.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != apiv1.CodeUnavailable {
		t.Errorf("Verify with the issuer down: %v, want 503 unavailable", err)
	}
	_, err = v.Verify(t.Context(), "a.b.c")
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Code != apiv1.CodeInvalidToken {
		t.Errorf("Verify of garbage with the issuer down: %v, want 401 invalid_token", err)
	}
	if err := v.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "discovery") {
		t.Errorf("Ready with the issuer down: %v", err)
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	t.Parallel()
	_, err := auth.New(auth.Config{})
	for _, want := range []string{"issuer", "audience", "allowed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(empty): %v, want it to mention %s", err, want)
		}
	}
}

// TestIssuerDownAtStartUp: discovery hangs (the issuer is down behind a load balancer), then the
// issuer answers slowly, slower than the readiness probes wait. Discovery does not run on a probe's
// context: probes give up at their own deadlines, and discovery completes for everyone, so the
// replica becomes ready.
func TestIssuerDownAtStartUp(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	srv := httptest.NewUnstartedServer(nil)
	iss, err := oidcissuer.New("http://" + srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			select { // hangs until the client gives up
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
				http.Error(w, "down", http.StatusServiceUnavailable)
			}
			return
		}
		if strings.Contains(r.URL.Path, "openid-configuration") {
			time.Sleep(300 * time.Millisecond) // slower than any probe waits
		}
		iss.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close)
	v, err := auth.New(auth.Config{Issuer: iss.URL(), Audience: audience, Allowed: []string{"acme"}})
	if err != nil {
		t.Fatal(err)
	}
	probe := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		return v.Ready(ctx)
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if err := probe(); err == nil {
				t.Error("ready while the issuer is down")
			}
		})
	}
	wg.Wait()
	up.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := probe()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not ready 20 s after the issuer came up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
