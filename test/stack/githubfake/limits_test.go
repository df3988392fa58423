// Tests of GitHub's documented REST limits as the fake enforces them (limits.go), observed through
// go-github as the product sees them.

package githubfake_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestPrimaryRateLimit: each caller has its own budget; every answer says what is left, and past the
// budget GitHub answers 403 (or 429) with x-ratelimit-remaining: 0 and the reset time.
func TestPrimaryRateLimit(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusForbidden, http.StatusTooManyRequests} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			fake, base := newFake(t, githubfake.Options{})
			fake.SetLimits(githubfake.Limits{Primary: 3, Status: status})
			for i := range 3 {
				_, resp, err := tokenClient(t, base, fake.PAT()).Actions.ListRunners(t.Context(), "acme", "app", nil)
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if resp.Rate.Limit != 3 || resp.Rate.Remaining != 2-i || resp.Rate.Reset.Before(time.Now().Add(50*time.Minute)) {
					t.Errorf("call %d: rate %+v, want limit 3, remaining %d, reset in an hour", i+1, resp.Rate, 2-i)
				}
			}
			_, _, err := tokenClient(t, base, fake.PAT()).Actions.CreateRegistrationToken(t.Context(), "acme", "app")
			var rl *github.RateLimitError
			switch {
			case status == http.StatusForbidden && !errors.As(err, &rl):
				t.Fatalf("err = %T %v, want *github.RateLimitError", err, err)
			case status == http.StatusTooManyRequests && statusOf(err) != status:
				t.Fatalf("err = %T %v, want a 429", err, err)
			}
			var er *github.ErrorResponse
			if errors.As(err, &er) && er.Response.Header.Get("X-RateLimit-Remaining") != "0" {
				t.Errorf("x-ratelimit-remaining = %q, want 0", er.Response.Header.Get("X-RateLimit-Remaining"))
			}
			// Another caller (an App installation) has its own budget.
			_, inst, _ := appClients(t, base, testAppID, fake.AppPrivateKeyPEM(), fake.AddInstallation("acme"))
			if _, _, err := inst.Actions.ListRunners(t.Context(), "acme", "app", nil); err != nil {
				t.Errorf("another caller: %v", err)
			}
			if u := fake.Usage(); u.Refused != 1 {
				t.Errorf("Usage = %+v, want 1 refused", u)
			}
		})
	}
}

// TestSecondaryRateLimit: GET costs 1 point and a write 5; past the budget the answer is a
// secondary limit with retry-after until the window ends, and refused calls are not charged.
func TestSecondaryRateLimit(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	fake.SetLimits(githubfake.Limits{Points: 12})
	gh := func() *github.Client { return tokenClient(t, base, fake.PAT()) }
	ctx := t.Context()
	for i := range 2 {
		if _, _, err := gh().Actions.CreateRegistrationToken(ctx, "acme", "app"); err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	for i := range 2 {
		if _, _, err := gh().Actions.ListRunners(ctx, "acme", "app", nil); err != nil {
			t.Fatalf("read %d: %v", i+1, err)
		}
	}
	_, _, err := gh().Actions.CreateRemoveToken(ctx, "acme", "app")
	var abuse *github.AbuseRateLimitError
	if !errors.As(err, &abuse) || abuse.RetryAfter == nil || *abuse.RetryAfter <= 0 || *abuse.RetryAfter > time.Minute {
		t.Fatalf("a write past 12 points: %T %v, want a secondary limit with retry-after within a minute", err, err)
	}
	if u := fake.Usage(); u.Requests != 4 || u.Points != 12 || u.Refused != 1 {
		t.Errorf("Usage = %+v, want 4 requests, 12 points, 1 refused", u)
	}
}

// TestConcurrentRequestLimit: a caller past its concurrent requests gets a secondary limit.
func TestConcurrentRequestLimit(t *testing.T) {
	t.Parallel()
	fake := githubfake.New(githubfake.Options{AppPrivateKeyPEM: testKeyPEM()})
	t.Cleanup(fake.Close)
	fake.SetLimits(githubfake.Limits{Concurrent: 1})
	req := func() *http.Request {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/repos/acme/app/actions/runners", nil)
		r.Header.Set("Authorization", "token "+fake.PAT())
		return r
	}
	// The first request is held in flight: its answer cannot be written until the test lets it.
	held := &blockingWriter{ResponseRecorder: httptest.NewRecorder(), writing: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() { defer close(done); fake.ServeHTTP(held, req()) }()
	<-held.writing
	second := httptest.NewRecorder()
	fake.ServeHTTP(second, req())
	if second.Code != http.StatusForbidden || second.Header().Get("Retry-After") == "" {
		t.Errorf("second concurrent request: %d retry-after %q, want 403 with retry-after", second.Code, second.Header().Get("Retry-After"))
	}
	close(held.release)
	<-done
	third := httptest.NewRecorder()
	fake.ServeHTTP(third, req())
	if held.Code != http.StatusOK || third.Code != http.StatusOK {
		t.Errorf("held %d, after it %d: want 200s", held.Code, third.Code)
	}
}

type blockingWriter struct {
	*httptest.ResponseRecorder
	once             bool
	writing, release chan struct{}
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	if !b.once {
		b.once = true
		close(b.writing)
		<-b.release
	}
	return b.ResponseRecorder.Write(p)
}

// TestOutage: during an outage every REST call answers 503; the runner protocol still works, and the
// API is back once the outage ends.
func TestOutage(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	tok := registrationToken(t, base, fake.PAT())
	fake.SetOutage(time.Hour)
	if _, _, err := tokenClient(t, base, fake.PAT()).Actions.ListRunners(t.Context(), "acme", "app", nil); statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("during the outage: %v, want 503", err)
	}
	rc := githubfake.NewRunnerClient(base, nil)
	if _, err := rc.Register(t.Context(), githubfake.RegisterOptions{URL: base + "/acme/app", Token: tok, Name: "r1", Labels: []string{"x"}}); err != nil {
		t.Errorf("the runner protocol during a REST outage: %v", err)
	}
	fake.SetOutage(0)
	if _, _, err := tokenClient(t, base, fake.PAT()).Actions.ListRunners(t.Context(), "acme", "app", nil); err != nil {
		t.Errorf("after the outage: %v", err)
	}
}
