// Integration tests of the reconciler service: real replicas (config, SDK clients, provisioner,
// releaser, refresher, API, lease) against DynamoDB Local, fauxqs, the EC2 server with simulated
// agents, the GitHub fake and the OIDC issuer.
package service_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

func provisionBody(count int) apiv1.ProvisionRequest {
	return apiv1.ProvisionRequest{Count: count, AllowedInstanceTypes: []string{"c6i.*"}, ResourceClass: "small"}
}

// TestProvisionReleaseRoundTrip: reuse from the pool and creation in one provision, the run's
// record with sources, pool counts, release back to the pool, and the release on the run record.
func TestProvisionReleaseRoundTrip(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	pooled := env.Fill(t, 2)
	r := env.Start(t, "a", nil)
	tok := env.Token(t, "1001", nil)

	code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, tok, provisionBody(3))
	if code != http.StatusOK {
		t.Fatalf("provision: %d %s", code, body)
	}
	prov := servicetest.Decode[apiv1.ProvisionResponse](t, body)
	wantKey := servicetest.RepositoryID + ":1001:1"
	if prov.RunKey != wantKey || prov.Label != "1001-1" || prov.Status != apiv1.StatusSucceeded || len(prov.Runners) != 3 {
		t.Fatalf("provision answer %+v, want run key %s, label 1001-1, 3 runners", prov, wantKey)
	}
	sources := map[string][]string{}
	for _, rn := range prov.Runners {
		sources[rn.Source] = append(sources[rn.Source], rn.InstanceID)
	}
	slices.Sort(sources[apiv1.SourceReused])
	if !slices.Equal(sources[apiv1.SourceReused], pooled) || len(sources[apiv1.SourceCreated]) != 1 {
		t.Errorf("sources %v: want the 2 pooled instances %v reused and 1 created", sources, pooled)
	}

	// A repeated request of the same run answers the same runners.
	code, body = servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "1001", nil), provisionBody(3))
	if again := servicetest.Decode[apiv1.ProvisionResponse](t, body); code != http.StatusOK || !slices.Equal(again.InstanceIDs(), prov.InstanceIDs()) {
		t.Errorf("repeated provision: %d %v, want 200 %v", code, again.InstanceIDs(), prov.InstanceIDs())
	}

	code, body = servicetest.Call(t, http.MethodGet, r.URL+apiv1.PathRuns+"1001", tok, nil)
	if code != http.StatusOK {
		t.Fatalf("GET run: %d %s", code, body)
	}
	run := servicetest.Decode[apiv1.RunResponse](t, body)
	if run.Status != apiv1.StatusSucceeded || run.Provision == nil || len(run.Provision.Runners) != 3 || len(run.Instances) != 3 ||
		run.Request == nil || run.Request.Count != 3 {
		t.Fatalf("GET run: %+v", run)
	}
	for _, in := range run.Instances {
		if in.State != string(store.StateRunning) {
			t.Errorf("instance %s is %s after the provision, want running", in.InstanceID, in.State)
		}
	}

	code, body = servicetest.Call(t, http.MethodGet, r.URL+apiv1.PathPools, tok, nil)
	pools := servicetest.Decode[apiv1.PoolsResponse](t, body)
	if code != http.StatusOK || pools.Totals["running"] != 3 || len(pools.Runs) != 1 || pools.Runs[0].RunKey != wantKey || pools.Runs[0].Instances != 3 {
		t.Errorf("pools: %d %+v", code, pools)
	}

	code, body = servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathRelease, tok, apiv1.ReleaseRequest{IdleTimeSeconds: 600})
	if code != http.StatusOK {
		t.Fatalf("release: %d %s", code, body)
	}
	rel := servicetest.Decode[apiv1.ReleaseResponse](t, body)
	if rel.Counts["pooled"] != 3 {
		t.Errorf("release: %+v, want 3 pooled", rel)
	}
	// A second release finds nothing to do and says so.
	code, body = servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathRelease, tok, nil)
	if again := servicetest.Decode[apiv1.ReleaseResponse](t, body); code != http.StatusOK || again.Counts["pooled"] != 0 {
		t.Errorf("second release: %d %s", code, body)
	}

	_, body = servicetest.Call(t, http.MethodGet, r.URL+apiv1.PathRuns+wantKey, tok, nil)
	run = servicetest.Decode[apiv1.RunResponse](t, body)
	if len(run.Releases) != 1 || run.Releases[0].IdleTimeSeconds != 600 || len(run.Releases[0].Instances) != 3 {
		t.Errorf("run after release: releases %+v, want one release of 3 instances with idle time 600", run.Releases)
	}
	for _, in := range run.Instances {
		if in.State != string(store.StateIdle) {
			t.Errorf("instance %s is %s after the release, want idle", in.InstanceID, in.State)
		}
	}
	live := env.Audit(t)
	if len(live) != 3 {
		t.Errorf("live instances after the round trip: %d, want 3 idle", len(live))
	}
	// The replica's first election may still be under way on a loaded machine (the lease is 2 s):
	// wait for it, then read every other line from the same scrape.
	m := scrapeMetrics(t, r.URL)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(m, `runnerpool_leader{replica="a"} 1`) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		m = scrapeMetrics(t, r.URL)
	}
	for _, want := range []string{
		`runnerpool_pool_instances{pool="",replica="a",runner_class="linux",state="idle"} 3`,
		`runnerpool_provisioned_runners_total{replica="a",source="reused"} 2`,
		`runnerpool_provisioned_runners_total{replica="a",source="created"} 1`,
		`runnerpool_provision_duration_seconds_count{outcome="succeeded",replica="a",source="created"} 1`,
		`runnerpool_provision_duration_seconds_count{outcome="repeated",replica="a",source="none"} 1`,
		`runnerpool_job_startup_seconds_count{replica="a",source="reused"} 2`,
		`runnerpool_leader{replica="a"} 1`,
		`runnerpool_aws_calls_total{operation="CreateFleet",replica="a",result="ok",service="EC2"} 1`,
		`runnerpool_http_requests_total{code="200",replica="a",route="release"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestGitHubApp: the reconciler authenticates as a GitHub App (installation tokens minted per
// owner) instead of a PAT; a created runner gets its registration through the installation.
func TestGitHubApp(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	env.GitHub.AddInstallation("acme")
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyFile, env.GitHub.AppPrivateKeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := env.Start(t, "a", map[string]string{
		"RUNNERPOOL_GITHUB_TOKEN":        "",
		"RUNNERPOOL_GITHUB_APP_ID":       strconv.FormatInt(env.GitHub.AppID(), 10),
		"RUNNERPOOL_GITHUB_APP_KEY_FILE": keyFile,
	})
	code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, env.Token(t, "8001", nil), provisionBody(1))
	if code != http.StatusOK {
		t.Fatalf("provision with app credentials: %d %s", code, body)
	}
	calls := env.GitHub.Calls()
	var installation, registration bool
	for k, n := range calls {
		installation = installation || (strings.Contains(k, "access_tokens") && n > 0)
		registration = registration || (strings.Contains(k, "registration-token") && n > 0)
	}
	if !installation || !registration {
		t.Errorf("GitHub calls %v: want an installation token and a registration token", calls)
	}
	metrics := scrapeMetrics(t, r.URL)
	if !strings.Contains(metrics, `route="/repos/{owner}/{repo}/actions/runners/registration-token",status="2xx"`) {
		t.Errorf("metrics do not count the registration token call by route")
	}
}

func scrapeMetrics(t *testing.T, base string) string {
	t.Helper()
	code, body := servicetest.Call(t, http.MethodGet, base+apiv1.PathMetrics, "", nil)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	return string(body)
}
