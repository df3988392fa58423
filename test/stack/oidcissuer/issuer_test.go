// Tests of the local OIDC issuer against coreos/go-oidc, the verifier the reconciler uses: minted tokens
// verify, expired / wrong-audience / wrong-issuer / forged ones do not; /mint, discovery and the Actions
// token endpoint over real HTTP on 127.0.0.1.

package oidcissuer_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/oidcissuer"
)

const aud = "https://runnerpool.example"

// serve starts an issuer on 127.0.0.1 (its URL must be known before the server starts).
func serve(t *testing.T, opts ...oidcissuer.Option) *oidcissuer.Issuer {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	iss, err := oidcissuer.New("http://"+srv.Listener.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = iss
	srv.Start()
	t.Cleanup(srv.Close)
	return iss
}

// verify checks a token as the reconciler does and returns its claims.
func verify(t *testing.T, issuerURL, audience, token string) (map[string]any, error) {
	t.Helper()
	p, err := oidc.NewProvider(t.Context(), issuerURL)
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: audience}).Verify(t.Context(), token)
	if err != nil {
		return nil, err
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		t.Fatalf("claims: %v", err)
	}
	return claims, nil
}

func TestVerifyWithGoOIDC(t *testing.T) {
	t.Parallel()
	iss := serve(t)
	past := serve(t, oidcissuer.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	base := map[string]any{"repository": "acme/app", "repository_id": "123", "run_id": "9876", "run_attempt": "1", "aud": aud}
	with := func(kv ...any) map[string]any {
		c := map[string]any{}
		for k, v := range base {
			c[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	tests := []struct {
		name     string
		issuer   *oidcissuer.Issuer
		mint     func(*oidcissuer.Issuer) (string, error)
		audience string
		want     map[string]any // claims that must be present; nil when verification must fail
	}{
		{"defaults", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(base) }, aud, map[string]any{
			"sub": "repo:acme/app:ref:refs/heads/main", "repository_owner": "acme", "ref": "refs/heads/main",
			"ref_type": "branch", "repository_id": "123", "run_id": "9876", "iss": iss.URL(), "aud": aud,
		}},
		{"default audience is the owner", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(map[string]any{"repository": "acme/app"}) }, "https://github.com/acme", map[string]any{"aud": "https://github.com/acme"}},
		{"environment subject", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(with("environment", "prod")) }, aud, map[string]any{"sub": "repo:acme/app:environment:prod"}},
		{"pull request subject", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(with("event_name", "pull_request")) }, aud, map[string]any{"sub": "repo:acme/app:pull_request"}},
		{"ref in subject", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(with("ref", "refs/tags/v1")) }, aud, map[string]any{"sub": "repo:acme/app:ref:refs/tags/v1"}},
		{"explicit subject", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(with("sub", "custom")) }, aud, map[string]any{"sub": "custom"}},
		{"wrong audience", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(base) }, "https://other.example", nil},
		{"expired", iss, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(with("exp", time.Now().Add(-time.Minute))) }, aud, nil},
		{"expired by the issuer clock", past, func(i *oidcissuer.Issuer) (string, error) { return i.Mint(base) }, aud, nil},
		{"unknown key", iss, func(i *oidcissuer.Issuer) (string, error) { return i.MintWithUnknownKey(base) }, aud, nil},
		{"other issuer", iss, func(i *oidcissuer.Issuer) (string, error) {
			return i.Mint(with("iss", "https://token.actions.githubusercontent.com"))
		}, aud, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, err := tt.mint(tt.issuer)
			if err != nil {
				t.Fatalf("minting: %v", err)
			}
			claims, err := verify(t, tt.issuer.URL(), tt.audience, tok)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("token verified, want a rejection")
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			for k, v := range tt.want {
				if diff := cmp.Diff(v, claims[k]); diff != "" {
					t.Errorf("claim %s (-want +got):\n%s", k, diff)
				}
			}
			exp, iat := claims["exp"].(float64), claims["iat"].(float64)
			if exp-iat != oidcissuer.DefaultLifetime.Seconds() || claims["jti"] == "" || claims["nbf"] == nil {
				t.Errorf("exp-iat = %v, jti %v, nbf %v: want 5m, a jti and nbf", exp-iat, claims["jti"], claims["nbf"])
			}
		})
	}
}

