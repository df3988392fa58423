package runnerrelease_test

import (
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

type env struct {
	fake  *githubfake.Server
	gh    *ghaccess.Client
	table *store.Store
	now   atomic.Int64 // offset from t0
}

var t0 = time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)

func (e *env) clock() time.Time { return t0.Add(time.Duration(e.now.Load())) }

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{}
	e.fake = githubfake.New(githubfake.Options{Now: e.clock})
	srv := httptest.NewServer(e.fake)
	t.Cleanup(func() { e.fake.Close(); srv.Close() })
	var err error
	if e.gh, err = ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: e.fake.PAT(), MaxRetryWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	db := stacktest.Shared(t).DynamoDB()
	name := stacktest.UniqueName(t, "release")
	if err := store.CreateTable(t.Context(), db, name); err != nil {
		t.Fatal(err)
	}
	e.table = store.New(db, name)
	return e
}

func (e *env) cache() *runnerrelease.Cache {
	return runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme", Now: e.clock})
}

// A replica reads GitHub, keeps the release in the table, and another replica within the hour
// takes it from the table; after the hour a new release is read, first seen now.
func TestCacheSharesTheReleaseThroughTheTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.cache(), e.cache()
	rel, err := a.Refresh(t.Context())
	if err != nil || rel.Version != runnerversion.Default.Version {
		t.Fatalf("first Refresh = %+v, %v", rel, err)
	}
	first := rel.Published
	published := e.fake.PublishRunnerRelease(runnerversion.Release{Version: "2.340.0"}).Published
	e.now.Add(int64(30 * time.Minute))
	if rel, err := b.Refresh(t.Context()); err != nil || rel.Version != runnerversion.Default.Version || !rel.Published.Equal(first) {
		t.Fatalf("second replica within the hour = %+v, %v; want the table's", rel, err)
	}
	e.now.Add(int64(31 * time.Minute))
	rel, err = b.Refresh(t.Context())
	if err != nil || rel.Version != "2.340.0" || !rel.Published.Equal(published.Truncate(time.Second)) {
		t.Fatalf("after the hour = %+v, %v; want 2.340.0 published %s (GitHub's published_at, not when first seen)", rel, err, published)
	}
	kept, err := e.table.GetRunnerRelease(t.Context(), "acme")
	if err != nil || kept.Release.Version != "2.340.0" || kept.Release.Linux[runnerversion.ArchX64].SHA256 != githubfake.FakeRunnerSHA256("2.340.0", runnerversion.ArchX64) {
		t.Fatalf("table = %+v, %v", kept, err)
	}
}

// A GitHub outage keeps the last known release, for the replica that knew it and for one that
// starts during the outage (from the table).
func TestCacheKeepsTheLastReleaseThroughAnOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.cache().Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.now.Add(int64(2 * time.Hour))
	e.fake.SetOutage(time.Hour)
	fresh := e.cache()
	rel, err := fresh.Refresh(t.Context())
	if err == nil {
		t.Fatal("Refresh during an outage reported no error")
	}
	if cur, ok := fresh.Current(); !ok || rel.Version != runnerversion.Default.Version || cur.Version != rel.Version {
		t.Fatalf("during the outage: Refresh = %+v, Current = %+v %v; want the last known release", rel, cur, ok)
	}
}

// appEnv is an env whose credential is a GitHub App installed on acme with perms.
func appEnv(t *testing.T, perms map[string]string) *env {
	t.Helper()
	e := newEnv(t)
	srv := httptest.NewServer(e.fake)
	t.Cleanup(srv.Close)
	e.fake.AddInstallation("acme")
	if perms != nil {
		e.fake.SetInstallationPermissions("acme", perms)
	}
	var err error
	if e.gh, err = ghaccess.New(ghaccess.Config{APIURL: srv.URL, AppID: e.fake.AppID(), PrivateKeyPEM: e.fake.AppPrivateKeyPEM()}); err != nil {
		t.Fatal(err)
	}
	return e
}

// withoutOrgRunners are the permissions the README and the credentials guide ask for when no
// owner-level runner is used: no organization_self_hosted_runners.
var withoutOrgRunners = map[string]string{"actions": "write", "administration": "write", "metadata": "read"}

