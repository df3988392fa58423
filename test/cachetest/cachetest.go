// Package cachetest runs the published @actions/cache toolkit (npm, installed in test/stack/node by
// make deps) the way a node action step does, for the runner cache's tests (internal/cache's against
// its server, test/sandbox's through real agents): toolkit.mjs saves or restores with it and prints
// its result as the last line.
package cachetest

import (
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

//go:embed toolkit.mjs
var script []byte

// Toolkit is node and the installed toolkit.
type Toolkit struct {
	node, lib, script string
}

// New finds node and the toolkit; it fails the test when either is missing.
func New(t *testing.T) *Toolkit {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: %v", err)
	}
	dir, err := stack.NodeDir()
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "node_modules", "@actions", "cache", "lib", "cache.js")
	if _, err := os.Stat(lib); err != nil {
		t.Fatalf("@actions/cache is not installed (run make deps): %v", err)
	}
	path := filepath.Join(t.TempDir(), "toolkit.mjs")
	if err := os.WriteFile(path, script, 0o644); err != nil {
		t.Fatal(err)
	}
	return &Toolkit{node: node, lib: (&url.URL{Scheme: "file", Path: lib}).String(), script: path}
}

// Command is `node toolkit.mjs ARGS` in workspace as a node action step with resultsURL as
// ACTIONS_RESULTS_URL (the job message's) and env added: `save KEY PATH` or `restore PATH KEY
// [RESTORE_KEY...]`.
func (tk *Toolkit) Command(t *testing.T, resultsURL, workspace string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(tk.node, append([]string{tk.script}, args...)...)
	cmd.Dir = workspace
	cmd.Env = append(append(os.Environ(), env...),
		"TOOLKIT="+tk.lib,
		"ACTIONS_RESULTS_URL="+strings.TrimRight(resultsURL, "/")+"/",
		"ACTIONS_CACHE_SERVICE_V2=true",
		"ACTIONS_RUNTIME_TOKEN=runtime-token",
		"GITHUB_SERVER_URL=https://github.com",
		"GITHUB_WORKSPACE="+workspace,
		"RUNNER_TEMP="+t.TempDir(),
		"RUNNER_OS=Linux",
	)
	return cmd
}

// Run runs Command and returns its result ("" for none) and its output; a failed step fails the
// test (a cache step must never fail).
func (tk *Toolkit) Run(t *testing.T, resultsURL, workspace string, env []string, args ...string) (string, string) {
	t.Helper()
	out, err := tk.Command(t, resultsURL, workspace, env, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("toolkit %v: %v\n%s", args, err, out)
	}
	return Result(t, out), string(out)
}

// Result is the script's result in its output: the last line's JSON "result", "" when null.
func Result(t *testing.T, out []byte) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r struct {
		Result any `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("toolkit output has no result: %v\n%s", err, out)
	}
	if r.Result == nil {
		return ""
	}
	return fmt.Sprint(r.Result)
}

// Workspace makes a workspace holding data/blob with size random bytes; it returns the workspace
// and the bytes.
func Workspace(t *testing.T, size int) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "blob"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, b
}
