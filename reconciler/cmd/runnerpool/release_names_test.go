//go:build release

package main

// TestReleaseNames ties the names together: every release URL and image the examples and the docs
// give resolves to a file (or tag) a release of .goreleaser.yml produces, with its line in the
// release's checksums file.
//
// It needs goreleaser (tools/goreleaser.sh builds it from the Go module proxy: minutes on a fresh
// machine) and a release, so it runs under the build tag release, not in `make test`: the rehearsal
// (test/rehearsal, `make rehearsal` in .ci/run) runs it on the snapshot release it builds from the
// whole configuration, handing over its dist folder in RUNNERPOOL_RELEASE_DIST. Without that variable
// the test builds its own snapshot of the configuration's runnerpool build, archives and checksum
// settings from a stub main package (the names and the checksum lines are goreleaser's own).

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// releaseBase is where the release's files are downloaded from: the GitHub release of the tag.
const releaseBase = "https://github.com/runnerpool/terraform-provider-runnerpool/releases/download/v"

// snapshotVersion is the version of the stub snapshot release.
const snapshotVersion = "1.2.3"

var (
	// releaseURL is a download of this project's release; anyRunnerpoolDownload any URL that looks
	// like one, so that a URL under another base is caught too.
	releaseURL            = regexp.MustCompile(regexp.QuoteMeta(releaseBase) + `([0-9]+\.[0-9]+\.[0-9]+)/([A-Za-z0-9._-]+)`)
	anyRunnerpoolDownload = regexp.MustCompile("https?://[^\\s\"'`)<>]*/releases/download/[^\\s\"'`)<>]*runnerpool[^\\s\"'`)<>]*")
	imageRef              = regexp.MustCompile(`ghcr\.io/runnerpool/runnerpool:([A-Za-z0-9._-]+)`)
)

func TestReleaseNames(t *testing.T) {
	t.Parallel()
	files, version := releaseFiles(t)
	sums := readChecksums(t, files, version)

	// The agent binaries instances install: one per architecture the runnerpool build has, each
	// with its checksum line beside the archives'.
	for _, arch := range []string{"amd64", "arm64"} {
		name := "runnerpool_linux_" + arch
		checkReleased(t, files, sums, name, "the release")
	}

	refs := 0
	for _, file := range documentedFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		versions := map[string]bool{}
		for _, u := range anyRunnerpoolDownload.FindAllString(text, -1) {
			if strings.Contains(u, "/vVERSION/") {
				continue // the placeholder of a sentence
			}
			m := releaseURL.FindStringSubmatch(u)
			if m == nil || m[0] != u {
				t.Errorf("%s: %s is not a download of this project's release (%sVERSION/NAME)", file, u, releaseBase)
				continue
			}
			refs++
			versions[m[1]] = true
			checkReleased(t, files, sums, strings.ReplaceAll(m[2], m[1], version), file+": "+u)
		}
		for _, m := range imageRef.FindAllStringSubmatch(text, -1) {
			if m[1] == "VERSION" {
				continue // the placeholder of a sentence
			}
			refs++
			if m[1] != "latest" {
				versions[m[1]] = true
			}
			if !slices.Contains(imageTags(t, m[1]), m[1]) {
				t.Errorf("%s: image %s: a release of %s is tagged %v", file, m[0], m[1], imageTags(t, m[1]))
			}
		}
		if len(versions) > 1 {
			t.Errorf("%s names several releases %v: the agent and the image of one deployment come from one release", file, slices.Sorted(maps.Keys(versions)))
		}
	}
	if refs == 0 {
		t.Fatal("no release URL or image in the examples and docs")
	}
}

