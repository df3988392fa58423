package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

func TestGitHubRoute(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/repos/acme/api/actions/runners/registration-token":        "/repos/{owner}/{repo}/actions/runners/registration-token",
		"/api/v3/repos/acme/api/actions/runners/remove-token":       "/repos/{owner}/{repo}/actions/runners/remove-token",
		"/repos/acme/api/actions/runners":                           "/repos/{owner}/{repo}/actions/runners",
		"/repos/acme/api/actions/runners/42":                        "/repos/{owner}/{repo}/actions/runners/{id}",
		"/orgs/acme/actions/runners/42":                             "/orgs/{owner}/actions/runners/{id}",
		"/repos/acme/api/actions/runs/123/cancel":                   "/repos/{owner}/{repo}/actions/runs/{id}/cancel",
		"/app/installations/77/access_tokens":                       "/app/installations/{id}/access_tokens",
		"/repos/acme/api/installation":                              "/repos/{owner}/{repo}/installation",
		"/users/acme/installation":                                  "/users/{owner}/installation",
		"/repos/acme/api/actions/runners/not-a-number":              "other",
		"/repos/acme/api/contents/README.md":                        "other",
		"/":                                                         "other",
		"/orgs/acme/actions/runners/generate-jitconfig":             "/orgs/{owner}/actions/runners/generate-jitconfig",
		"/orgs/acme/actions/runners/downloads":                      "/orgs/{owner}/actions/runners/downloads",
		"/repos/acme/api/actions/runners/downloads":                 "/repos/{owner}/{repo}/actions/runners/downloads",
		"/prefix/path/repos/acme/api/actions/runners/remove-token/": "/repos/{owner}/{repo}/actions/runners/remove-token",
	} {
		if got := metrics.GitHubRoute(path); got != want {
			t.Errorf("GitHubRoute(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestGitHubTransport(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/42") {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	m := metrics.New(metrics.Options{})
	getThrough(t, m, srv.URL, "/repos/a/b/actions/runners", "/repos/c/d/actions/runners", "/repos/a/b/actions/runners/42")
	body := scrape(t, m)
	for _, want := range []string{
		`runnerpool_github_calls_total{method="GET",route="/repos/{owner}/{repo}/actions/runners",status="2xx"} 2`,
		`runnerpool_github_calls_total{method="GET",route="/repos/{owner}/{repo}/actions/runners/{id}",status="4xx"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// getThrough GETs each path of base through the metrics' GitHub transport.
func getThrough(t *testing.T, m *metrics.Metrics, base string, paths ...string) {
	t.Helper()
	hc := &http.Client{Transport: m.GitHubTransport(nil)}
	for _, p := range paths {
		resp, err := hc.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// TestAWSMiddleware counts DynamoDB operations of a real client against DynamoDB Local, and a lost
// conditional claim as a claim collision.
func TestAWSMiddleware(t *testing.T) {
	t.Parallel()
	stk := stacktest.Shared(t)
	m := metrics.New(metrics.Options{})
	cfg, _ := stk.AWSConfig(context.Background())
	cfg.APIOptions = append(cfg.APIOptions, m.AWSMiddleware)
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(stk.Endpoints.DynamoDB)
		o.DisableValidateResponseChecksum = true
	})
	table := stacktest.UniqueName(t, "metrics")
	if err := store.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	st := store.New(db, table)
	ctx := context.Background()
	in := store.Instance{ID: "i-1", State: store.StateCreated, RunID: "r0", Threshold: time.Now().Add(time.Hour)}
	if _, err := st.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	// Not idle: the claim loses its condition.
	if _, err := st.Claim(ctx, "i-1", "r1", time.Now().Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Claim: %v, want a conflict", err)
	}
	// Wrong run: a transition loses too.
	if _, err := st.Transition(ctx, "i-1", store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "other"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Transition: %v, want a conflict", err)
	}
	// A lost lease is not a collision of an instance record.
	if _, err := st.AcquireLease(ctx, "cron", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, "cron", "b", time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AcquireLease: %v", err)
	}
	body := scrape(t, m)
	for _, want := range []string{
		`runnerpool_aws_calls_total{operation="PutItem",result="ok",service="DynamoDB"} 2`,
		`runnerpool_aws_calls_total{operation="PutItem",result="condition_failed",service="DynamoDB"} 1`,
		`runnerpool_aws_calls_total{operation="UpdateItem",result="condition_failed",service="DynamoDB"} 2`,
		`runnerpool_claim_collisions_total{kind="claim"} 1`,
		`runnerpool_claim_collisions_total{kind="transition"} 1`,
		`runnerpool_aws_call_duration_seconds_count{operation="UpdateItem",service="DynamoDB"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestPoolGaugesAndHelpers(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	m := metrics.New(metrics.Options{Replica: "r1", PoolCacheTTL: time.Hour, PoolCounts: func(context.Context) ([]metrics.PoolSample, error) {
		if reads.Add(1) > 1 {
			return nil, errors.New("throttled")
		}
		return []metrics.PoolSample{{RunnerClass: "linux", State: "idle", Count: 3}, {RunnerClass: "linux", Pool: "hot", State: "ready", Count: 2}}, nil
	}})
	m.ObserveProvision("succeeded", 2*time.Second, []string{"reused", "created", "reused"})
	m.ObserveJobStartup("reused", 300*time.Millisecond)
	m.SetLeader(true)
	m.Error(metrics.ErrAuth)
	m.CronRun("refresh", "ok", time.Second)
	m.CronRun("refresh", "skipped_not_leader", 0)
	for range 2 {
		body := scrape(t, m)
		for _, want := range []string{
			`runnerpool_pool_instances{pool="",replica="r1",runner_class="linux",state="idle"} 3`,
			`runnerpool_pool_instances{pool="hot",replica="r1",runner_class="linux",state="ready"} 2`,
			`runnerpool_provision_duration_seconds_count{outcome="succeeded",replica="r1",source="created"} 1`,
			`runnerpool_provisioned_runners_total{replica="r1",source="reused"} 2`,
			`runnerpool_job_startup_seconds_count{replica="r1",source="reused"} 1`,
			`runnerpool_leader{replica="r1"} 1`,
			`runnerpool_errors_total{kind="auth",replica="r1"} 1`,
			`runnerpool_cron_runs_total{job="refresh",replica="r1",result="skipped_not_leader"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("pool counts read %d times in two scrapes, want 1 (cached)", n)
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"runnerpool_leader", "go_goroutines"} {
		if !names[want] {
			t.Errorf("registry lacks %s", want)
		}
	}
	var nilM *metrics.Metrics
	nilM.ObserveProvision("x", 0, nil) // a nil *Metrics is a no-op
	nilM.Error("x")
}

// A pool message a selection drops (malformed, foreign, expired, dead) is counted by reason.
func TestPoolMessageDropped(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.PoolMessageDropped("malformed")
	m.PoolMessageDropped("malformed")
	m.PoolMessageDropped("dead")
	var nilMetrics *metrics.Metrics
	nilMetrics.PoolMessageDropped("malformed") // a nil *Metrics is a no-op
	out := scrape(t, m)
	for _, want := range []string{
		`runnerpool_pool_messages_dropped_total{reason="malformed"} 2`,
		`runnerpool_pool_messages_dropped_total{reason="dead"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// Items a listing skipped as not control-plane records are counted by index.
func TestForeignItems(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.ForeignItems("by_state", 3)
	m.ForeignItems("by_run", 1)
	var nilMetrics *metrics.Metrics
	nilMetrics.ForeignItems("by_state", 1) // a nil *Metrics is a no-op
	out := scrape(t, m)
	for _, want := range []string{
		`runnerpool_foreign_items_total{index="by_state"} 3`,
		`runnerpool_foreign_items_total{index="by_run"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// Instances a release found reclaimed by EC2 are counted.
func TestSpotInterruptions(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.SpotInterruption("i-1")
	m.SpotInterruption("i-2")
	var nilMetrics *metrics.Metrics
	nilMetrics.SpotInterruption("i-3") // a nil *Metrics is a no-op
	if out := scrape(t, m); !strings.Contains(out, "runnerpool_spot_interruptions_total 2") {
		t.Errorf("metrics lack runnerpool_spot_interruptions_total 2")
	}
}

// Completions the pool job backstop inferred are counted by source and name.
func TestPoolJobCompletionsInferred(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.PoolJobCompletionInferred("webhook", "warm")
	m.PoolJobCompletionInferred("webhook", "warm")
	m.PoolJobCompletionInferred("scale_set", "linux-set")
	var nilMetrics *metrics.Metrics
	nilMetrics.PoolJobCompletionInferred("webhook", "warm") // a nil *Metrics is a no-op
	out := scrape(t, m)
	for _, want := range []string{
		`runnerpool_pool_job_completions_inferred_total{name="warm",source="webhook"} 2`,
		`runnerpool_pool_job_completions_inferred_total{name="linux-set",source="scale_set"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
