package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
)

// BenchmarkAuthenticate measures verifying one request's token with the key set cached: the
// control plane's cost per API call.
func BenchmarkAuthenticate(b *testing.B) {
	srv := httptest.NewUnstartedServer(nil)
	iss, err := newIssuer(srv)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	v, err := auth.New(auth.Config{Issuer: iss.URL(), Audience: audience, Allowed: []string{"acme"}})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := iss.Mint(claims(nil))
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/pools", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if _, err := v.Authenticate(r); err != nil { // discovery and the first key fetch
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Authenticate(r); err != nil {
			b.Fatal(err)
		}
	}
}