func post(t *testing.T, url, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestMintEndpoint(t *testing.T) {
	t.Parallel()
	iss := serve(t)
	t.Run("mints a verifiable token", func(t *testing.T) {
		t.Parallel()
		status, ct, body := post(t, iss.URL()+"/mint", `{"repository":"acme/app","repository_id":123456789012,"run_id":9007199254740993,"aud":"`+aud+`"}`)
		if status != http.StatusOK || !strings.HasPrefix(ct, "text/plain") {
			t.Fatalf("POST /mint = %d %s %q", status, ct, body)
		}
		claims, err := verify(t, iss.URL(), aud, body)
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if claims["sub"] != "repo:acme/app:ref:refs/heads/main" {
			t.Errorf("sub = %v", claims["sub"])
		}
		// Numbers stay exact integers in the token (decoded here as json.Number to check).
		payload := strings.Split(body, ".")[1]
		raw, err := decodeSegment(payload)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(raw, `"run_id":9007199254740993`) || !strings.Contains(raw, `"repository_id":123456789012`) {
			t.Errorf("payload %s lost integer precision", raw)
		}
	})
	bad := []struct {
		name   string
		method string
		body   string
		status int
	}{
		{"bad JSON", http.MethodPost, `{"repository":`, http.StatusBadRequest},
		{"array", http.MethodPost, `["a"]`, http.StatusBadRequest},
		{"null", http.MethodPost, `null`, http.StatusBadRequest},
		{"trailing data", http.MethodPost, `{} {}`, http.StatusBadRequest},
		{"GET", http.MethodGet, ``, http.StatusMethodNotAllowed},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, iss.URL()+"/mint", strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Message string `json:"message"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != tt.status || e.Message == "" {
				t.Errorf("got %d %q (%v), want %d with a JSON message", resp.StatusCode, e.Message, err, tt.status)
			}
		})
	}
}

func TestDiscovery(t *testing.T) {
	t.Parallel()
	iss := serve(t)
	resp, err := http.Get(iss.URL() + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Issuer    string   `json:"issuer"`
		JWKSURI   string   `json:"jwks_uri"`
		Responses []string `json:"response_types_supported"`
		Subjects  []string `json:"subject_types_supported"`
		Algs      []string `json:"id_token_signing_alg_values_supported"`
		Claims    []string `json:"claims_supported"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Issuer != iss.URL() || doc.JWKSURI != iss.URL()+"/.well-known/jwks" || len(doc.Responses) == 0 || len(doc.Subjects) == 0 {
		t.Errorf("discovery = %+v", doc)
	}
	if diff := cmp.Diff([]string{"RS256"}, doc.Algs); diff != "" {
		t.Errorf("algs (-want +got):\n%s", diff)
	}
	for _, c := range []string{"repository_id", "run_id", "run_attempt", "repository_owner", "sub", "aud"} {
		if !strings.Contains(strings.Join(doc.Claims, " "), c) {
			t.Errorf("claims_supported lacks %s", c)
		}
	}
	jr, err := http.Get(doc.JWKSURI)
	if err != nil {
		t.Fatal(err)
	}
	defer jr.Body.Close()
	var ks struct {
		Keys []struct {
			Kty, Kid, Alg, Use, N, E string
		} `json:"keys"`
	}
	if err := json.NewDecoder(jr.Body).Decode(&ks); err != nil || len(ks.Keys) != 1 {
		t.Fatalf("JWKS = %+v, %v", ks, err)
	}
	if k := ks.Keys[0]; k.Kty != "RSA" || k.Alg != "RS256" || k.Use != "sig" || k.Kid == "" || k.N == "" {
		t.Errorf("key = %+v", k)
	}
}

func TestActionsTokenEndpoint(t *testing.T) {
	t.Parallel()
	claims := map[string]any{"repository": "acme/app", "repository_id": "42", "run_id": "777", "run_attempt": "2"}
	iss := serve(t, oidcissuer.WithActionsContext("req-token", claims))
	unconfigured := serve(t)
	tests := []struct {
		name     string
		issuer   *oidcissuer.Issuer
		auth     string
		audience string
		status   int
	}{
		{"with audience", iss, "Bearer req-token", aud, http.StatusOK},
		{"lower-case scheme", iss, "bearer req-token", aud, http.StatusOK},
		{"default audience", iss, "Bearer req-token", "", http.StatusOK},
		{"wrong request token", iss, "Bearer nope", aud, http.StatusUnauthorized},
		{"no request token", iss, "", aud, http.StatusUnauthorized},
		{"no actions context", unconfigured, "Bearer req-token", aud, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := tt.issuer.ActionsTokenURL()
			if tt.audience != "" {
				u += "&audience=" + tt.audience // what @actions/core's getIDToken does
			}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct {
				Value   string `json:"value"`
				Message string `json:"message"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d (%s), want %d", resp.StatusCode, out.Message, tt.status)
			}
			if tt.status != http.StatusOK {
				return
			}
			wantAud := tt.audience
			if wantAud == "" {
				wantAud = "https://github.com/acme"
			}
			got, err := verify(t, iss.URL(), wantAud, out.Value)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			for _, k := range []string{"repository_id", "run_id", "run_attempt"} {
				if got[k] != claims[k] {
					t.Errorf("claim %s = %v, want %v", k, got[k], claims[k])
				}
			}
		})
	}
	t.Run("context can change", func(t *testing.T) {
		t.Parallel()
		i := serve(t)
		i.SetActionsContext("other", map[string]any{"repository": "acme/web", "aud": aud})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, i.ActionsTokenURL(), nil)
		req.Header.Set("Authorization", "Bearer other")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Value string }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		got, err := verify(t, i.URL(), aud, out.Value)
		if err != nil || got["sub"] != "repo:acme/web:ref:refs/heads/main" {
			t.Errorf("claims = %v, %v", got, err)
		}
	})
}

func TestIssuerUnderPath(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	iss, err := oidcissuer.New("http://" + srv.Listener.Addr().String() + "/oidc")
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/oidc/", iss)
	srv.Start()
	defer srv.Close()
	tok, err := iss.Mint(map[string]any{"repository": "acme/app", "aud": aud})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verify(t, iss.URL(), aud, tok); err != nil {
		t.Errorf("Verify under /oidc: %v", err)
	}
}

func decodeSegment(seg string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	return string(b), err
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:80", "ftp://x", "http://", "http://x/?a=b", "http://x/#f"} {
		if _, err := oidcissuer.New(u); err == nil {
			t.Errorf("New(%q) succeeded, want an error", u)
		}
	}
}
