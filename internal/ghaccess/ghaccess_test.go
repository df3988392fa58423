package ghaccess_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

func newFake(t *testing.T) (*githubfake.Server, string) {
	t.Helper()
	fake := githubfake.New(githubfake.Options{AppID: 4242})
	srv := httptest.NewServer(fake)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	return fake, srv.URL
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  ghaccess.Config
		want string
	}{
		{"nothing", ghaccess.Config{}, "token or an app id"},
		{"both", ghaccess.Config{Token: "x", AppID: 1}, "either a token or an app"},
		{"bad url", ghaccess.Config{Token: "x", APIURL: "ftp://x"}, "http(s) URL"},
		{"bad key", ghaccess.Config{AppID: 1, PrivateKeyPEM: []byte("nope")}, "private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ghaccess.New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseScope(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"acme", "acme/api", "a-b/c.d_e"} {
		if _, _, err := ghaccess.ParseScope(ok); err != nil {
			t.Errorf("ParseScope(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/x", "acme/", "acme/api/x", "ac me", "acme/..", "-acme"} {
		if _, _, err := ghaccess.ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) = nil, want error", bad)
		}
	}
}

func TestTokensRunnersAndCancelWithPAT(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	c, err := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, scope := range []string{"acme/api", "acme"} {
		reg, err := c.RegistrationToken(ctx, scope)
		if err != nil {
			t.Fatalf("RegistrationToken(%s): %v", scope, err)
		}
		if reg.Token == "" || reg.URL != url+"/"+scope || reg.ExpiresAt.Before(time.Now()) {
			t.Errorf("RegistrationToken(%s) = %+v", scope, reg)
		}
		rm, err := c.RemoveToken(ctx, scope)
		if err != nil || rm.Token == "" || rm.Token == reg.Token {
			t.Errorf("RemoveToken(%s) = %+v, %v", scope, rm, err)
		}
	}

	// A runner registered through the runner protocol shows up in the list and can be deleted.
	reg, _ := c.RegistrationToken(ctx, "acme/api")
	rc := githubfake.NewRunnerClient(url, nil)
	if _, err := rc.Register(ctx, githubfake.RegisterOptions{URL: reg.URL, Token: reg.Token, Name: "runnerpool-i-1", Labels: []string{"run-1"}}); err != nil {
		t.Fatalf("registering a runner: %v", err)
	}
	runners, err := c.ListRunners(ctx, "acme/api")
	if err != nil || len(runners) != 1 || runners[0].Name != "runnerpool-i-1" {
		t.Fatalf("ListRunners = %+v, %v", runners, err)
	}
	if !contains(runners[0].Labels, "run-1") {
		t.Errorf("labels = %v, want run-1 among them", runners[0].Labels)
	}
	if err := c.DeleteRunner(ctx, "acme/api", runners[0].ID); err != nil {
		t.Fatalf("DeleteRunner: %v", err)
	}
	if err := c.DeleteRunner(ctx, "acme/api", runners[0].ID); err != nil {
		t.Errorf("DeleteRunner of a gone runner = %v, want nil", err)
	}
	if err := c.CancelRun(ctx, "acme/api", 77); err != nil {
		t.Fatalf("CancelRun: %v", err)
	}
	if got := fake.CancelledRuns(); len(got) != 1 {
		t.Errorf("CancelledRuns = %+v, want one", got)
	}
	if err := c.CancelRun(ctx, "acme", 77); err == nil {
		t.Error("CancelRun on an owner scope succeeded")
	}
}

func TestAppInstallationTokens(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	fake.AddInstallation("acme")
	c, err := ghaccess.New(ghaccess.Config{APIURL: url, AppID: 4242, PrivateKeyPEM: fake.AppPrivateKeyPEM()})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.RegistrationToken(t.Context(), "acme/api")
	if err != nil || tok.Token == "" {
		t.Fatalf("RegistrationToken through the app = %+v, %v", tok, err)
	}
	if _, err := c.RegistrationToken(t.Context(), "other/api"); err == nil {
		t.Error("an owner without an installation got a token")
	}
}

