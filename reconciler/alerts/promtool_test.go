//go:build promtool

// The promtool checks of the alert rules, under the build tag promtool: building promtool from the Go
// module proxy takes about 8 minutes of CPU on a fresh machine (Prometheus's module is large), which
// would put `make test` past its 15 minutes there; `make alerts-check` runs them and .ci/run runs that.
package alerts_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// promtool builds (once, into the tools cache) or finds promtool.
func promtool(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "../../tools/promtool.sh").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("tools/promtool.sh: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("tools/promtool.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestAlertRules: the rules are valid (promtool check rules) and each alert fires on the series its
// unit test says and stays quiet on the others (promtool test rules).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "runnerpool.rules.yml"},
		{"test", "rules", "runnerpool.rules_test.yml"},
	} {
		out, err := exec.CommandContext(t.Context(), pt, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
