package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPoolRoomsApart keeps the warm pools' two rooms apart (issue #34): internal/poolsize sizes the
// pools (convergence and the autoscaler's application) and internal/pooljob dispatches pool jobs
// (the job queue, its ledger and the worker, for webhooks and scale sets). Neither imports the
// other, even indirectly, and internal/warmpool, the vocabulary both share (PoolSpec, Job, the
// configuration, termination), imports neither. Both launch through internal/launch, the one
// launch mechanism, never through the other's helpers.
func TestPoolRoomsApart(t *testing.T) {
	t.Parallel()
	const (
		shared   = module + "/internal/warmpool"
		sizing   = module + "/internal/poolsize"
		dispatch = module + "/internal/pooljob"
		launcher = module + "/internal/launch"
	)
	for _, tc := range []struct {
		pkg       string
		must, not []string
	}{
		{pkg: shared, not: []string{sizing, dispatch}},
		{pkg: sizing, must: []string{shared, launcher}, not: []string{dispatch}},
		{pkg: dispatch, must: []string{shared, launcher}, not: []string{sizing}},
	} {
		out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, tc.pkg) {
			t.Fatalf("go list -deps %s did not list the package itself: %q", tc.pkg, deps)
		}
		for _, d := range tc.not {
			if slices.Contains(deps, d) {
				t.Errorf("%s imports %s (directly or not): sizing and dispatch share only internal/warmpool", tc.pkg, d)
			}
		}
		for _, d := range tc.must {
			if !slices.Contains(deps, d) {
				t.Errorf("%s does not import %s", tc.pkg, d)
			}
		}
	}
}
