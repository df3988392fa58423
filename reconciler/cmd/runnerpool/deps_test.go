package main

import (
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// module is this repository's module path.
const module = "github.com/runnerpool/terraform-provider-runnerpool"

// testOnly reports whether a package of this module is test code: everything under test/ (the
// local stack with the GitHub fake and the EC2 server, the sandbox, the fault matrix, the invariant
// checker, the demo and bench, the harness packages), and fakes (fake…) and harness packages (…test)
// wherever they live.
func testOnly(pkg string) bool {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return false
	}
	if rel == "test" || strings.HasPrefix(rel, "test/") {
		return true
	}
	for _, elem := range strings.Split(rel, "/") {
		if strings.HasPrefix(elem, "fake") || strings.HasSuffix(elem, "test") {
			return true
		}
	}
	return false
}

// harnessNames are the harness packages' names: none of them may sit beside the domain packages.
var harnessNames = []string{"stack", "sandbox", "faults", "invariant", "bench", "demo"}

// TestHarnessLivesUnderTest keeps the harness on its own floor (issue #34): no package outside
// test/ is one of the harness packages or a harness helper (…test), so internal/ and reconciler/
// hold only what ships.
func TestHarnessLivesUnderTest(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.ImportPath}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list listed only %q", pkgs)
	}
	var under int
	for _, pkg := range pkgs {
		rel := strings.TrimPrefix(pkg, module+"/")
		if strings.HasPrefix(rel, "test/") {
			under++
			continue
		}
		for _, elem := range strings.Split(rel, "/") {
			if slices.Contains(harnessNames, elem) || strings.HasSuffix(elem, "test") {
				t.Errorf("%s is harness code beside the product: move it under test/", rel)
			}
		}
	}
	if under < len(harnessNames) {
		t.Errorf("only %d packages under test/", under)
	}
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
		module + "/test/stack/githubfake":            true,
		module + "/test/stack":                       true,
		module + "/internal/agent/runner/fakerunner": true,
		module + "/test/agenttest":                   true,
		module + "/test/sandbox":                     true,
		module + "/test/demo":                        true,
		module + "/internal/agent/runner":            false,
		module + "/internal/agent/agentcmd":          false,
		module + "/internal/stackless":               false,
		module + "/test/rehearsal":                   true,
		"github.com/stretchr/testify/assert":         false,
		module + "/internal/ghaccess":                false,
		module + "/reconciler/cmd/runnerpool":        false,
	} {
		if got := testOnly(pkg); got != want {
			t.Errorf("testOnly(%q) = %v, want %v", pkg, got, want)
		}
	}
}
