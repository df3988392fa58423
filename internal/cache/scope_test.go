package cache_test

import (
	"slices"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
)

func TestScopeOfRuns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                          string
		event, ref, baseRef, defaultB string
		wantWrite                     string
		wantReads                     []string
	}{
		{"push to main", "push", "refs/heads/main", "", "main",
			"v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/",
			[]string{"v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/"}},
		{"push to a feature branch", "push", "refs/heads/feat", "", "main",
			"v1/acme~2Fapp/trusted/refs~2Fheads~2Ffeat/",
			[]string{"v1/acme~2Fapp/trusted/refs~2Fheads~2Ffeat/", "v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/"}},
		{"pull request into release", "pull_request", "refs/pull/7/merge", "release", "main",
			"v1/acme~2Fapp/untrusted/refs~2Fpull~2F7~2Fmerge/",
			[]string{"v1/acme~2Fapp/untrusted/refs~2Fpull~2F7~2Fmerge/", "v1/acme~2Fapp/trusted/refs~2Fpull~2F7~2Fmerge/",
				"v1/acme~2Fapp/trusted/refs~2Fheads~2Frelease/", "v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/"}},
		{"pull_request_target is trusted", "pull_request_target", "refs/heads/main", "main", "main",
			"v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/",
			[]string{"v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/"}},
		{"no event on a branch: untrusted, writes under its run", "", "refs/heads/feat", "", "main",
			"v1/acme~2Fapp/untrusted/refs~2Frunnerpool~2Frun~2F42/",
			[]string{"v1/acme~2Fapp/untrusted/refs~2Frunnerpool~2Frun~2F42/", "v1/acme~2Fapp/trusted/refs~2Fheads~2Ffeat/",
				"v1/acme~2Fapp/trusted/refs~2Fheads~2Fmain/"}},
		{"push to a feature branch, default branch unknown", "push", "refs/heads/feat", "", "",
			"v1/acme~2Fapp/trusted/refs~2Fheads~2Ffeat/",
			[]string{"v1/acme~2Fapp/trusted/refs~2Fheads~2Ffeat/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := cache.ScopeOf("Acme/App", tt.event, tt.ref, tt.baseRef, tt.defaultB)
			s.Run = "42"
			if got := s.WritePrefix(); got != tt.wantWrite {
				t.Errorf("write prefix %q, want %q", got, tt.wantWrite)
			}
			if got := s.ReadPrefixes(); !slices.Equal(got, tt.wantReads) {
				t.Errorf("read prefixes (-want +got):\n%q\n%q", tt.wantReads, got)
			}
		})
	}
}

func TestRefOfWorkflowRef(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ ref, want string }{
		{"acme/app/.github/workflows/ci.yml@refs/heads/main", "refs/heads/main"},
		{"Acme/App/.github/workflows/ci.yml@refs/pull/7/merge", "refs/pull/7/merge"},
		{"acme/app/.github/workflows/release.yml@refs/tags/v1.2", "refs/tags/v1.2"},
		{"acme/shared/.github/workflows/build.yml@refs/heads/main", ""}, // another repository's reusable workflow
		{"acme/app/.github/workflows/ci.yml@v1", ""},
		{"acme/app/.github/workflows/ci.yml", ""},
		{"acme/app/.github/workflows/ci.yml@refs/heads/a b", ""},
		{"acme/apple/.github/workflows/ci.yml@refs/heads/main", ""},
		{"", ""},
	} {
		if got := cache.RefOfWorkflowRef("acme/app", tt.ref); got != tt.want {
			t.Errorf("RefOfWorkflowRef(%q) = %q, want %q", tt.ref, got, tt.want)
		}
	}
}

// An untrusted run on a branch writes under its run, so it cannot be scoped without one.
func TestUnvouchedBranchRunNeedsItsRun(t *testing.T) {
	t.Parallel()
	s := cache.ScopeOf("acme/app", "", "refs/heads/main", "", "main")
	if s.Validate() == nil {
		t.Fatal("an untrusted branch run without its run validated")
	}
	s.Run = "7"
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}
