package main

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// compositeAction is the part of an action.yml the install step is read from.
type compositeAction struct {
	Inputs map[string]struct {
		Default string `yaml:"default"`
	} `yaml:"inputs"`
	Runs struct {
		Steps []struct {
			ID  string            `yaml:"id"`
			Env map[string]string `yaml:"env"`
			Run string            `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"runs"`
}

// inputExpr is the only expression the install step's env may hold: one input.
var inputExpr = regexp.MustCompile(`^\$\{\{ inputs\.([a-z-]+) \}\}$`)

// TestActionsInstallTheirOwnVersion runs the provision and release actions' install step as their
// action.yml declares it (its run line and env, each input at its default but release-url, which a
// local build sets) against a release host whose latest release is newer than the actions' own: each
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
			dir := filepath.Join(actions, name)
			b, err := os.ReadFile(filepath.Join(dir, "action.yml"))
			if err != nil {
				t.Fatal(err)
			}
			var a compositeAction
			if err := yaml.Unmarshal(b, &a); err != nil {
				t.Fatalf("%s/action.yml: %v", name, err)
			}
			with := map[string]string{"release-url": srv.URL + "/releases"}
			home := t.TempDir()
			env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "GITHUB_ACTION_PATH=" + dir,
				"RUNNER_OS=Linux", "RUNNER_ARCH=" + map[string]string{"amd64": "X64", "arm64": "ARM64"}[runtime.GOARCH],
				"RUNNER_TOOL_CACHE=" + filepath.Join(home, "cache"), "GITHUB_PATH=" + filepath.Join(home, "github_path")}
			var run string
			for _, s := range a.Runs.Steps {
				if !strings.Contains(s.Run, "install-runnerpool.sh") {
					continue
				}
				run = s.Run
				for k, v := range s.Env {
					m := inputExpr.FindStringSubmatch(v)
					if m == nil {
						t.Fatalf("%s/action.yml: install step env %s = %q, want one input", name, k, v)
					}
					in, ok := a.Inputs[m[1]]
					if !ok {
						t.Fatalf("%s/action.yml: install step reads input %s, which the action does not declare", name, m[1])
					}
					val, set := with[m[1]]
					if !set {
						val = in.Default
					}
					env = append(env, k+"="+val)
				}
			}
			if run == "" {
				t.Fatalf("%s/action.yml has no step running install-runnerpool.sh", name)
			}
			cmd := exec.CommandContext(t.Context(), "bash", "-e", "-c", run)
			cmd.Env = env
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("the install step: %v\n%s", err, errText(err))
			}
			installed := filepath.Join(home, "cache", "runnerpool", own, runtime.GOARCH)
			if got := strings.TrimSpace(string(out)); got != installed {
				t.Fatalf("installed in %q, want %q (the actions' own %s, not latest %s)", got, installed, own, newer)
			}
			ver, err := exec.CommandContext(t.Context(), filepath.Join(installed, "runnerpool"), "version").Output()
			if err != nil || !strings.HasPrefix(string(ver), "runnerpool "+own+" ") {
				t.Errorf("installed runnerpool says %q, %v; want %s", ver, err, own)
			}
		})
	}

	t.Run("sample workflow sets no version", func(t *testing.T) {
		t.Parallel()
		b, err := os.ReadFile(filepath.Join(actions, "workflow.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var wf struct {
			Jobs map[string]struct {
				Steps []struct {
					Uses string
					With map[string]string
				}
			}
		}
		if err := yaml.Unmarshal(b, &wf); err != nil {
			t.Fatal(err)
		}
		for job, j := range wf.Jobs {
			for _, s := range j.Steps {
				if _, set := s.With["version"]; set && strings.Contains(s.Uses, "/examples/github-actions/") {
					t.Errorf("job %s: %s sets version %q: the sample's actions install their own release", job, s.Uses, s.With["version"])
				}
			}
		}
	})
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// sha256Line is name's line in a checksums file, in sha256sum's format.
func sha256Line(b []byte, name string) string {
	return fmt.Sprintf("%x  %s\n", sha256.Sum256(b), name)
}
