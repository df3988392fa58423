package userdata

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBootstrapFailureNamesTheStep: a step that fails ends the boot with
// "runnerpool: bootstrap FAILED (exit N) at line L: <command>", on the console (stderr) and in
// /var/log/runnerpool-bootstrap.log, as docs/guides/images.md says. The script's own head (up to
// its ERR trap) runs under bash with the log moved to a temporary file, followed by a failing step.
func TestBootstrapFailureNamesTheStep(t *testing.T) {
	t.Parallel()
	script := render(t, func(p *Params) { p.Arch = ArchX64 })
	const logPath = "/var/log/runnerpool-bootstrap.log"
	trap := strings.Index(script, "trap 'failed ")
	if trap < 0 || !strings.Contains(script[:trap], logPath) {
		t.Fatalf("the script has no ERR trap after its log redirection")
	}
	end := trap + strings.Index(script[trap:], "\n") + 1
	log := filepath.Join(t.TempDir(), "bootstrap.log")
	head := strings.ReplaceAll(script[:end], logPath, log)
	failing := "sh -c 'exit 3'\necho not reached\n"
	line := strings.Count(head, "\n") + 1 // the failing step's line in the script bash runs

	cmd := exec.CommandContext(t.Context(), "bash", "-c", head+failing)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("the boot exited %v, want the step's 3:\n%s", err, out)
	}
	want := "runnerpool: bootstrap FAILED (exit 3) at line " + strconv.Itoa(line) + ": sh -c 'exit 3'"
	if !strings.Contains(string(out), want) || strings.Contains(string(out), "not reached") {
		t.Errorf("console:\n%s\nwant %q and nothing after the failure", out, want)
	}
	// The log is written by tee, which may still be flushing when bash returns.
	for range 50 {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(log)
	t.Errorf("%s:\n%s\nwant %q", logPath, b, want)
}
