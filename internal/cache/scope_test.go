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
