// Table tests of the trust levels within a repository: which events run the base repository's
// code, the pool scope a run uses, and which scopes cover which.
package pool_test

import (
	"slices"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
)

// TestTrustedEvent: the pull_request family (a pull request's merge commit, a fork's code
// included) and an unknown event are untrusted; pull_request_target (the base branch's workflow
// and code) and every other event GitHub documents are trusted.
func TestTrustedEvent(t *testing.T) {
	t.Parallel()
	for event, want := range map[string]bool{
		"":                            false, // a token or record that does not say
		"pull_request":                false,
		"pull_request_review":         false,
		"pull_request_review_comment": false,
		"pull_request_target":         true,
		"push":                        true,
		"schedule":                    true,
		"workflow_dispatch":           true,
		"workflow_run":                true,
		"workflow_call":               true,
		"repository_dispatch":         true,
		"release":                     true,
		"issue_comment":               true,
		"merge_group":                 true,
	} {
		if got := pool.TrustedEvent(event); got != want {
			t.Errorf("TrustedEvent(%q) = %v, want %v", event, got, want)
		}
	}
}

// TestRunScope: a class that keeps what a job left pools a repository's untrusted runs apart from
// its trusted ones; a class that keeps nothing shares the repository's scope; the GitHub scope of
// either is the repository.
func TestRunScope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		repository, event string
		keeps             bool
		want              string
	}{
		{"Acme/App", "pull_request", true, "acme/app:untrusted"},
		{"acme/app", "pull_request_review", true, "acme/app:untrusted"},
		{"acme/app", "", true, "acme/app:untrusted"}, // a run record written before the event was kept
		{"acme/app", "push", true, "acme/app"},
		{"acme/app", "pull_request_target", true, "acme/app"},
		{"acme/app", "schedule", true, "acme/app"},
		{"acme/app", "pull_request", false, "acme/app"},
		{"acme/app", "", false, "acme/app"},
		{"acme", "pull_request", true, "acme"}, // an owner's scope is never a run's: left as it is
	} {
		got := pool.RunScope(tc.repository, tc.event, tc.keeps)
		if got != tc.want {
			t.Errorf("RunScope(%q, %q, %v) = %q, want %q", tc.repository, tc.event, tc.keeps, got, tc.want)
		}
		if gh := pool.GitHubScope(got); gh != pool.RunScope(tc.repository, "push", false) {
			t.Errorf("GitHubScope(%q) = %q, want the repository", got, gh)
		}
	}
}

// TestScopeCoversTrustLevels: a repository's scope and its untrusted scope never cover each other;
// the owner's (hot instances, which ran no job) covers both; another repository's covers neither.
func TestScopeCoversTrustLevels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		have, want string
		covers     bool
	}{
		{"acme/app", "acme/app", true},
		{"acme/app:untrusted", "acme/app:untrusted", true},
		{"ACME/App:untrusted", "acme/app:untrusted", true},
		{"acme/app:untrusted", "acme/app", false}, // a pull request's instance never serves a push
		{"acme/app", "acme/app:untrusted", false}, // a push's instance never serves a pull request
		{"acme", "acme/app", true},
		{"acme", "acme/app:untrusted", true},
		{"acme:untrusted", "acme/app:untrusted", false},
		{"acme/web:untrusted", "acme/app:untrusted", false},
		{"other", "acme/app:untrusted", false},
	} {
		if got := pool.ScopeCovers(tc.have, tc.want); got != tc.covers {
			t.Errorf("ScopeCovers(%q, %q) = %v, want %v", tc.have, tc.want, got, tc.covers)
		}
	}
	if got, want := pool.CoveringScopes("acme/app:untrusted"), []string{"acme/app:untrusted", "acme"}; !slices.Equal(got, want) {
		t.Errorf("CoveringScopes = %v, want %v", got, want)
	}
}
