package main

// Tests of what a release delivers: the goreleaser configuration (.goreleaser.yml: the runnerpool
// archives the workflow actions download, the reconciler's container image), and the actions'
// install script (examples/github-actions/install-runnerpool.sh) run against a local release server
// that serves the configuration's runnerpool archives and checksums file.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"go.yaml.in/yaml/v4"
)

// repoRoot is the repository root, relative to this package.
const repoRoot = "../../.."

// releaseConfig is the part of .goreleaser.yml the actions and examples/complete rely on.
type releaseConfig struct {
	ProjectName string         `yaml:"project_name"`
	Builds      []releaseBuild `yaml:"builds"`
	Archives    []struct {
		ID           string   `yaml:"id"`
		IDs          []string `yaml:"ids"`
		Formats      []string `yaml:"formats"`
		NameTemplate string   `yaml:"name_template"`
	} `yaml:"archives"`
	Checksum struct {
		NameTemplate string         `yaml:"name_template"`
		Algorithm    string         `yaml:"algorithm"`
		ExtraFiles   []releaseExtra `yaml:"extra_files"`
	} `yaml:"checksum"`
	Signs []struct {
		Artifacts string   `yaml:"artifacts"`
		Args      []string `yaml:"args"`
	} `yaml:"signs"`
	Release struct {
		ExtraFiles []releaseExtra `yaml:"extra_files"`
	} `yaml:"release"`
	Kos []struct {
		ID        string   `yaml:"id"`
		Build     string   `yaml:"build"`
		Main      string   `yaml:"main"`
		BaseImage string   `yaml:"base_image"`
		User      string   `yaml:"user"`
		Platforms []string `yaml:"platforms"`
		Repos     []string `yaml:"repositories"`
		Tags      []string `yaml:"tags"`
		Bare      bool     `yaml:"bare"`
		Env       []string `yaml:"env"`
		Flags     []string `yaml:"flags"`
	} `yaml:"kos"`
}

// releaseExtra is a file a release publishes (or lists in its checksums) beside the builds.
type releaseExtra struct {
	Glob         string `yaml:"glob"`
	NameTemplate string `yaml:"name_template"`
}

// releaseBuild is one of .goreleaser.yml's builds.
type releaseBuild struct {
	ID      string   `yaml:"id"`
	Main    string   `yaml:"main"`
	Binary  string   `yaml:"binary"`
	Env     []string `yaml:"env"`
	Ldflags []string `yaml:"ldflags"`
	GOOS    []string `yaml:"goos"`
	GOARCH  []string `yaml:"goarch"`
}

func loadReleaseConfig(t *testing.T) releaseConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".goreleaser.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c releaseConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf(".goreleaser.yml: %v", err)
	}
	return c
}

// render fills a goreleaser name template for one target.
func render(t *testing.T, c releaseConfig, tmpl, version, goos, goarch string) string {
	t.Helper()
	tp, err := template.New("name").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		t.Fatalf("template %q: %v", tmpl, err)
	}
	var b strings.Builder
	data := map[string]string{"ProjectName": c.ProjectName, "Version": version, "Os": goos, "Arch": goarch, "Commit": "0000000"}
	if err := tp.Execute(&b, data); err != nil {
		t.Fatalf("template %q: %v", tmpl, err)
	}
	return b.String()
}

// The file names install-runnerpool.sh builds, which must be the ones the release publishes.
const (
	scriptArchive   = "runnerpool_{{ .Version }}_{{ .Os }}_{{ .Arch }}"
	scriptChecksums = "terraform-provider-runnerpool_{{ .Version }}_SHA256SUMS"
)

