package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/test/actionrun"
)

// TestActionsInstallTheirOwnVersion runs the provision and release actions' install step as their
// action.yml declares it (test/actionrun: its run line and env, each input at its default but
// release-url, which a local build sets) against a release host whose latest release is newer than the actions' own: each
// installs the release examples/github-actions/VERSION names, never latest. The sample workflow
// gives them no version, so it gets the same. Before VERSION existed the default was latest, and
// this test installed 9.9.9.
func TestActionsInstallTheirOwnVersion(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Fatalf("the install script installs linux amd64/arm64 releases; this test must run there, not on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	actions, err := filepath.Abs(filepath.Join(repoRoot, "examples/github-actions"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(actions, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	own := strings.TrimSpace(string(b))
	if own == "" || own == "latest" {
		t.Fatalf("examples/github-actions/VERSION is %q, want a release's version", own)
	}
	const newer = "9.9.9"
	files, _, _ := snapshotRelease(t, own)
	// The newer release is never installed here: files that pass its checksums and say so.
	newFiles := map[string][]byte{}
	var sums strings.Builder
	c := loadReleaseConfig(t)
	for _, arch := range []string{"amd64", "arm64"} {
		name := render(t, c, scriptArchive, newer, "linux", arch) + ".tar.gz"
		newFiles[name] = tarGz(t, "runnerpool", []byte("#!/bin/sh\necho runnerpool "+newer+"\n"))
		sums.WriteString(sha256Line(newFiles[name], name))
	}
	newFiles[render(t, c, scriptChecksums, newer, "", "")] = []byte(sums.String())
	ownRel, newRel := &release{version: own, files: files}, &release{version: newer, files: newFiles}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/releases/download/v"+own+"/") {
			ownRel.ServeHTTP(w, r)
			return
		}
		newRel.ServeHTTP(w, r) // /releases/latest redirects to v9.9.9
	}))
	t.Cleanup(srv.Close)

	for _, name := range []string{"provision", "release"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, err := actionrun.Load(filepath.Join(actions, name))
			if err != nil {
				t.Fatal(err)
			}
			home := t.TempDir()
			env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home,
				"RUNNER_OS=Linux", "RUNNER_ARCH=" + map[string]string{"amd64": "X64", "arm64": "ARM64"}[runtime.GOARCH],
				"RUNNER_TOOL_CACHE=" + filepath.Join(home, "cache")}
			var log bytes.Buffer
			// Every input at its default but release-url, which a local build sets (and the required
			// ones, which the install step does not read).
			with := map[string]string{"release-url": srv.URL + "/releases", "api-url": "https://runnerpool.example.com"}
			if name == "provision" {
				with["allowed-instance-types"] = "c*"
			}
			if _, err := a.Only("install").Run(t.Context(), with, env, &log); err != nil {
				t.Fatalf("the install step: %v\n%s", err, log.String())
			}
			if !strings.Contains(log.String(), "installed runnerpool "+own+" ") {
				t.Errorf("the install step says %q; want runnerpool %s installed (the actions' own, not latest %s)", log.String(), own, newer)
			}
			installed := filepath.Join(home, "cache", "runnerpool", own, runtime.GOARCH)
			ver, err := exec.CommandContext(t.Context(), filepath.Join(installed, "runnerpool"), "version").Output()
			if err != nil || !strings.HasPrefix(string(ver), "runnerpool "+own+" ") {
				t.Errorf("installed runnerpool says %q, %v; want %s", ver, err, own)
			}
		})
	}

	t.Run("sample workflow sets no version", func(t *testing.T) {
		t.Parallel()
		with, err := actionrun.WorkflowInputs(filepath.Join(actions, "workflow.yml"))
		if err != nil {
			t.Fatal(err)
		}
		for action, in := range with {
			if v, set := in["version"]; set {
				t.Errorf("workflow.yml: the %s action is given version %q: the sample's actions install their own release", action, v)
			}
		}
	})
}

// sha256Line is name's line in a checksums file, in sha256sum's format.
func sha256Line(b []byte, name string) string {
	return fmt.Sprintf("%x  %s\n", sha256.Sum256(b), name)
}
