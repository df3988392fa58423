package exampletf_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// usesLine is one `uses:` of a workflow or composite action, with the comment after it.
var usesLine = regexp.MustCompile(`(?m)^\s*(?:-\s+)?uses:\s*["']?([^\s"'#]+)["']?[ \t]*(?:#[ \t]*(.*))?$`)

// pinnedRef: owner/repo[/path]@<40 hex>, the only reference GitHub's "require actions to be pinned
// to a full-length commit SHA" policy accepts (a tag or branch can be moved by whoever can push).
var pinnedRef = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$`)

// versionComment: the tag the SHA is, in the comment Dependabot updates with it (`# v4.4.0`).
var versionComment = regexp.MustCompile(`^v[0-9]+(\.[0-9]+)*\b`)

// unpinned returns the `uses:` of src that are not pinned by full commit SHA with the version in a
// comment. Local actions (./...) are the workflow's own files; docker:// images must name a digest.
func unpinned(src string) []string {
	var bad []string
	for _, m := range usesLine.FindAllStringSubmatch(src, -1) {
		ref, comment := m[1], strings.TrimSpace(m[2])
		switch {
		case strings.HasPrefix(ref, "./"):
		case strings.HasPrefix(ref, "docker://"):
			if !strings.Contains(ref, "@sha256:") {
				bad = append(bad, ref)
			}
		case !pinnedRef.MatchString(ref) || !versionComment.MatchString(comment):
			bad = append(bad, strings.TrimSpace(m[0]))
		}
	}
	return bad
}

func TestUnpinned(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("a", 40)
	tests := []struct {
		name, src string
		bad       bool
	}{
		{"a tag", "      - uses: actions/checkout@v4\n", true},
		{"a branch", "      - uses: acme/action/sub@main\n", true},
		{"a short SHA", "      - uses: actions/checkout@11d5960\n", true},
		{"a SHA without its version", "      - uses: actions/checkout@" + sha + "\n", true},
		{"a SHA with a comment that is no version", "      - uses: actions/checkout@" + sha + " # pinned\n", true},
		{"a quoted tag", "        uses: 'actions/cache@v4'\n", true},
		{"a docker tag", "      - uses: docker://alpine:3\n", true},
		{"a SHA and its version", "      - uses: actions/checkout@" + sha + " # v4.4.0\n", false},
		{"a sub-directory action", "        uses: acme/repo/examples/x@" + sha + " # v1.0.0: the release\n", false},
		{"a local action", "      - uses: ./.github/actions/x\n", false},
		{"a docker digest", "      - uses: docker://alpine@sha256:" + strings.Repeat("b", 64) + "\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := unpinned(tc.src); (len(got) > 0) != tc.bad {
				t.Errorf("unpinned(%q) = %q, want bad=%v", tc.src, got, tc.bad)
			}
		})
	}
}

// TestWorkflowsPinActions: every `uses:` in this repository's workflows (.github/workflows) and in
// the examples (the sample workflow, the composite actions) is a full commit SHA with its version in
// a comment, as .github/dependabot.yml keeps them. `make workflows-check` runs it.
func TestWorkflowsPinActions(t *testing.T) {
	t.Parallel()
	var files []string
	for _, root := range []string{"../../../.github", "../../../examples"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yml" || ext == ".yaml") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	uses := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		uses += len(usesLine.FindAllString(string(b), -1))
		for _, u := range unpinned(string(b)) {
			t.Errorf("%s: %s: pin it by full commit SHA with its version in a comment (uses: owner/repo@<sha> # v1.2.3)", f, u)
		}
	}
	if uses == 0 {
		t.Fatalf("no uses: found in %q", files)
	}
	var dep struct {
		Updates []struct {
			Ecosystem string `yaml:"package-ecosystem"`
		}
	}
	b, err := os.ReadFile("../../../.github/dependabot.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &dep); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(dep.Updates, func(u struct {
		Ecosystem string `yaml:"package-ecosystem"`
	}) bool {
		return u.Ecosystem == "github-actions"
	}) {
		t.Error(".github/dependabot.yml does not update github-actions")
	}
}

type sampleWorkflow struct {
	On          map[string]map[string]any `yaml:"on"`
	Permissions map[string]string
	Jobs        map[string]struct {
		If          string
		Needs       any
		Permissions map[string]string
		Steps       []struct{ Uses string }
	}
}

func loadSampleWorkflow(t *testing.T) sampleWorkflow {
	t.Helper()
	b, err := os.ReadFile("../../../examples/github-actions/workflow.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf sampleWorkflow
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	return wf
}

// TestSampleWorkflowTokensAndTriggers: the sample workflow gives `id-token: write` to the jobs that
// call runnerpool's actions and to no other (the workflow's own permissions do not); it runs pushes
// on main only, so a push to a pull request's branch provisions once (pull_request), not twice; a
// fork's pull request, which gets no OIDC token, skips the provision, so its build and test jobs
// and the release are skipped instead of failing.
func TestSampleWorkflowTokensAndTriggers(t *testing.T) {
	t.Parallel()
	wf := loadSampleWorkflow(t)
	if _, ok := wf.Permissions["id-token"]; ok {
		t.Errorf("the workflow's permissions give id-token to every job: %v", wf.Permissions)
	}
	callers := 0
	for name, j := range wf.Jobs {
		calls := slices.ContainsFunc(j.Steps, func(s struct{ Uses string }) bool {
			return strings.HasPrefix(s.Uses, "runnerpool/terraform-provider-runnerpool/examples/github-actions/")
		})
		if calls {
			callers++
		}
		if got := j.Permissions["id-token"] == "write"; got != calls {
			t.Errorf("job %s: id-token write %v, calls runnerpool %v", name, got, calls)
		}
	}
	if callers != 2 {
		t.Errorf("%d jobs call runnerpool, want provision and release", callers)
	}
	push, ok := wf.On["push"]
	if _, pr := wf.On["pull_request"]; !ok || !pr {
		t.Fatalf("triggers %v, want push and pull_request", wf.On)
	}
	if b, _ := push["branches"].([]any); !slices.Equal(b, []any{"main"}) {
		t.Errorf("push runs on branches %v, want [main] only", push["branches"])
	}
	if p := wf.Jobs["provision"].If; !strings.Contains(p, "github.event.pull_request.head.repo.full_name == github.repository") {
		t.Errorf("provision's if %q does not skip forks' pull requests", p)
	}
	if r := wf.Jobs["release"].If; !strings.Contains(r, "always()") || !strings.Contains(r, "needs.provision.result != 'skipped'") {
		t.Errorf("release's if %q: want always(), except when provision was skipped", r)
	}
}