// checkReleased fails unless name is a file of the release and the checksums file lists it with its
// digest.
func checkReleased(t *testing.T, files, sums map[string]string, name, where string) {
	t.Helper()
	path, ok := files[name]
	if !ok {
		t.Errorf("%s: %s is not a file the release publishes", where, name)
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.Sum256(b)
	switch want, ok := sums[name]; {
	case !ok:
		t.Errorf("%s: %s has no line in the checksums file", where, name)
	case want != hex.EncodeToString(got[:]):
		t.Errorf("%s: the checksums file lists %s as %s, the file is %x", where, name, want, got)
	}
}

// documentedFiles are the files users copy release names from: the examples, the docs and their
// templates, the README.
func documentedFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"examples", "docs", "templates"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if ext := filepath.Ext(p); !d.IsDir() && (ext == ".tf" || ext == ".md" || ext == ".tmpl" || ext == ".example" || ext == ".yml" || ext == ".sh") {
				rel, _ := filepath.Rel(repoRoot, p)
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return append(files, "README.md")
}

// imageTags are the tags of the reconciler's image in a release of version.
func imageTags(t *testing.T, version string) []string {
	t.Helper()
	c := loadReleaseConfig(t)
	var tags []string
	for _, k := range c.Kos {
		for _, tag := range k.Tags {
			tags = append(tags, render(t, c, tag, version, "", ""))
		}
	}
	return tags
}

// readChecksums reads the snapshot's checksums file (sha256sum format: digest, two spaces, name).
func readChecksums(t *testing.T, files map[string]string, version string) map[string]string {
	t.Helper()
	c := loadReleaseConfig(t)
	name := render(t, c, c.Checksum.NameTemplate, version, "", "")
	f, err := os.Open(files[name])
	if err != nil {
		t.Fatalf("the snapshot has no checksums file %s: %v", name, err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		digest, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(digest) != 64 {
			t.Fatalf("%s: line %q is not sha256sum's format", name, sc.Text())
		}
		sums[file] = digest
	}
	return sums
}

// releaseFiles are the files of the release in RUNNERPOOL_RELEASE_DIST (a goreleaser dist folder:
// its artifacts.json and metadata.json), else of a stub snapshot (goreleaserSnapshot), and its version.
func releaseFiles(t *testing.T) (map[string]string, string) {
	t.Helper()
	dist := os.Getenv("RUNNERPOOL_RELEASE_DIST")
	if dist == "" {
		dir := goreleaserSnapshot(t)
		return distFiles(t, filepath.Join(dir, "dist"), dir), snapshotVersion
	}
	b, err := os.ReadFile(filepath.Join(dist, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version string }
	if err := json.Unmarshal(b, &meta); err != nil || meta.Version == "" {
		t.Fatalf("%s/metadata.json: no version (%v)", dist, err)
	}
	// artifacts.json's paths are relative to the folder goreleaser ran in, the dist folder's parent.
	return distFiles(t, dist, filepath.Dir(dist)), meta.Version
}

// distFiles are the files a release uploads, by name: goreleaser's own list of its artifacts in
// dist/artifacts.json (a raw binary is uploaded under its archive name from the build's folder),
// their paths relative to root.
func distFiles(t *testing.T, dist, root string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dist, "artifacts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var artifacts []struct{ Name, Path, Type string }
	if err := json.Unmarshal(b, &artifacts); err != nil {
		t.Fatalf("artifacts.json: %v", err)
	}
	files := map[string]string{}
	for _, a := range artifacts {
		if a.Type == "Archive" || a.Type == "Binary" || a.Type == "Checksum" {
			p := a.Path
			if !filepath.IsAbs(p) {
				p = filepath.Join(root, p)
			}
			files[a.Name] = p
		}
	}
	return files
}

// goreleaserSnapshot runs `goreleaser release --snapshot` on .goreleaser.yml reduced to the
// runnerpool build (its main package a stub), its archives and the checksum settings, in a temporary
// git repository, and returns that repository's folder (the release is in its dist folder).
func goreleaserSnapshot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), filepath.Join(root, "tools/goreleaser.sh")).Output()
	if err != nil {
		t.Fatalf("tools/goreleaser.sh: %v", err)
	}
	gr := strings.TrimSpace(string(out))

	b, err := os.ReadFile(filepath.Join(root, ".goreleaser.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	var builds, archives []any
	for _, b := range cfg["builds"].([]any) {
		if b := b.(map[string]any); b["id"] == "runnerpool" {
			b["main"] = "."
			builds = append(builds, b)
		}
	}
	for _, a := range cfg["archives"].([]any) {
		if ids, _ := a.(map[string]any)["ids"].([]any); slices.Equal(ids, []any{"runnerpool"}) {
			archives = append(archives, a)
		}
	}
	cfg["builds"], cfg["archives"] = builds, archives
	cfg["snapshot"] = map[string]any{"version_template": snapshotVersion}
	for _, k := range []string{"before", "kos", "signs", "release"} {
		delete(cfg, k)
	}
	reduced, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	manifest, err := os.ReadFile(filepath.Join(root, "terraform-registry-manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		".goreleaser.yml":                  reduced,
		"terraform-registry-manifest.json": manifest,
		"go.mod":                           []byte("module github.com/runnerpool/terraform-provider-runnerpool\n\ngo 1.22\n"),
		"main.go":                          []byte("package main\n\nfunc main() {}\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GOFLAGS=")
	for _, args := range [][]string{
		{"git", "init", "-q"},
		{"git", "remote", "add", "origin", "https://github.com/runnerpool/terraform-provider-runnerpool.git"},
		{"git", "add", "."},
		{"git", "commit", "-q", "-m", "snapshot"},
		{gr, "release", "--snapshot", "--clean", "--skip=sign"},
	} {
		cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}