// TestReleaseConfig checks what the rest of the repository relies on in .goreleaser.yml (goreleaser
// check, in make release-check, validates the rest): the runnerpool archives the actions download,
// and the reconciler's image: linux amd64 and arm64, distroless static nonroot (CA certificates, no
// shell, uid 65532), the runnerpool build as entrypoint.
func TestReleaseConfig(t *testing.T) {
	t.Parallel()
	c := loadReleaseConfig(t)
	var build bool
	for _, b := range c.Builds {
		if b.ID == "runnerpool" {
			build = true
			if b.Main != "./reconciler/cmd/runnerpool" || b.Binary != "runnerpool" || !slices.Contains(b.Env, "CGO_ENABLED=0") ||
				!slices.Equal(b.GOOS, []string{"linux"}) || !slices.Equal(b.GOARCH, []string{"amd64", "arm64"}) {
				t.Errorf("runnerpool build = %+v", b)
			}
		}
	}
	if !build {
		t.Fatal("no runnerpool build")
	}
	var archive bool
	for _, a := range c.Archives {
		if a.ID == "runnerpool" && slices.Equal(a.IDs, []string{"runnerpool"}) { // the archives the actions install
			archive = true
			if a.NameTemplate != scriptArchive || !slices.Equal(a.Formats, []string{"tar.gz"}) {
				t.Errorf("runnerpool archive = %+v; install-runnerpool.sh downloads %s.tar.gz", a, scriptArchive)
			}
		}
	}
	if !archive {
		t.Error("no archive of the runnerpool build")
	}
	if got := render(t, c, c.Checksum.NameTemplate, "1.2.3", "", ""); got != render(t, c, scriptChecksums, "1.2.3", "", "") || c.Checksum.Algorithm != "sha256" {
		t.Errorf("checksums file %q (%s); install-runnerpool.sh reads %s with sha256", got, c.Checksum.Algorithm, scriptChecksums)
	}
	if len(c.Kos) != 1 {
		t.Fatalf("kos = %+v, want one image", c.Kos)
	}
	k := c.Kos[0]
	if k.Build != "runnerpool" || k.Main != "./reconciler/cmd/runnerpool" {
		t.Errorf("image build %q main %q, want the runnerpool build", k.Build, k.Main)
	}
	if !strings.HasPrefix(k.BaseImage, "gcr.io/distroless/static") || !strings.HasSuffix(k.BaseImage, ":nonroot") || k.User != "65532:65532" {
		t.Errorf("image base %q user %q, want distroless static nonroot as 65532", k.BaseImage, k.User)
	}
	if !slices.Equal(k.Platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("image platforms = %v", k.Platforms)
	}
	if !k.Bare || len(k.Repos) == 0 || !slices.Contains(k.Env, "CGO_ENABLED=0") || !slices.Contains(k.Flags, "-trimpath") {
		t.Errorf("image = %+v, want a bare repository name, CGO_ENABLED=0 and -trimpath", k)
	}
}

// release is a local stand-in for GitHub's releases of one version: /latest redirects to the tag,
// /download/vVERSION/NAME serves files.
type release struct {
	version string
	mu      sync.Mutex
	files   map[string][]byte
	gets    int
}

func (rl *release) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case p == "/releases/latest":
		http.Redirect(w, r, "/releases/tag/v"+rl.version, http.StatusFound)
	case p == "/releases/tag/v"+rl.version:
		w.WriteHeader(http.StatusOK)
	case strings.HasPrefix(p, "/releases/download/v"+rl.version+"/"):
		rl.mu.Lock()
		b, ok := rl.files[strings.TrimPrefix(p, "/releases/download/v"+rl.version+"/")]
		rl.gets++
		rl.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

