package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

func TestRunnerVersionMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	published := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	m.RunnerRelease("2.336.0", published)
	m.RunnerRelease("2.337.0", published) // replaces the previous release's series
	m.RunnerVersions(map[string]int{"2.337.0": 3, "2.336.0": 1}, 48*time.Hour)
	m.RegistrationRefused(metrics.RefusedRunnerVersion)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`runnerpool_runner_release_info{version="2.337.0"} 1`,
		`runnerpool_runner_release_published_timestamp_seconds 1.7951328e+09`,
		`runnerpool_instances_by_runner_version{version="2.336.0"} 1`,
		`runnerpool_instances_by_runner_version{version="2.337.0"} 3`,
		`runnerpool_runner_oldest_behind_seconds 172800`,
		`runnerpool_registrations_refused_total{reason="runner_version"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(body, `runner_release_info{version="2.336.0"}`) {
		t.Error("the previous release is still reported current")
	}
}
