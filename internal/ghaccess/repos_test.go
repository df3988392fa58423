package ghaccess_test

import (
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
)

// TestDefaultBranchCachedForItsTTL: the default branch comes from GET /repos/{owner}/{repo}, is
// asked once per repository per TTL however many callers want it, and a renamed default branch is
// seen once the TTL has passed.
func TestDefaultBranchCachedForItsTTL(t *testing.T) {
	t.Parallel()
	fake, url := newFake(t)
	var mu sync.Mutex
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	gh, err := ghaccess.New(ghaccess.Config{APIURL: url, Token: fake.PAT(), Now: clock, DefaultBranchTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	fake.SetDefaultBranch("acme", "api", "trunk")
	for range 5 {
		if b, err := gh.DefaultBranch(ctx, "Acme/API"); err != nil || b != "trunk" {
			t.Fatalf("DefaultBranch = %q, %v; want trunk", b, err)
		}
	}
	if b, err := gh.DefaultBranch(ctx, "acme/web"); err != nil || b != "main" {
		t.Fatalf("DefaultBranch of a repository with GitHub's default = %q, %v; want main", b, err)
	}
	if n := fake.Calls()["GET /repos/{owner}/{repo}"]; n != 2 {
		t.Fatalf("%d calls for two repositories within the TTL, want 2", n)
	}
	fake.SetDefaultBranch("acme", "api", "main")
	if b, _ := gh.DefaultBranch(ctx, "acme/api"); b != "trunk" {
		t.Fatalf("within the TTL the kept answer %q, want trunk", b)
	}
	mu.Lock()
	now = now.Add(10*time.Minute + time.Second)
	mu.Unlock()
	if b, err := gh.DefaultBranch(ctx, "acme/api"); err != nil || b != "main" {
		t.Fatalf("after the TTL = %q, %v; want the renamed main", b, err)
	}
	if _, err := gh.DefaultBranch(ctx, "acme"); err == nil {
		t.Fatal("an owner is not a repository")
	}
}