// snapshotRelease builds the files a release of .goreleaser.yml publishes for what the workflow
// actions download, at version: the runnerpool build of the configuration (its main package and its
// ldflags, rendered for this version) for this machine's architecture, packed as the configured
// archive (the binary at the archive's top, as goreleaser packs it), the other architecture's
// archive under its configured name, and the checksums file in goreleaser's sha256sum format. It
// returns the files, this machine's archive and the checksums file's name.
//
// It builds with go build rather than a goreleaser snapshot: the snapshot cross-compiled every
// package for arm64 with -trimpath, minutes of `make test` that proved no more than this does. The
// names the script builds are checked against the configuration by TestReleaseConfig, and the rest
// of the configuration by `goreleaser check` (make release-check).
func snapshotRelease(t *testing.T, version string) (files map[string][]byte, archive, sums string) {
	t.Helper()
	c := loadReleaseConfig(t)
	var build *releaseBuild
	for i := range c.Builds {
		if c.Builds[i].ID == "runnerpool" {
			build = &c.Builds[i]
		}
	}
	var tmpl string
	for _, a := range c.Archives {
		if a.ID == "runnerpool" && slices.Equal(a.IDs, []string{"runnerpool"}) { // the archives the actions install
			tmpl = a.NameTemplate + "." + a.Formats[0]
		}
	}
	if build == nil || tmpl == "" {
		t.Fatal(".goreleaser.yml: no runnerpool build or archive")
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), build.Binary)
	ldflags := render(t, c, strings.Join(build.Ldflags, " "), version, "", "")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "-ldflags", ldflags, build.Main)
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", build.Main, err, out)
	}
	t.Logf("runnerpool %s built in %v", version, time.Since(start).Round(time.Millisecond))
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}

	files = map[string][]byte{}
	var sumLines strings.Builder
	for _, arch := range build.GOARCH {
		name := render(t, c, tmpl, version, "linux", arch)
		content := exe
		if arch != runtime.GOARCH {
			// Never run here: the script picks this machine's archive.
			content = []byte("#!/bin/sh\necho wrong architecture >&2; exit 1\n")
		} else {
			archive = name
		}
		files[name] = tarGz(t, build.Binary, content)
		fmt.Fprintf(&sumLines, "%x  %s\n", sha256.Sum256(files[name]), name)
	}
	if archive == "" {
		t.Fatalf("the runnerpool build has no %s archive", runtime.GOARCH)
	}
	sums = render(t, c, c.Checksum.NameTemplate, version, "", "")
	files[sums] = []byte(sumLines.String())
	return files, archive, sums
}

