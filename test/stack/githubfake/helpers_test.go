// Shared helpers of the githubfake tests: a fake served on 127.0.0.1, go-github clients pointed at it,
// and a clock tests can move.

package githubfake_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const testAppID = 4242

// testKeyPEM is one App key for the whole test binary: generating RSA keys under -race is slow.
var testKeyPEM = sync.OnceValue(func() []byte {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
})

// t0 is the start time of fake clocks.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// clock is a fake clock that starts at t0.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return t0.Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// newFake serves a fake on 127.0.0.1 for the test and returns it with its base URL.
func newFake(t *testing.T, opts githubfake.Options) (*githubfake.Server, string) {
	t.Helper()
	if opts.AppPrivateKeyPEM == nil {
		opts.AppPrivateKeyPEM = testKeyPEM()
	}
	if opts.AppID == 0 {
		opts.AppID = testAppID
	}
	fake := githubfake.New(opts)
	srv := httptest.NewServer(fake)
	t.Cleanup(func() {
		fake.Close() // wakes long polls first, so srv.Close does not wait for them
		srv.Close()
	})
	return fake, srv.URL
}

// tokenClient is a go-github client authenticating with a token, through the GHES-style /api/v3 prefix.
func tokenClient(t *testing.T, baseURL, token string) *github.Client {
	t.Helper()
	gh, err := github.NewClient(nil).WithAuthToken(token).WithEnterpriseURLs(baseURL+"/", baseURL+"/")
	if err != nil {
		t.Fatalf("WithEnterpriseURLs: %v", err)
	}
	return gh
}

// clientWithBase is a go-github client on rt whose BaseURL is the fake's root (no /api/v3).
func clientWithBase(t *testing.T, baseURL string, rt http.RoundTripper) *github.Client {
	t.Helper()
	gh := github.NewClient(&http.Client{Transport: rt})
	u, err := url.Parse(baseURL + "/")
	if err != nil {
		t.Fatal(err)
	}
	gh.BaseURL = u
	return gh
}

// statusOf returns the HTTP status of a go-github error, 0 when there is none.
func statusOf(err error) int {
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return er.Response.StatusCode
	}
	return 0
}