func TestRateLimitsAreWaitedOut(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	c, err := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT(), MaxRetryWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fake.SetSecondaryRateLimit(1, 100*time.Millisecond)
	if _, err := c.RegistrationToken(t.Context(), "acme/api"); err != nil {
		t.Fatalf("after a secondary rate limit: %v", err)
	}
	fake.SetTooManyRequests(1, 100*time.Millisecond)
	if _, err := c.ListRunners(t.Context(), "acme/api"); err != nil {
		t.Fatalf("after a 429: %v", err)
	}
	// A wait past the caller's deadline is an error at once, not a hang.
	fake.SetSecondaryRateLimit(1, time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := c.RemoveToken(ctx, "acme/api"); err == nil || ctx.Err() != nil {
		t.Fatalf("a one-hour Retry-After: %v (context %v), want an error before the deadline", err, ctx.Err())
	}
	// An absurd Retry-After is capped at MaxRetryWait and waited out when the deadline allows.
	capped, _ := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT(), MaxRetryWait: 300 * time.Millisecond})
	fake.SetSecondaryRateLimit(1, 24*time.Hour)
	ctx2, cancel2 := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel2()
	if _, err := capped.ListRunners(ctx2, "acme/api"); err != nil {
		t.Fatalf("after a capped one-day Retry-After: %v", err)
	}
}

// TestDocumentedLimitsAreRetried: the primary limit is waited out until its reset, the secondary
// limit (403 or 429) until its retry-after, and an outage with back-off, each within the caller's
// deadline; past it the call fails with GitHub's answer.
func TestDocumentedLimitsAreRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits githubfake.Limits
		outage time.Duration
	}{
		{"primary 403", githubfake.Limits{Primary: 2, PrimaryWindow: 1500 * time.Millisecond}, 0},
		{"primary 429", githubfake.Limits{Primary: 2, PrimaryWindow: 1500 * time.Millisecond, Status: 429}, 0},
		{"secondary points 403", githubfake.Limits{Points: 2, PointsWindow: time.Second}, 0},
		{"secondary points 429", githubfake.Limits{Points: 2, PointsWindow: time.Second, Status: 429}, 0},
		{"outage", githubfake.Limits{}, 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake, url := newFake(t)
			// Two replicas share the PAT's budget: each learns it is spent only from GitHub's answer.
			var cs [2]*ghaccess.Client
			for i := range cs {
				var err error
				if cs[i], err = ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT()}); err != nil {
					t.Fatal(err)
				}
			}
			c := cs[0]
			fake.SetLimits(tt.limits)
			fake.SetOutage(tt.outage)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			for i := range 4 {
				if _, err := cs[i%2].ListRunners(ctx, "acme/api"); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			if u := fake.Usage(); u.Refused == 0 {
				t.Errorf("Usage = %+v: the limit was never hit, the test proves nothing", u)
			}
			// With a deadline shorter than the wait, the caller gets GitHub's answer in time.
			fake.SetLimits(githubfake.Limits{Primary: 1, PrimaryWindow: time.Hour, Status: tt.limits.Status})
			fake.SetOutage(time.Hour)
			short, cancel2 := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel2()
			if _, err := c.ListRunners(short, "acme/api"); err == nil {
				t.Fatal("a call during an hour-long refusal succeeded")
			}
		})
	}
}