// tarGz packs one executable file as a gzipped tar, the way goreleaser packs a build's binary.
func tarGz(t *testing.T, name string, content []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestInstallScript runs the actions' install script against the local release server: latest and
// pinned versions install the verified binary; a tampered archive, an archive missing from the
// checksums file, an unknown version and an unsupported OS are refused; a second run uses the tool
// cache; go-install is used only when asked for; and the script passes shellcheck.
func TestInstallScript(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Fatalf("the install script installs linux amd64/arm64 releases; this test must run there, not on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	script, err := filepath.Abs(filepath.Join(repoRoot, "examples/github-actions/install-runnerpool.sh"))
	if err != nil {
		t.Fatal(err)
	}
	const version = "1.2.3"
	good, archive, sums := snapshotRelease(t, version)
	tampered := func(files map[string][]byte) {
		b := bytes.Clone(files[archive])
		b[len(b)/2] ^= 0xff
		files[archive] = b
	}
	unlisted := func(files map[string][]byte) {
		var keep []string
		for _, l := range strings.Split(string(files[sums]), "\n") {
			if !strings.HasSuffix(l, " "+archive) {
				keep = append(keep, l)
			}
		}
		files[sums] = []byte(strings.Join(keep, "\n"))
	}

	tests := []struct {
		name    string
		env     []string
		change  func(map[string][]byte)
		wantErr string // empty: installs
	}{
		{"latest", []string{"RP_VERSION=latest"}, nil, ""},
		{"pinned", []string{"RP_VERSION=v1.2.3"}, nil, ""},
		{"pinned without v", []string{"RP_VERSION=1.2.3"}, nil, ""},
		{"default is the actions' own", nil, nil, "v1.0.0"}, // VERSION's; TestActionsInstallTheirOwnVersion serves it
		{"tampered archive", []string{"RP_VERSION=1.2.3"}, tampered, "does not match"},
		{"archive not in the checksums", []string{"RP_VERSION=1.2.3"}, unlisted, "not listed"},
		{"unknown version", []string{"RP_VERSION=v9.9.9"}, nil, "downloading"},
		{"bad version", []string{"RP_VERSION=1.2;rm"}, nil, "not a release version"},
		{"macOS runner", []string{"RUNNER_OS=macOS"}, nil, "go-install"},
		{"bad install input", []string{"RP_INSTALL=brew"}, nil, "want release or go-install"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			files := map[string][]byte{}
			for k, v := range good {
				files[k] = v
			}
			if tt.change != nil {
				tt.change(files)
			}
			srv := httptest.NewServer(&release{version: version, files: files})
			defer srv.Close()
			dir := t.TempDir()
			ghPath := filepath.Join(dir, "github_path")
			env := append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "RP_RELEASE_URL=" + srv.URL + "/releases",
				"RUNNER_OS=Linux", "RUNNER_ARCH=" + map[string]string{"amd64": "X64", "arm64": "ARM64"}[runtime.GOARCH],
				"RUNNER_TOOL_CACHE=" + filepath.Join(dir, "cache"), "GITHUB_PATH=" + ghPath}, tt.env...)
			start := time.Now()
			stdout, stderr, err := runScript(t, script, env)
			took := time.Since(start)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(stderr, tt.wantErr) {
					t.Fatalf("script: err %v, stderr %q; want a failure mentioning %q", err, stderr, tt.wantErr)
				}
				if matches, _ := filepath.Glob(filepath.Join(dir, "cache", "runnerpool", "*", "*", "runnerpool")); len(matches) > 0 {
					t.Errorf("a refused archive was installed: %v", matches)
				}
				return
			}
			if err != nil {
				t.Fatalf("script: %v\n%s", err, stderr)
			}
			t.Logf("installed in %v: %s", took, strings.TrimSpace(stderr))
			installed := filepath.Join(dir, "cache", "runnerpool", version, runtime.GOARCH)
			if got := strings.TrimSpace(stdout); got != installed {
				t.Errorf("stdout %q, want the install directory %q", got, installed)
			}
			if b, _ := os.ReadFile(ghPath); strings.TrimSpace(string(b)) != installed {
				t.Errorf("GITHUB_PATH has %q, want %q", b, installed)
			}
			out, err := exec.CommandContext(t.Context(), filepath.Join(installed, "runnerpool"), "version").Output()
			if err != nil || !strings.HasPrefix(string(out), "runnerpool "+version+" ") {
				t.Errorf("installed runnerpool version: %q, %v", out, err)
			}
		})
	}

	// A second run with the same tool cache downloads only the checksums file (what the cache is
	// verified against); a runnerpool on PATH that is the release's binary is kept.
	t.Run("cached", func(t *testing.T) {
		t.Parallel()
		rl := &release{version: version, files: good}
		srv := httptest.NewServer(rl)
		defer srv.Close()
		dir := t.TempDir()
		env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "RP_RELEASE_URL=" + srv.URL + "/releases", "RP_VERSION=v" + version,
			"RUNNER_OS=Linux", "RUNNER_TOOL_CACHE=" + filepath.Join(dir, "cache")}
		if _, stderr, err := runScript(t, script, env); err != nil {
			t.Fatalf("first run: %v\n%s", err, stderr)
		}
		rl.mu.Lock()
		first := rl.gets
		rl.mu.Unlock()
		if _, stderr, err := runScript(t, script, env); err != nil || !strings.Contains(stderr, "cached") {
			t.Fatalf("second run: %v\n%s", err, stderr)
		}
		installed := filepath.Join(dir, "cache", "runnerpool", version, runtime.GOARCH)
		onPath := append(slices.Clone(env), "PATH="+installed+":/usr/bin:/bin")
		if _, stderr, err := runScript(t, script, onPath); err != nil || !strings.Contains(stderr, "using "+installed) {
			t.Fatalf("run with runnerpool on PATH: %v\n%s", err, stderr)
		}
		rl.mu.Lock()
		defer rl.mu.Unlock()
		if first != 2 || rl.gets != first+2 {
			t.Errorf("downloads: %d on the first run, %d in all; want 2 (checksums, archive), then the checksums file per run", first, rl.gets)
		}
	})

	// On a reused runner the tool cache and PATH outlive the job: a previous job's binary, in the
	// cache or first on PATH, is never run; a tampered cached archive is downloaded again.
	t.Run("tampered cache", func(t *testing.T) {
		t.Parallel()
		rl := &release{version: version, files: good}
		srv := httptest.NewServer(rl)
		defer srv.Close()
		dir := t.TempDir()
		env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "RP_RELEASE_URL=" + srv.URL + "/releases", "RP_VERSION=v" + version,
			"RUNNER_OS=Linux", "RUNNER_TOOL_CACHE=" + filepath.Join(dir, "cache")}
		if _, stderr, err := runScript(t, script, env); err != nil {
			t.Fatalf("first run: %v\n%s", err, stderr)
		}
		installed := filepath.Join(dir, "cache", "runnerpool", version, runtime.GOARCH)
		evil := []byte("#!/bin/sh\necho 'runnerpool " + version + " (a previous job)'\n")
		verified := func(what string) {
			t.Helper()
			out, err := exec.CommandContext(t.Context(), filepath.Join(installed, "runnerpool"), "version").Output()
			if err != nil || !strings.HasPrefix(string(out), "runnerpool "+version+" ") || strings.Contains(string(out), "previous job") {
				t.Errorf("%s: the cached runnerpool says %q, %v; want the release's binary", what, out, err)
			}
		}

		// The cached binary replaced: replaced again from the verified cached archive.
		if err := os.WriteFile(filepath.Join(installed, "runnerpool"), evil, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, stderr, err := runScript(t, script, env); err != nil || !strings.Contains(stderr, "does not match") {
			t.Fatalf("run over a tampered cached binary: %v\n%s", err, stderr)
		}
		verified("after a tampered cached binary")

		// A binary first on PATH that is not the release's: not used.
		onPath := filepath.Join(dir, "bin")
		if err := os.MkdirAll(onPath, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(onPath, "runnerpool"), evil, 0o755); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err := runScript(t, script, append(slices.Clone(env), "PATH="+onPath+":/usr/bin:/bin"))
		if err != nil || strings.TrimSpace(stdout) != installed {
			t.Fatalf("run with a foreign runnerpool on PATH: stdout %q, %v\n%s; want the verified %s", stdout, err, stderr, installed)
		}

		// The cached archive and binary both replaced: the archive is downloaded again.
		archives, _ := filepath.Glob(filepath.Join(installed, "*.tar.gz"))
		if len(archives) != 1 {
			t.Fatalf("cached archives %v, want one", archives)
		}
		if err := os.WriteFile(archives[0], []byte("not the release"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(installed, "runnerpool"), evil, 0o755); err != nil {
			t.Fatal(err)
		}
		rl.mu.Lock()
		before := rl.gets
		rl.mu.Unlock()
		if _, stderr, err := runScript(t, script, env); err != nil || !strings.Contains(stderr, "downloading it again") {
			t.Fatalf("run over a tampered cached archive: %v\n%s", err, stderr)
		}
		rl.mu.Lock()
		got := rl.gets - before
		rl.mu.Unlock()
		if got != 2 {
			t.Errorf("downloads after a tampered cached archive: %d, want 2 (checksums, archive)", got)
		}
		verified("after a tampered cached archive")
	})

	// The script is shellcheck clean (make deps installs shellcheck for the user-data tests too).
	t.Run("shellcheck", func(t *testing.T) {
		t.Parallel()
		sc, err := exec.LookPath("shellcheck")
		if err != nil {
			t.Fatalf("shellcheck not on PATH (make deps installs it): %v", err)
		}
		if out, err := exec.CommandContext(t.Context(), sc, script).CombinedOutput(); err != nil {
			t.Errorf("shellcheck %s: %v\n%s", script, err, out)
		}
	})

	// go-install is the explicit fallback: the script runs go install at the pinned tag.
	t.Run("go install", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		fakeGo := filepath.Join(dir, "bin", "go")
		if err := os.MkdirAll(filepath.Dir(fakeGo), 0o755); err != nil {
			t.Fatal(err)
		}
		record := filepath.Join(dir, "go-args")
		if err := os.WriteFile(fakeGo, []byte("#!/bin/sh\nif [ \"$1\" = env ]; then echo "+dir+"/gopath; exit 0; fi\necho \"$@\" >>"+record+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		env := []string{"PATH=" + filepath.Dir(fakeGo) + ":/usr/bin:/bin", "HOME=" + dir, "RP_INSTALL=go-install", "RP_VERSION=1.2.3",
			"RP_RELEASE_URL=http://127.0.0.1:1/releases"}
		stdout, stderr, err := runScript(t, script, env)
		if err != nil {
			t.Fatalf("script: %v\n%s", err, stderr)
		}
		b, _ := os.ReadFile(record)
		if want := "install github.com/runnerpool/terraform-provider-runnerpool/reconciler/cmd/runnerpool@v1.2.3"; strings.TrimSpace(string(b)) != want {
			t.Errorf("go called with %q, want %q", b, want)
		}
		if strings.TrimSpace(stdout) != dir+"/gopath/bin" {
			t.Errorf("stdout %q, want GOPATH/bin", stdout)
		}
	})
}

func runScript(t *testing.T, script string, env []string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "bash", script)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestReleaseRegistryLayout: the provider is released as the Terraform Registry wants it: one zip per
// platform named terraform-provider-NAME_VERSION_OS_ARCH.zip holding terraform-provider-NAME_vVERSION,
// a SHA256SUMS file that lists the zips and the registry manifest (published as
// terraform-provider-NAME_VERSION_manifest.json), and a detached signature of that file.
func TestReleaseRegistryLayout(t *testing.T) {
	t.Parallel()
	cfg := loadReleaseConfig(t)
	r := func(tmpl string) string { return render(t, cfg, tmpl, "1.2.3", "linux", "amd64") }
	if cfg.ProjectName != "terraform-provider-runnerpool" {
		t.Fatalf("project_name %q", cfg.ProjectName)
	}
	for _, bd := range cfg.Builds {
		if bd.ID == "provider" && r(bd.Binary) != "terraform-provider-runnerpool_v1.2.3" {
			t.Errorf("provider binary %q, want terraform-provider-runnerpool_v1.2.3", r(bd.Binary))
		}
	}
	var zip bool
	for _, a := range cfg.Archives {
		if slices.Equal(a.IDs, []string{"provider"}) {
			zip = slices.Equal(a.Formats, []string{"zip"}) && r(a.NameTemplate) == "terraform-provider-runnerpool_1.2.3_linux_amd64"
		}
	}
	if !zip {
		t.Error("the provider is not archived as terraform-provider-runnerpool_VERSION_OS_ARCH.zip")
	}
	if r(cfg.Checksum.NameTemplate) != "terraform-provider-runnerpool_1.2.3_SHA256SUMS" {
		t.Errorf("checksums file %q", r(cfg.Checksum.NameTemplate))
	}
	manifest := func(files []releaseExtra) bool {
		for _, f := range files {
			if f.Glob == "terraform-registry-manifest.json" && r(f.NameTemplate) == "terraform-provider-runnerpool_1.2.3_manifest.json" {
				return true
			}
		}
		return false
	}
	if !manifest(cfg.Checksum.ExtraFiles) || !manifest(cfg.Release.ExtraFiles) {
		t.Error("the registry manifest is not both published and listed in SHA256SUMS as terraform-provider-runnerpool_VERSION_manifest.json")
	}
	if len(cfg.Signs) != 1 || cfg.Signs[0].Artifacts != "checksum" || !slices.Contains(cfg.Signs[0].Args, "--detach-sign") {
		t.Errorf("signs = %+v, want a detached signature of the checksums file", cfg.Signs)
	}
}

// TestReleaseWorkflow: the release workflow runs goreleaser on a version tag, signs with the imported
// key, and uses the goreleaser version `make release-check` and these tests check the configuration
// with (tools/goreleaser.sh).
func TestReleaseWorkflow(t *testing.T) {
	t.Parallel()
	wf, err := os.ReadFile(filepath.Join(repoRoot, ".github/workflows/release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, "tools/goreleaser.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`GORELEASER_VERSION=\$\{GORELEASER_VERSION:-([0-9.]+)\}`).FindSubmatch(script)
	if pinned == nil {
		t.Fatal("tools/goreleaser.sh pins no GORELEASER_VERSION")
	}
	for _, want := range []string{
		"uses: goreleaser/goreleaser-action@", "version: v" + string(pinned[1]) + "\n", "args: release --clean",
		"GPG_FINGERPRINT: ${{ steps.import_gpg.outputs.fingerprint }}", "tags:\n      - \"v*\"",
		"examples/github-actions/VERSION", // the actions' own release must name the tag
	} {
		if !strings.Contains(string(wf), want) {
			t.Errorf(".github/workflows/release.yml lacks %q", want)
		}
	}
}
