package ghaccess_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
)

// permissionTitles are the permissions as GitHub's settings pages name them.
var permissionTitles = map[string]string{
	ghaccess.PermAdministration: "Repository: Administration",
	ghaccess.PermOrgRunners:     "Organization: Self-hosted runners",
	ghaccess.PermActions:        "Repository: Actions",
	ghaccess.PermMetadata:       "Repository: Metadata",
}

// callsTable renders ghaccess.Calls as the guide's table.
func callsTable() string {
	var b strings.Builder
	b.WriteString("| Call | Used for | GitHub App / fine-grained PAT permission | Classic PAT scope |\n|---|---|---|---|\n")
	for _, c := range ghaccess.Calls {
		perm, scope := "none (the App's own JWT)", "—"
		switch c.Permission {
		case "":
		case ghaccess.PermPublic:
			perm, scope = "none (a public repository)", "none"
		case ghaccess.PermClassicPATOnly:
			perm, scope = "none can: a classic PAT only", "`"+c.PATScope+"`"
		default:
			perm = fmt.Sprintf("%s (%s)", permissionTitles[c.Permission], c.Level)
			scope = "`" + c.PATScope + "`"
		}
		fmt.Fprintf(&b, "| `%s %s` | %s | %s | %s |\n", c.Method, c.Path, c.Use, perm, scope)
	}
	return b.String()
}

// testOutputLine is a line go test prints for a failure ("    x_test.go:47: ..."), pasted by mistake.
var testOutputLine = regexp.MustCompile(`(?m)^\s+[a-z0-9_]+_test\.go:[0-9]+: .*$`)

// TestCredentialsGuide: the guide (and its template) lists every GitHub call with what it needs,
// as ghaccess.Calls says, and the App's permissions.
func TestCredentialsGuide(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"../../docs/guides/github-credentials.md", "../../templates/guides/github-credentials.md.tmpl"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := testOutputLine.Find(b); m != nil {
			t.Errorf("%s holds a line of go test output: %q", p, m)
		}
		if !strings.Contains(string(b), callsTable()) {
			t.Errorf("%s lacks the table of GitHub calls; want:\n%s", p, callsTable())
		}
		for name, level := range ghaccess.RequiredPermissions(true) {
			if !strings.Contains(string(b), fmt.Sprintf("`%s`: `%s`", name, level)) {
				t.Errorf("%s does not list the App permission `%s`: `%s`", p, name, level)
			}
		}
	}
	for _, c := range ghaccess.Calls {
		if c.Permission != "" && c.Permission != ghaccess.PermPublic && c.Permission != ghaccess.PermClassicPATOnly && (permissionTitles[c.Permission] == "" || c.PATScope == "" || (c.Level != "read" && c.Level != "write")) {
			t.Errorf("call %s %s: permission %q level %q scope %q", c.Method, c.Path, c.Permission, c.Level, c.PATScope)
		}
	}
}

// TestAppManifest: the GitHub App manifest asks for exactly the permissions the calls need (with
// owner-level runners) and the workflow_job event.
func TestAppManifest(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../examples/github-app/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Name           string               `json:"name"`
		HookAttributes struct{ URL string } `json:"hook_attributes"`
		Public         bool                 `json:"public"`
		Permissions    map[string]string    `json:"default_permissions"`
		Events         []string             `json:"default_events"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if want := ghaccess.RequiredPermissions(true); !maps.Equal(m.Permissions, want) {
		t.Errorf("manifest permissions %v, want exactly %v", m.Permissions, want)
	}
	if !slices.Equal(m.Events, ghaccess.WebhookEvents) || !slices.Equal(m.Events, []string{"workflow_job"}) {
		t.Errorf("manifest events %v, want [workflow_job]", m.Events)
	}
	if m.Public || !strings.HasSuffix(m.HookAttributes.URL, "/v1/webhooks/github") {
		t.Errorf("manifest: public %v, hook %q; want a private App whose webhook is the reconciler's /v1/webhooks/github", m.Public, m.HookAttributes.URL)
	}
}

// goGitHubCalls are the go-github methods runnerpool calls, by the REST route each requests.
var goGitHubCalls = map[string]string{
	"Apps.FindOrganizationInstallation":                  "GET /orgs/{org}/installation",
	"Apps.FindRepositoryInstallation":                    "GET /repos/{owner}/{repo}/installation",
	"Actions.CancelWorkflowRunByID":                      "POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel",
	"Actions.CreateOrganizationRegistrationToken":        "POST /orgs/{org}/actions/runners/registration-token",
	"Actions.CreateOrganizationRemoveToken":              "POST /orgs/{org}/actions/runners/remove-token",
	"Actions.CreateRegistrationToken":                    "POST /repos/{owner}/{repo}/actions/runners/registration-token",
	"Actions.CreateRemoveToken":                          "POST /repos/{owner}/{repo}/actions/runners/remove-token",
	"Actions.GenerateOrgJITConfig":                       "POST /orgs/{org}/actions/runners/generate-jitconfig",
	"Actions.GenerateRepoJITConfig":                      "POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig",
	"Actions.GetOrganizationRunner":                      "GET /orgs/{org}/actions/runners/{runner_id}",
	"Actions.GetRunner":                                  "GET /repos/{owner}/{repo}/actions/runners/{runner_id}",
	"Actions.GetWorkflowJobByID":                         "GET /repos/{owner}/{repo}/actions/jobs/{job_id}",
	"Actions.ListOrganizationRunnerApplicationDownloads": "GET /orgs/{org}/actions/runners/downloads",
	"Actions.ListOrganizationRunners":                    "GET /orgs/{org}/actions/runners",
	"Actions.ListRunnerApplicationDownloads":             "GET /repos/{owner}/{repo}/actions/runners/downloads",
	"Actions.ListRunners":                                "GET /repos/{owner}/{repo}/actions/runners",
	"Actions.RemoveOrganizationRunner":                   "DELETE /orgs/{org}/actions/runners/{runner_id}",
	"Actions.RemoveRunner":                               "DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}",
	"Actions.RerunFailedJobsByID":                        "POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs",
	"Repositories.Get":                                   "GET /repos/{owner}/{repo}",
}

var goGitHubCall = regexp.MustCompile(`\.((?:Actions|Apps|Repositories|Organizations|Users|RateLimit|Checks)\.[A-Z][A-Za-z]+)\(`)

// TestCallsCoverTheCode: every go-github method the reconciler's GitHub client calls is in
// ghaccess.Calls, so a new call cannot ship without its permission in the table, the manifest and
// the start-up check.
func TestCallsCoverTheCode(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, c := range ghaccess.Calls {
		listed[c.Method+" "+c.Path] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goGitHubCall.FindAllStringSubmatch(string(b), -1) {
			seen++
			route, ok := goGitHubCalls[m[1]]
			switch {
			case !ok:
				t.Errorf("%s calls %s: add its route to goGitHubCalls and ghaccess.Calls (with its permission)", f, m[1])
			case !listed[route]:
				t.Errorf("%s calls %s (%s), which ghaccess.Calls does not list", f, m[1], route)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no go-github call found in internal/ghaccess")
	}
}
