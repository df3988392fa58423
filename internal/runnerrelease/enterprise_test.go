package runnerrelease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const enterpriseDownloads = "GET /enterprises/{enterprise}/actions/runners/downloads"

// TestEnterpriseDownloadsWhereThePATMayReadThem: with an enterprise configured, its downloads
// endpoint is a source of the current release for a classic PAT with manage_runners:enterprise,
// read after the scopes' (here an organisation's, which the PAT lacks admin:org for) and before the
// public releases (here unreachable, as on a GitHub Enterprise Server). A PAT without the scope is
// refused and the refusal names what it needs; a GitHub App, which GitHub never lets call it, skips
// it without a call.
func TestEnterpriseDownloadsWhereThePATMayReadThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fake.SetPublicReleases(false)
	e.fake.AddEnterprise("acme-corp")
	e.fake.PublishRunnerRelease(runnerversion.Release{Version: "2.338.0"})
	e.fake.SetPATScopes("repo", githubfake.ScopeManageRunnersEnterprise)

	without := runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme", Now: e.clock})
	if _, err := without.Refresh(t.Context()); err == nil {
		t.Fatal("no enterprise configured, the organisation's endpoint refused, no public releases: Refresh found a release")
	}
	c := runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme", Enterprise: "acme-corp", Now: e.clock})
	rel, err := c.Refresh(t.Context())
	if err != nil || rel.Version != "2.338.0" || rel.Linux[runnerversion.ArchX64].SHA256 != githubfake.FakeRunnerSHA256("2.338.0", runnerversion.ArchX64) {
		t.Fatalf("Refresh = %+v, %v; want 2.338.0 from the enterprise", rel, err)
	}
	if src := c.Known().Source; src != runnerrelease.SourceEnterprise("acme-corp") {
		t.Errorf("source %q, want %q", src, runnerrelease.SourceEnterprise("acme-corp"))
	}

	e.fake.SetPATScopes("repo", "admin:org")
	e.now.Add(int64(2 * runnerrelease.Every))
	_, err = runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme/api", Enterprise: "acme-corp", Now: e.clock}).Refresh(t.Context())
	if err != nil {
		t.Fatalf("a repository scope answers first: %v", err)
	}
	e.fake.SetPATScopes("repo")
	_, err = e.gh.EnterpriseRunnerRelease(t.Context(), "acme-corp")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a PAT without manage_runners:enterprise: %v, want GitHub's 403", err)
	}

	app := appEnv(t, withoutOrgRunners)
	app.fake.SetPublicReleases(false)
	app.fake.AddEnterprise("acme-corp")
	err = runnerrelease.New(app.gh, app.table, runnerrelease.Options{Scope: "acme", Enterprise: "acme-corp", Now: app.clock}).Check(t.Context())
	var unreadable *runnerrelease.UnreadableError
	if !errors.As(err, &unreadable) || !errors.Is(err, ghaccess.ErrClassicPATOnly) || !strings.Contains(err.Error(), "a classic PAT with manage_runners:enterprise") {
		t.Errorf("Check with a GitHub App = %v; want the enterprise source named with what it needs", err)
	}
	if n := app.fake.Calls()[enterpriseDownloads]; n != 0 {
		t.Errorf("the App called the enterprise endpoint %d times; GitHub never lets it", n)
	}
}