// TestRunnerTokensReused: a scope's registration and remove tokens are minted once and reused while
// they are valid; inside twice the margin one background mint refreshes them; past the margin a
// caller never gets the old token.
func TestRunnerTokensReused(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c, err := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT(), Now: clock, TokenMargin: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var wg sync.WaitGroup
	toks := make([]ghaccess.RunnerToken, 20)
	for i := range toks {
		wg.Go(func() { toks[i], _ = c.RegistrationToken(ctx, "acme/api") })
	}
	wg.Wait()
	for _, tok := range toks[1:] {
		if tok.Token == "" || tok.Token != toks[0].Token {
			t.Fatalf("concurrent callers got %q and %q, want one shared token", toks[0].Token, tok.Token)
		}
	}
	if _, err := c.RemoveToken(ctx, "acme/api"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveToken(ctx, "ACME/api"); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Minted()); n != 2 {
		t.Fatalf("GitHub minted %d tokens, want 2 (one registration, one remove)", n)
	}
	// Inside twice the margin the valid token is still handed out while one refresh is minted.
	advance(time.Until(toks[0].ExpiresAt) - 8*time.Minute)
	if tok, _ := c.RegistrationToken(ctx, "acme/api"); tok.Token != toks[0].Token {
		t.Errorf("inside the refresh window: a new token %q before the refresh finished", tok.Token)
	}
	waitFor(t, func() bool { return len(fake.Minted()) == 3 })
	fresh, _ := c.RegistrationToken(ctx, "acme/api")
	if fresh.Token == toks[0].Token || len(fake.Minted()) != 3 {
		t.Errorf("after the refresh: token %q (old %q), %d mints", fresh.Token, toks[0].Token, len(fake.Minted()))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met in 5 s")
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestGenerateJITConfig(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	c, err := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	labels := []string{"runs-on/pool=small", "runnerpool"}
	// A repository runner goes to the Default group whatever group is asked for.
	cfg, err := c.GenerateJITConfig(ctx, "acme/api", "runnerpool-i-1", labels, 7)
	if err != nil {
		t.Fatalf("GenerateJITConfig: %v", err)
	}
	if cfg.Encoded == "" || cfg.RunnerID == 0 || cfg.RunnerName != "runnerpool-i-1" {
		t.Fatalf("GenerateJITConfig = %+v", cfg)
	}
	runners := fake.Runners("acme", "api")
	if len(runners) != 1 || !runners[0].JIT || !runners[0].Ephemeral || runners[0].RunnerGroupID != 1 || !contains(runners[0].Labels, labels[0]) {
		t.Fatalf("runners at the fake = %+v", runners)
	}
	// The config is what a runner registers with.
	rc := githubfake.NewRunnerClient(url, nil)
	if _, err := rc.Register(ctx, githubfake.RegisterOptions{JITConfig: cfg.Encoded}); err != nil {
		t.Fatalf("registering with the JIT config: %v", err)
	}
	// Names are unique per scope; bad arguments fail before any call.
	if _, err := c.GenerateJITConfig(ctx, "acme/api", "runnerpool-i-1", labels, 0); err == nil {
		t.Error("a second runner with the same name was created")
	}
	for _, tc := range []struct {
		scope, name string
		labels      []string
	}{
		{"acme/api", "", labels}, {"acme/api", "x", nil}, {"bad scope", "x", labels},
	} {
		if _, err := c.GenerateJITConfig(ctx, tc.scope, tc.name, tc.labels, 0); err == nil {
			t.Errorf("GenerateJITConfig(%q, %q, %v) succeeded", tc.scope, tc.name, tc.labels)
		}
	}
	// An organisation runner goes to the group asked for (Default when none).
	org, err := c.GenerateJITConfig(ctx, "acme", "runnerpool-i-2", labels, 0)
	if err != nil || org.Encoded == "" {
		t.Fatalf("GenerateJITConfig for an owner = %+v, %v", org, err)
	}
}

// TestAllowList: runner credentials (registration and remove tokens, JIT configs) are minted only
// for a repository or owner in the deployment's allow-list, and owner-level ones only for owners in
// OwnerRunners; a refused scope never reaches GitHub.
func TestAllowList(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	c, err := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT(),
		Allowed: []string{"acme/api", "globex"}, OwnerRunners: []string{"globex", "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		scope string
		ok    bool
	}{
		{"acme/api", true},
		{"ACME/Api", true},    // GitHub names are case-insensitive
		{"acme/other", false}, // another repository of a partly allowed owner
		{"acme", false},       // owner-level, but the owner itself is not allowed
		{"globex/site", true}, // every repository of an allowed owner
		{"globex", true},      // owner-level where configured
		{"evil/repo", false},  // outside the list
		{"acme/api/x", false}, // malformed
	}
	for i, tt := range tests {
		before := len(fake.Minted())
		_, rerr := c.RegistrationToken(t.Context(), tt.scope)
		_, merr := c.RemoveToken(t.Context(), tt.scope)
		_, jerr := c.GenerateJITConfig(t.Context(), tt.scope, fmt.Sprintf("runnerpool-i-allow-%d", i), []string{"x"}, 0)
		for what, err := range map[string]error{"registration": rerr, "remove": merr, "jit": jerr} {
			if tt.ok && err != nil {
				t.Errorf("%s credential for %s: %v, want minted", what, tt.scope, err)
			}
			if !tt.ok && err == nil {
				t.Errorf("%s credential for %s minted, want refused", what, tt.scope)
			}
		}
		if got := len(fake.Minted()) - before; !tt.ok && got != 0 {
			t.Errorf("%s: GitHub minted %d credentials for a refused scope", tt.scope, got)
		}
	}
	if _, err := c.RemoveToken(t.Context(), "evil/repo"); !errors.Is(err, ghaccess.ErrScopeNotAllowed) {
		t.Errorf("remove token for evil/repo = %v, want ErrScopeNotAllowed", err)
	}
	// Without OwnerRunners an allowed owner gets repository credentials only.
	c2, _ := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT(), Allowed: []string{"globex"}})
	if _, err := c2.RegistrationToken(t.Context(), "globex"); !errors.Is(err, ghaccess.ErrScopeNotAllowed) {
		t.Errorf("owner-level token without OwnerRunners = %v, want ErrScopeNotAllowed", err)
	}
	if _, err := c2.RegistrationToken(t.Context(), "globex/site"); err != nil {
		t.Errorf("repository token of an allowed owner: %v", err)
	}
}

