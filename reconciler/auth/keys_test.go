package auth_test

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/oidcissuer"
)

// countingIssuer serves a local issuer, counts the requests for its key set and can be made to
// fail every request (down) or those for its key set (keysDown) while it still listens.
type countingIssuer struct {
	*oidcissuer.Issuer
	jwks     atomic.Int64
	down     atomic.Bool
	keysDown atomic.Bool
}

func newCountingIssuer(t *testing.T) *countingIssuer {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	iss, err := oidcissuer.New("http://" + srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ci := &countingIssuer{Issuer: iss}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys := r.URL.Path == "/.well-known/jwks"
		if keys {
			ci.jwks.Add(1)
		}
		if ci.down.Load() || (keys && ci.keysDown.Load()) {
			http.Error(w, "issuer outage", http.StatusServiceUnavailable)
			return
		}
		iss.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return ci
}

// forger signs tokens with a key of its own: what an attacker can make, every claim right but the
// signature, under a key id of its choosing.
type forger struct {
	key *rsa.PrivateKey
}

func newForger(t *testing.T) *forger {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &forger{key: key}
}

func (f *forger) forge(t *testing.T, issuerURL, kid string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: f.key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	c := claims(nil)
	now := time.Now()
	c["iss"], c["iat"], c["nbf"], c["exp"] = issuerURL, now.Unix(), now.Unix(), now.Add(5*time.Minute).Unix()
	tok, err := jwt.Signed(signer).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func wantRejected(t *testing.T, err error, status int, code string) {
	t.Helper()
	var ae *auth.Error
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
}

// TestForgedTokensDoNotFetchKeys: forged tokens naming unknown key ids cost at most one key set
// fetch per refetch interval, however many arrive; a token naming a known key id with a bad
// signature costs none; and while the issuer is down, forged tokens are still 401 and the genuine
// ones still verify against the cached keys.
func TestForgedTokensDoNotFetchKeys(t *testing.T) {
	t.Parallel()
	iss := newCountingIssuer(t)
	clock := &fakeClock{t: time.Now()}
	v, err := auth.New(auth.Config{Issuer: iss.URL(), Audience: audience, Allowed: []string{"acme"}, Now: clock.Now, RefetchInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	good, err := iss.Mint(claims(nil))
	if err != nil {
		t.Fatal(err)
	}
	sameKid, err := iss.MintWithUnknownKey(claims(nil))
	if err != nil {
		t.Fatal(err)
	}
	f := newForger(t)
	forged := func(n int) {
		t.Helper()
		for i := range n {
			_, err := v.Verify(t.Context(), f.forge(t, iss.URL(), "forged-"+string(rune('a'+i%26))+time.Now().Format("150405.000000000")))
			wantRejected(t, err, http.StatusUnauthorized, apiv1.CodeInvalidToken)
		}
	}
	check := func(step string, want int64) {
		t.Helper()
		if got := iss.jwks.Load(); got != want {
			t.Errorf("%s: %d key set fetches, want %d", step, got, want)
		}
		if got := v.KeySetFetches(); int64(got) != want {
			t.Errorf("%s: verifier counts %d fetches, want %d", step, got, want)
		}
	}

	if _, err := v.Verify(t.Context(), good); err != nil {
		t.Fatalf("genuine token: %v", err)
	}
	check("first genuine token", 1)

	forged(20)
	check("20 forged tokens right after the first fetch", 1)

	_, err = v.Verify(t.Context(), sameKid)
	wantRejected(t, err, http.StatusUnauthorized, apiv1.CodeInvalidToken)
	check("known key id, bad signature", 1)

	clock.Add(time.Minute + time.Second)
	forged(20)
	check("20 forged tokens an interval later", 2)

	iss.down.Store(true)
	clock.Add(time.Minute + time.Second)
	forged(20)
	check("20 forged tokens with the issuer down", 3)
	if _, err := v.Verify(t.Context(), good); err != nil {
		t.Errorf("genuine token with the issuer down: %v", err)
	}
	check("genuine token with the issuer down", 3)
}

// TestNoKeySetYet: before any key set was fetched and with the issuer down, a well-formed token of
// the issuer cannot be judged (503, retryable; fetches at most once a second), while malformed
// tokens and tokens of another issuer are 401 without asking the issuer.
func TestNoKeySetYet(t *testing.T) {
	t.Parallel()
	iss := newCountingIssuer(t)
	clock := &fakeClock{t: time.Now()}
	v, err := auth.New(auth.Config{Issuer: iss.URL(), Audience: audience, Allowed: []string{"acme"}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Ready(t.Context()); err != nil { // discovery
		t.Fatalf("Ready: %v", err)
	}
	if n := iss.jwks.Load(); n != 1 {
		t.Fatalf("Ready fetched the key set %d times, want 1", n)
	}

	iss2 := newCountingIssuer(t)
	v2, err := auth.New(auth.Config{Issuer: iss2.URL(), Audience: audience, Allowed: []string{"acme"}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	f := newForger(t)
	// Discovery succeeds, the key set cannot be read.
	iss2.keysDown.Store(true)
	for _, tt := range []struct {
		name, token string
		status      int
		code        string
	}{
		{"garbage", "a.b.c", 401, apiv1.CodeInvalidToken},
		{"another issuer", f.forge(t, "https://token.actions.githubusercontent.com", "k1"), 401, apiv1.CodeInvalidToken},
		{"unsigned", "eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.", 401, apiv1.CodeInvalidToken},
		{"well-formed, issuer never reached", f.forge(t, iss2.URL(), "k1"), 503, apiv1.CodeUnavailable},
	} {
		_, err := v2.Verify(t.Context(), tt.token)
		var ae *auth.Error
		if !errors.As(err, &ae) || ae.Status != tt.status || ae.Code != tt.code {
			t.Errorf("%s: %v, want %d %s", tt.name, err, tt.status, tt.code)
		}
	}
	if n := iss2.jwks.Load(); n != 1 {
		t.Errorf("%d key set fetches, want 1 (only for the well-formed token of the issuer)", n)
	}
	before := iss2.jwks.Load()
	for range 10 {
		_, _ = v2.Verify(t.Context(), f.forge(t, iss2.URL(), "k2"))
	}
	if n := iss2.jwks.Load() - before; n > 1 {
		t.Errorf("10 tokens within a second with no keys held: %d fetches, want at most 1", n)
	}
}
