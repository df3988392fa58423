// Fuzz targets of the API's request bodies and paths (seed corpora in testdata/fuzz/<target>). Whatever a
// caller sends, the API answers a clear 4xx with a JSON error (code and message), never a 5xx (a
// recovered panic answers 500, so a panic fails the target too), and what it passes to the domain
// is valid.
//
//	go test -run '^$' -fuzz '^FuzzProvisionBody$' -fuzztime 10s ./reconciler/api
package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

const fuzzMaxIdle = 24 * time.Hour

// fuzzAPI is the API over fakes that behave like the domain on validity: the provisioner checks the
// request against a configuration and refuses what is invalid; every run exists.
func fuzzAPI(t testing.TB) (http.Handler, *fakeProvisioner, *fakeReleaser) {
	t.Helper()
	cfg := provision.Config{
		ResourceClasses:    map[string]provision.ResourceClass{"small": {CPU: 2, MemoryMiB: 4096}},
		RunnerClasses:      map[string]runnerclass.Resolved{"linux": {RunnerClass: declared.RunnerClass{Name: "linux"}}},
		DefaultRunnerClass: "linux", DeploymentID: "fuzz",
	}
	prov := &fakeProvisioner{f: func(_ context.Context, req provision.Request) (provision.Result, error) {
		if err := req.Validate(cfg); err != nil {
			return provision.Result{}, err
		}
		res := provision.Result{RunKey: store.RunKey(req.RepositoryID, req.RunID, req.Attempt), Label: req.Label(), Status: provision.StatusSucceeded}
		for range req.Count {
			res.Runners = append(res.Runners, provision.Runner{InstanceID: "i-0123456789abcdef0", InstanceType: "c6i.large", UsageClass: "on-demand", Source: provision.SourceReused})
		}
		return res, nil
	}}
	rel := &fakeReleaser{rep: release.Report{Message: release.NothingToRelease}}
	st := &fakeStore{runs: map[string]store.Run{}, instances: map[string]store.Instance{}}
	for attempt := 1; attempt <= 3; attempt++ {
		key := store.RunKey("4242", "7", attempt)
		st.setRun(store.Run{Key: key, RepositoryID: "4242", RunID: "7", Attempt: attempt, Status: provision.StatusSucceeded, Version: 1,
			Result: json.RawMessage(`{"runKey":"` + key + `","label":"7","status":"succeeded"}`)})
	}
	a, err := api.New(api.Options{
		Provisioner: prov, Releaser: rel, Runs: st, Store: st, Auth: fakeAuth{}, Logger: slog.New(slog.DiscardHandler),
		IdleTime: 15 * time.Minute, MaxIdleTime: fuzzMaxIdle, DefaultRunnerClass: "linux",
		MaxBodyBytes: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a.Handler(false), prov, rel
}

// serve sends one request (run 7 of acme/api) and checks the answer's shape: a 2xx, or a 4xx with a
// JSON error. It returns the status and body.
func serve(t *testing.T, h http.Handler, method, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, "http://api.test/", strings.NewReader(string(body)))
	req.URL.Path = path
	req.Header.Set("Authorization", "Bearer run-7")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	code, out := rec.Code, rec.Body.Bytes()
	switch {
	case code >= 500:
		t.Fatalf("%s %q (%q, %q): %d %s: bad input must be a 4xx", method, path, contentType, body, code, out)
	case code >= 400:
		var e apiv1.Error
		if err := json.Unmarshal(out, &e); err != nil || e.Code == "" || e.Error == "" {
			t.Fatalf("%s %q: %d with %q: want a JSON error with a code and a message", method, path, code, out)
		}
	case code != http.StatusOK:
		t.Fatalf("%s %q: unexpected status %d %s", method, path, code, out)
	}
	return code, out
}

// FuzzProvisionBody: POST /v1/provision with any body and content type.
func FuzzProvisionBody(f *testing.F) {
	h, prov, _ := fuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		prov.mu.Lock()
		prov.reqs = prov.reqs[:0]
		prov.mu.Unlock()
		code, out := serve(t, h, http.MethodPost, "/v1/provision", contentType, body)
		if code != http.StatusOK {
			return
		}
		var resp apiv1.ProvisionResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("200 with %q: %v", out, err)
		}
		prov.mu.Lock()
		defer prov.mu.Unlock()
		if len(prov.reqs) != 1 {
			t.Fatalf("200 after %d provisions", len(prov.reqs))
		}
		req := prov.reqs[0]
		if req.RepositoryID != "4242" || req.RunID != "7" || req.Attempt != 1 || req.Repository != "acme/api" {
			t.Fatalf("the body changed the caller's identity: %+v", req)
		}
		if len(resp.Runners) != req.Count || req.Count < 1 || req.Count > provision.MaxCount {
			t.Fatalf("answered %d runners for a request of %d", len(resp.Runners), req.Count)
		}
	})
}

// FuzzReleaseBody: POST /v1/release with any body; an accepted release is of the caller's run with
// an idle time in range.
func FuzzReleaseBody(f *testing.F) {
	h, _, rel := fuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rel.mu.Lock()
		rel.calls, rel.idle = rel.calls[:0], rel.idle[:0]
		rel.mu.Unlock()
		code, _ := serve(t, h, http.MethodPost, "/v1/release", "application/json", body)
		if code != http.StatusOK {
			return
		}
		rel.mu.Lock()
		defer rel.mu.Unlock()
		if len(rel.calls) != 1 {
			t.Fatalf("200 after %d releases", len(rel.calls))
		}
		if !strings.HasPrefix(rel.calls[0], "4242:7:") {
			t.Fatalf("released %q: not the caller's run", rel.calls[0])
		}
		if idle := rel.idle[0]; idle <= 0 || idle > fuzzMaxIdle {
			t.Fatalf("body %q released with idle time %v: outside (0, %v]", body, idle, fuzzMaxIdle)
		}
		var b struct {
			IdleTimeSeconds int64 `json:"idle_time_seconds"`
		}
		// Compared in seconds: a product in time.Duration could overflow the same way the API's did.
		if json.Unmarshal(body, &b) == nil && b.IdleTimeSeconds != 0 && int64(rel.idle[0]/time.Second) != b.IdleTimeSeconds {
			t.Fatalf("asked for %d s of idle time, released with %v", b.IdleTimeSeconds, rel.idle[0])
		}
	})
}

// FuzzRunPath: GET /v1/runs/{run} with any run reference.
func FuzzRunPath(f *testing.F) {
	h, _, _ := fuzzAPI(f)
	f.Fuzz(func(t *testing.T, ref string) {
		if strings.ContainsAny(ref, "/?#") || !validPathSegment(ref) {
			return // not one path segment: the router's business, not the handler's
		}
		serve(t, h, http.MethodGet, "/v1/runs/"+ref, "", nil)
	})
}

func validPathSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}
