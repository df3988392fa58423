package main

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// module is this repository's module path.
const module = "github.com/runnerpool/terraform-provider-runnerpool"

// testOnly reports whether a package of this module is test code: the local stack and everything in
// it (the GitHub fake, the EC2 server), the sandbox, the demo and bench, harness packages (…test) and
// fakes (fake…), wherever they live.
func testOnly(pkg string) bool {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return false
	}
	for _, prefix := range []string{"internal/stack", "internal/sandbox", "reconciler/demo", "reconciler/bench"} {
		if rel == prefix || strings.HasPrefix(rel, prefix+"/") {
			return true
		}
	}
	for _, elem := range strings.Split(rel, "/") {
		if strings.HasPrefix(elem, "fake") || strings.HasSuffix(elem, "test") {
			return true
		}
	}
	return false
}

// TestBinariesLinkNoTestCode is the check that keeps fakes and harnesses out of what ships: `go list
// -deps` of the runnerpool binary and of the provider binary must not reach a test-only package.
func TestBinariesLinkNoTestCode(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	for _, bin := range []string{module + "/reconciler/cmd/runnerpool", module} {
		t.Run(path.Base(bin), func(t *testing.T) {
			t.Parallel()
			out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", "-f", "{{.ImportPath}}", bin).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", bin, err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 10 {
				t.Fatalf("go list -deps %s listed only %q", bin, deps)
			}
			for _, d := range deps {
				if testOnly(d) {
					t.Errorf("%s links test code: %s (move the wiring into the demo or bench binary or a _test.go file)", bin, d)
				}
			}
		})
	}
}

func TestTestOnly(t *testing.T) {
	t.Parallel()
	for pkg, want := range map[string]bool{
		module + "/internal/stack/githubfake":        true,
		module + "/internal/stack":                   true,
		module + "/internal/agent/runner/fakerunner": true,
		module + "/internal/agent/agenttest":         true,
		module + "/internal/sandbox":                 true,
		module + "/reconciler/demo":                  true,
		module + "/internal/agent/runner":            false,
		module + "/internal/agent/agentcmd":          false,
		module + "/internal/stackless":               false,
		"github.com/stretchr/testify/assert":         false,
		module + "/internal/ghaccess":                false,
		module + "/reconciler/cmd/runnerpool":        false,
	} {
		if got := testOnly(pkg); got != want {
			t.Errorf("testOnly(%q) = %v, want %v", pkg, got, want)
		}
	}
}
