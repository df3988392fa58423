package runner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// A runner GitHub refuses for its version exits with RunnerVersionDeprecated (7) when asked to
// (ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE): config.sh's and run.sh's exits are
// ErrVersionRefused, any other failure is not.
func TestActionsVersionRefusal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		config  string
		refused bool
	}{
		{"exit 7 when asked", `[ "$ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE" = 1 ] && exit 7; exit 1`, true},
		{"other failure", `exit 1`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, name := range []string{"config.sh", "run.sh"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+tc.config+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			a, err := NewActions(ActionsOptions{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			err = a.Register(t.Context(), store.Credential{URL: "https://github.com/acme/api", Token: "REG", Labels: []string{"42"}}, "runnerpool-i-1")
			if err == nil || errors.Is(err, ErrVersionRefused) != tc.refused {
				t.Errorf("Register = %v, want refused for its version: %v", err, tc.refused)
			}
			if err := os.WriteFile(filepath.Join(dir, jitFile), []byte("JIT"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := a.Run(t.Context()); err == nil || errors.Is(err, ErrVersionRefused) != tc.refused {
				t.Errorf("Run = %v, want refused for its version: %v", err, tc.refused)
			}
		})
	}
}