// An organisation scope whose App lacks the organisation's self-hosted runners permission (which
// the docs say to leave out) still gets the current release, from actions/runner's public
// releases, with GitHub's publication time; the source is named. It fails on the code before,
// which read the organisation's downloads endpoint only and kept the compiled default.
func TestOrgScopeWithoutRunnersPermissionReadsThePublicReleases(t *testing.T) {
	t.Parallel()
	e := appEnv(t, withoutOrgRunners)
	pub := t0.Add(-40 * 24 * time.Hour)
	e.fake.PublishRunnerRelease(runnerversion.Release{Version: "2.337.0", Published: pub.Add(-20 * 24 * time.Hour)})
	e.fake.PublishRunnerRelease(runnerversion.Release{Version: "2.338.0", Published: pub})
	c := runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme", Now: e.clock})
	rel, err := c.Refresh(t.Context())
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if rel.Version != "2.338.0" || !rel.Published.Equal(pub) || rel.Linux[runnerversion.ArchARM64].SHA256 != githubfake.FakeRunnerSHA256("2.338.0", runnerversion.ArchARM64) {
		t.Fatalf("Refresh = %+v; want 2.338.0 published %s with its checksums", rel, pub)
	}
	if k := c.Known(); k.Source != runnerrelease.SourcePublic || len(k.Releases) < 3 {
		t.Fatalf("known = source %q, %d releases; want %q and every release", k.Source, len(k.Releases), runnerrelease.SourcePublic)
	}
	// The instances of 2.336.0 are due at once: 2.338.0 was published 40 days ago, past the lag.
	if why := c.Due(store.Instance{RunnerVersion: runnerversion.Default.Version}, runnerversion.DefaultLag, e.clock()); why == "" {
		t.Error("a 2.336.0 runner is not due 40 days after 2.338.0's publication")
	}
}

// A repository scope's downloads endpoint goes first (it needs only the Administration permission
// registering needs anyway), and the 30-day clock still starts at GitHub's published_at.
func TestRepositoryScopeFirstWithPublicationDates(t *testing.T) {
	t.Parallel()
	e := appEnv(t, withoutOrgRunners)
	pub := t0.Add(-3 * 24 * time.Hour)
	e.fake.PublishRunnerRelease(runnerversion.Release{Version: "2.337.0", Published: pub})
	c := runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme", Scopes: []string{"acme", "acme/api"}, Now: e.clock})
	rel, err := c.Refresh(t.Context())
	if err != nil || rel.Version != "2.337.0" || !rel.Published.Equal(pub) {
		t.Fatalf("Refresh = %+v, %v; want 2.337.0 published %s", rel, err, pub)
	}
	if src := c.Known().Source; src != runnerrelease.SourceDownloads("acme/api") {
		t.Fatalf("source %q, want the repository's downloads endpoint", src)
	}
	lag := 2 * 24 * time.Hour
	if why := c.Due(store.Instance{RunnerVersion: runnerversion.Default.Version}, lag, e.clock()); why == "" {
		t.Error("not due 3 days after publication with a 2-day lag: the clock did not start at published_at")
	}
}

// No source readable (no organisation permission, public releases unreachable as on a GitHub
// Enterprise Server) and the compiled default more than 30 days old: the start-up check fails and
// names the missing permission. Within 30 days of the default's publication it passes.
func TestStartupCheckNamesThePermission(t *testing.T) {
	t.Parallel()
	e := appEnv(t, withoutOrgRunners)
	e.fake.SetPublicReleases(false)
	late := runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme", Now: e.clock})
	err := late.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "organization_self_hosted_runners (read") || !strings.Contains(err.Error(), runnerversion.Default.Version) {
		t.Fatalf("Check = %v; want a failure naming organization_self_hosted_runners and the default", err)
	}
	early := runnerrelease.New(e.gh, e.table, runnerrelease.Options{Scope: "acme", Now: func() time.Time { return runnerversion.Default.Published.Add(24 * time.Hour) }})
	if err := early.Check(t.Context()); err != nil {
		t.Fatalf("Check a day after the default's publication = %v, want nil", err)
	}
	e.fake.SetPublicReleases(true)
	if err := late.Check(t.Context()); err != nil {
		t.Fatalf("Check with the public releases readable = %v, want nil", err)
	}
}