// TestRunnerListingsShared: concurrent listings of a scope share GitHub's answers (one or two
// listings for a burst), and each caller reads a listing that started after it asked.
func TestRunnerListingsShared(t *testing.T) {
	t.Parallel()
	// The first listing is held at the server until all 30 callers have asked, so that every
	// other caller asks while it is in flight, however the machine schedules them: they all join
	// the one listing that starts after it.
	fake := githubfake.New(githubfake.Options{AppID: 4242})
	hold := make(chan struct{})
	var first sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/actions/runners") {
			first.Do(func() { <-hold })
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); fake.Close() })
	c, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	jit, err := c.GenerateJITConfig(ctx, "acme/api", "runnerpool-i-1", []string{"x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var asked atomic.Int32
	for range 30 {
		wg.Go(func() {
			asked.Add(1)
			if rs, err := c.ListRunners(ctx, "acme/api"); err != nil || len(rs) != 1 {
				t.Errorf("ListRunners = %+v, %v", rs, err)
			}
		})
	}
	for asked.Load() < 30 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the last callers from asked.Add into ListRunners
	close(hold)
	wg.Wait()
	const op = "GET /repos/{owner}/{repo}/actions/runners"
	if n := fake.Calls()[op]; n < 1 || n > 2 {
		t.Errorf("30 concurrent callers made %d listings, want 1 or 2", n)
	}
	if err := c.DeleteRunner(ctx, "acme/api", jit.RunnerID); err != nil {
		t.Fatal(err)
	}
	if rs, err := c.ListRunners(ctx, "acme/api"); err != nil || len(rs) != 0 {
		t.Errorf("after the delete: %+v, %v; want a fresh, empty listing", rs, err)
	}
}

// TestRunnerListingsSpacedPerScope: a scope's listings start at least ListingInterval apart, and
// every check that asks meanwhile joins the next one; another scope is not held back by it.
func TestRunnerListingsSpacedPerScope(t *testing.T) {
	t.Parallel()
	fake := githubfake.New(githubfake.Options{AppID: 4242})
	srv := httptest.NewServer(fake)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	const interval = 300 * time.Millisecond
	c, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: fake.PAT(), ListingInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.ListRunners(ctx, "acme/api"); err != nil {
		t.Fatal(err)
	}
	first := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := c.ListRunners(ctx, "acme/api"); err != nil {
				t.Errorf("ListRunners: %v", err)
			}
		})
	}
	if _, err := c.ListRunners(ctx, "acme/web"); err != nil { // its own scope: no wait for acme/api's
		t.Fatal(err)
	}
	wg.Wait()
	const op = "GET /repos/{owner}/{repo}/actions/runners"
	if n := fake.Calls()[op]; n != 3 {
		t.Errorf("a listing, 20 checks within its interval and another scope made %d listings, want 3", n)
	}
	// A lower bound only: the 20 checks cannot have been answered before the interval passed.
	if d := time.Since(first); d < interval-50*time.Millisecond {
		t.Errorf("the checks were answered after %v, before the scope's interval of %v", d, interval)
	}
}

// TestRunnerListingBudget: past ListingPagesPerMinute a listing waits for the budget, and a caller
// whose deadline comes first gets a clear error rather than GitHub's refusal.
func TestRunnerListingBudget(t *testing.T) {
	t.Parallel()
	fake := githubfake.New(githubfake.Options{AppID: 4242})
	srv := httptest.NewServer(fake)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	c, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: fake.PAT(), ListingPagesPerMinute: 6})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListRunners(t.Context(), "acme/api"); err != nil { // the burst of one page
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = c.ListRunners(ctx, "acme/web")
	if err == nil || !strings.Contains(err.Error(), "budget") && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a listing past the budget = %v, want a wait that ends with the caller's deadline", err)
	}
	if n := fake.Calls()["GET /repos/{owner}/{repo}/actions/runners"]; n != 1 {
		t.Errorf("%d listings reached GitHub, want 1 (the second waits for the budget)", n)
	}
}
