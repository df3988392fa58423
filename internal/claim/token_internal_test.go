package claim

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
)

// A failed mint is not kept: its caller hears the error, the next caller mints again, and a
// success is then shared.
func TestTokenSourceForgetsAFailedMint(t *testing.T) {
	t.Parallel()
	mints := 0
	ts := &TokenSource{mint: func(context.Context) (ghaccess.RunnerToken, error) {
		mints++
		if mints == 1 {
			return ghaccess.RunnerToken{}, errors.New("GitHub answered 502")
		}
		return ghaccess.RunnerToken{Token: "tok", URL: "https://github.com/acme/api"}, nil
	}}
	ts.Start(t.Context())
	if _, err := ts.Token(t.Context()); err == nil {
		// The background mint failed; this caller minted again and succeeded: also fine.
		if mints != 2 {
			t.Fatalf("Token succeeded after %d mints", mints)
		}
	}
	for range 3 {
		if tok, err := ts.Token(t.Context()); err != nil || tok.Token != "tok" {
			t.Fatalf("Token = %+v, %v; want the fresh token", tok, err)
		}
	}
	if mints != 2 {
		t.Errorf("%d mints, want 2 (the failed one and one shared success)", mints)
	}
}

// Callers that arrive together with no mint started share the first one's mint (the claim workers
// of a request that passed no token: TestClaimNHappyPath saw two mints when each minted alone).
func TestTokenSourceConcurrentFirstCallersMintOnce(t *testing.T) {
	t.Parallel()
	var mints atomic.Int32
	release := make(chan struct{})
	ts := &TokenSource{mint: func(context.Context) (ghaccess.RunnerToken, error) {
		mints.Add(1)
		<-release
		return ghaccess.RunnerToken{Token: "tok", URL: "https://github.com/acme/api"}, nil
	}}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if tok, err := ts.Token(t.Context()); err != nil || tok.Token != "tok" {
				t.Errorf("Token = %+v, %v", tok, err)
			}
		})
	}
	time.Sleep(20 * time.Millisecond) // let the callers queue behind the first mint
	close(release)
	wg.Wait()
	if n := mints.Load(); n != 1 {
		t.Errorf("%d mints for 10 concurrent first callers, want 1", n)
	}
}
