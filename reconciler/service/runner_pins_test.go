package service

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// keptRelease is a release table holding one release, read just now.
type keptRelease struct{ rr store.RunnerRelease }

func (k keptRelease) GetRunnerRelease(context.Context, string) (store.RunnerRelease, error) {
	return k.rr, nil
}
func (keptRelease) PutRunnerRelease(context.Context, store.RunnerRelease) error { return nil }

// A runner class whose user data pins runner_version 2.336.0, after 2.337.0 was published: the
// reconciler warns with the date GitHub stops giving it jobs (2.337.0's publication plus 30 days)
// in its log, its metrics and /readyz; an unpinned class is not named. Fails on the code before,
// which said nothing until GitHub refused the runners.
func TestPinnedRunnerClassIsWarnedAboutWithTheDate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	pub := now.Add(-20 * 24 * time.Hour)
	cur := runnerversion.Release{Version: "2.338.0", Published: now.Add(-24 * time.Hour), Linux: runnerversion.Default.Linux}
	kept := store.RunnerRelease{Scope: "acme", Release: cur, FetchedAt: now, Source: runnerrelease.SourcePublic,
		Releases: []runnerversion.Release{{Version: "2.336.0"}, {Version: "2.337.0", Published: pub}, {Version: "2.338.0", Published: cur.Published}}}
	var logs strings.Builder
	s := &Service{
		o: Options{Now: func() time.Time { return now }}, log: slog.New(slog.NewTextHandler(&logs, nil)),
		metrics: metrics.New(metrics.Options{}),
	}
	s.release = runnerrelease.New(nil, keptRelease{kept}, runnerrelease.Options{Scope: "acme", Now: func() time.Time { return now }})
	s.classes = &classSource{cur: &classSet{classes: map[string]runnerclass.Resolved{
		"pinned":  {RunnerClass: declared.RunnerClass{Name: "pinned"}, RunnerVersion: "2.336.0"},
		"current": {RunnerClass: declared.RunnerClass{Name: "current"}, RunnerVersion: "2.338.0"},
	}}}
	if _, err := s.release.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.observePins(t.Context())
	deadline := pub.Add(runnerversion.AssignmentWindow)
	if !strings.Contains(logs.String(), "class=pinned version=2.336.0 deadline="+deadline.Format(time.RFC3339)) || strings.Contains(logs.String(), "class=current") {
		t.Errorf("log %q does not warn about class pinned with deadline %s (only)", logs.String(), deadline)
	}
	rec := httptest.NewRecorder()
	s.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := `runnerpool_runner_pin_deadline_timestamp_seconds{class="pinned",version="2.336.0"} ` + formatFloat(deadline); !strings.Contains(rec.Body.String(), want) {
		t.Errorf("metrics lack %q", want)
	}
	checks := map[string]string{}
	s.pinChecks(checks)
	if got := checks["runner_pin"]; !strings.Contains(got, "pinned pins 2.336.0") || !strings.Contains(got, deadline.Format(time.DateOnly)) {
		t.Errorf("/readyz runner_pin = %q", got)
	}
	if got := checks["runner_release"]; !strings.Contains(got, "2.338.0") || !strings.Contains(got, runnerrelease.SourcePublic) {
		t.Errorf("/readyz runner_release = %q, want the version and its source", got)
	}
}

func formatFloat(t time.Time) string { return strconv.FormatFloat(float64(t.Unix()), 'g', -1, 64) }
