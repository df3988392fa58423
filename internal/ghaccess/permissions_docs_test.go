package ghaccess_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
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
}

// callsTable renders ghaccess.Calls as the guide's table.
func callsTable() string {
	var b strings.Builder
	b.WriteString("| Call | Used for | GitHub App / fine-grained PAT permission | Classic PAT scope |\n|---|---|---|---|\n")
	for _, c := range ghaccess.Calls {
		perm, scope := "none (the App's own JWT)", "—"
		if c.Permission != "" {
			perm = fmt.Sprintf("%s (%s)", permissionTitles[c.Permission], c.Level)
			scope = "`" + c.PATScope + "`"
		}
		fmt.Fprintf(&b, "| `%s %s` | %s | %s | %s |\n", c.Method, c.Path, c.Use, perm, scope)
	}
	return b.String()
}

// TestCredentialsGuide: the guide (and its template) lists every GitHub call with what it needs,
// as ghaccess.Calls says, and the App's permissions.
func TestCredentialsGuide(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"../../docs/guides/github-credentials.md", "../../templates/guides/github-credentials.md.tmpl"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
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
		if c.Permission != "" && (permissionTitles[c.Permission] == "" || c.PATScope == "" || (c.Level != "read" && c.Level != "write")) {
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
