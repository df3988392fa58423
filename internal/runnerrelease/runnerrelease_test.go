package runnerrelease_test

import (
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/stack/stacktest"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
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
	if e.gh, err = ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: e.fake.PAT()}); err != nil {
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
	if err != nil || rel.Version != runnerversion.Default.Version || !rel.Published.Equal(t0) {
		t.Fatalf("first Refresh = %+v, %v", rel, err)
	}
	e.fake.PublishRunnerRelease(runnerversion.Release{Version: "2.340.0"})
	e.now.Add(int64(30 * time.Minute))
	if rel, err := b.Refresh(t.Context()); err != nil || rel.Version != runnerversion.Default.Version || !rel.Published.Equal(t0) {
		t.Fatalf("second replica within the hour = %+v, %v; want the table's", rel, err)
	}
	e.now.Add(int64(31 * time.Minute))
	rel, err = b.Refresh(t.Context())
	if err != nil || rel.Version != "2.340.0" || !rel.Published.Equal(e.clock()) {
		t.Fatalf("after the hour = %+v, %v; want 2.340.0 first seen now", rel, err)
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
