// Contract tests: the GitHub fake and the product's GitHub client held to GitHub's published
// description, not to this repository's understanding of it. Every REST call internal/ghaccess makes
// (the only GitHub REST client of the product) goes through a checker that validates the request
// (method, path, parameters, body) and the fake's response (status, body) against the OpenAPI
// descriptions of npm @octokit/openapi, github.com's and the oldest GHES release it ships; every workflow_job webhook the fake sends is validated
// against @octokit/openapi-webhooks. Both packages come from test/stack/node's lock file
// (`make deps`).

package githubfake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// nodeModules is where `make deps` installs the stack's npm packages, relative to this package.
const nodeModules = "../node/node_modules"

// descriptions are GitHub's REST descriptions the product is held to: github.com, and the oldest
// GitHub Enterprise Server release the pinned package ships (the product serves GHES through
// --github-api-url; an operation or field it uses must exist there too).
var descriptions = []string{"api.github.com", "ghes-3.17"}

type description struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

var loaded sync.Map // name -> *description

// restDescription loads one of GitHub's REST descriptions (11-13 MB) once per test binary. Its
// server is replaced by https://api.github.com, so that GHES operations route by path alone, as
// github.com's do (the /api/v3 prefix is ghaccess's business, tested there).
func restDescription(t *testing.T, name string) (*openapi3.T, routers.Router) {
	t.Helper()
	v, _ := loaded.LoadOrStore(name, &description{})
	d := v.(*description)
	d.once.Do(func() {
		file := filepath.Join(nodeModules, "@octokit/openapi/generated", name+".json")
		loader := openapi3.NewLoader()
		d.doc, d.err = loader.LoadFromFile(file)
		if d.err != nil {
			d.err = fmt.Errorf("loading %s (run make deps): %w", file, d.err)
			return
		}
		d.doc.Servers = openapi3.Servers{{URL: "https://api.github.com"}}
		d.router, d.err = gorillamux.NewRouter(d.doc)
	})
	if d.err != nil {
		t.Fatal(d.err)
	}
	return d.doc, d.router
}

// contract sits in front of the fake and validates every REST exchange against the description.
type contract struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	next   http.Handler

	mu      sync.Mutex
	checked map[string]bool // "METHOD /path/template STATUS"
	errs    []string
}

func newContract(t *testing.T, name string, next http.Handler) *contract {
	doc, router := restDescription(t, name)
	return &contract{t: t, doc: doc, router: router, next: next, checked: map[string]bool{}}
}

func (c *contract) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *contract) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The fake runner protocol (/_runner/...) stands in for the runner's own service, not the REST API.
	if strings.HasPrefix(r.URL.Path, "/_runner/") {
		c.next.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	// The description's server is https://api.github.com; route the same path and query there.
	vr := r.Clone(r.Context())
	vr.URL = &url.URL{Scheme: "https", Host: "api.github.com", Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	vr.Host = "api.github.com"
	vr.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := c.router.FindRoute(vr)
	if err != nil {
		c.fail("%s %s: not an operation of GitHub's REST API: %v", r.Method, r.URL.Path, err)
		c.next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		c.fail("request %s %s (%s) does not match GitHub's description: %v", r.Method, r.URL.RequestURI(), route.Path, err)
	}

	rec := httptest.NewRecorder()
	c.next.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())

	// A success must be a documented status with a body of its schema. An error status GitHub may
	// send to any call (404 for a gone runner) is checked against the description when it is
	// documented there, else against GitHub's basic-error body.
	documented := route.Operation.Responses.Status(rec.Code) != nil
	if rec.Code < 300 || documented {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
		out.SetBodyBytes(rec.Body.Bytes())
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			c.fail("response %d to %s %s does not match GitHub's description: %v\nbody: %s", rec.Code, r.Method, route.Path, err, rec.Body.Bytes())
		}
	} else {
		var v any
		basic := c.doc.Components.Schemas["basic-error"]
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || basic == nil {
			c.fail("error %d to %s %s: body %q is not JSON (%v)", rec.Code, r.Method, route.Path, rec.Body.Bytes(), err)
		} else if err := basic.Value.VisitJSON(v); err != nil {
			c.fail("error %d to %s %s is not a basic-error: %v", rec.Code, r.Method, route.Path, err)
		}
	}
	c.checkRateHeaders(r, route.Path, rec)
	c.mu.Lock()
	c.checked[fmt.Sprintf("%s %s %d", r.Method, route.Path, rec.Code)] = true
	c.mu.Unlock()
}

// rateHeaders are the x-ratelimit-* headers every REST answer carries, with the description's
// components that describe them (GET /rate_limit refers to them).
var rateHeaders = map[string]string{
	"X-RateLimit-Limit":     "x-rate-limit-limit",
	"X-RateLimit-Remaining": "x-rate-limit-remaining",
	"X-RateLimit-Reset":     "x-rate-limit-reset",
}

// checkRateHeaders holds every answer's x-ratelimit-* headers to the description's schemas, and a
// limit answer to what GitHub documents: x-ratelimit-remaining 0 (primary) or retry-after (secondary).
func (c *contract) checkRateHeaders(r *http.Request, path string, rec *httptest.ResponseRecorder) {
	for name, ref := range rateHeaders {
		v := rec.Header().Get(name)
		h := c.doc.Components.Headers[ref]
		if h == nil || h.Value.Schema == nil {
			c.fail("the description has no header component %s", ref)
			continue
		}
		var n any
		if err := json.Unmarshal([]byte(v), &n); err != nil {
			c.fail("%s %s: header %s = %q is not a number", r.Method, path, name, v)
			continue
		}
		if err := h.Value.Schema.Value.VisitJSON(n); err != nil {
			c.fail("%s %s: header %s = %q does not match the description: %v", r.Method, path, name, v, err)
		}
	}
	if (rec.Code != http.StatusForbidden && rec.Code != http.StatusTooManyRequests) || !bytes.Contains(rec.Body.Bytes(), []byte("rate limit")) {
		return
	}
	if rec.Header().Get("X-RateLimit-Remaining") != "0" && rec.Header().Get("Retry-After") == "" {
		c.fail("%s %s: a %d without x-ratelimit-remaining: 0 or retry-after", r.Method, path, rec.Code)
	}
}

// done reports the mismatches and returns the exchanges checked.
func (c *contract) done() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		c.t.Error(e)
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range c.checked {
			if !yield(k) {
				return
			}
		}
	})
}

// TestRESTContract drives every call of the product's GitHub client (internal/ghaccess), with a PAT
// and as a GitHub App, at repository and organisation scope, through the checker, and requires that
// each operation was seen.
func TestRESTContract(t *testing.T) {
	t.Parallel()
	for _, name := range descriptions {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRESTContract(t, name)
		})
	}
}

func testRESTContract(t *testing.T, name string) {
	fake := githubfake.New(githubfake.Options{AppID: 4242})
	c := newContract(t, name, fake)
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	ctx := t.Context()

	pat, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	fake.AddInstallation("acme")
	app, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, AppID: 4242, PrivateKeyPEM: fake.AppPrivateKeyPEM()})
	if err != nil {
		t.Fatal(err)
	}
	appOrg, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, AppID: 4242, PrivateKeyPEM: fake.AppPrivateKeyPEM()})
	if err != nil {
		t.Fatal(err)
	}
	// The App clients find the installation by repository and by organisation.
	if _, err := app.RegistrationToken(ctx, "acme/api"); err != nil {
		t.Fatalf("app RegistrationToken: %v", err)
	}
	if _, err := appOrg.RemoveToken(ctx, "acme"); err != nil {
		t.Fatalf("app RemoveToken: %v", err)
	}
	for _, scope := range []string{"acme/api", "acme"} {
		reg, err := pat.RegistrationToken(ctx, scope)
		if err != nil {
			t.Fatalf("RegistrationToken(%s): %v", scope, err)
		}
		if _, err := pat.RemoveToken(ctx, scope); err != nil {
			t.Fatalf("RemoveToken(%s): %v", scope, err)
		}
		rc := githubfake.NewRunnerClient(srv.URL, nil)
		if _, err := rc.Register(ctx, githubfake.RegisterOptions{URL: reg.URL, Token: reg.Token, Name: "runnerpool-i-1", Labels: []string{"run-1"}}); err != nil {
			t.Fatalf("registering a runner at %s: %v", scope, err)
		}
		jit, err := pat.GenerateJITConfig(ctx, scope, "runnerpool-i-2", []string{"pool=small"}, 0)
		if err != nil || jit.Encoded == "" {
			t.Fatalf("GenerateJITConfig(%s) = %+v, %v", scope, jit, err)
		}
		runners, err := pat.ListRunners(ctx, scope)
		if err != nil || len(runners) != 2 {
			t.Fatalf("ListRunners(%s) = %+v, %v", scope, runners, err)
		}
		if r, err := pat.GetRunner(ctx, scope, jit.RunnerID); err != nil || r.Name != "runnerpool-i-2" {
			t.Fatalf("GetRunner(%s, %d) = %+v, %v; want runnerpool-i-2", scope, jit.RunnerID, r, err)
		}
		for _, r := range runners {
			if err := pat.DeleteRunner(ctx, scope, r.ID); err != nil {
				t.Fatalf("DeleteRunner(%s, %d): %v", scope, r.ID, err)
			}
		}
		// A runner already gone: GitHub's 404, which the client takes as done.
		if err := pat.DeleteRunner(ctx, scope, runners[0].ID); err != nil {
			t.Fatalf("DeleteRunner of a gone runner: %v", err)
		}
		// A removed runner read by its id: GitHub's 404, which the client says as ErrRunnerNotFound.
		if _, err := pat.GetRunner(ctx, scope, jit.RunnerID); !errors.Is(err, ghaccess.ErrRunnerNotFound) {
			t.Fatalf("GetRunner(%s) of a removed runner: %v, want ErrRunnerNotFound", scope, err)
		}
	}
	for _, scope := range []string{"acme/api", "acme"} {
		if rel, err := pat.RunnerRelease(ctx, scope); err != nil || rel.Version == "" {
			t.Fatalf("RunnerRelease(%s) = %+v, %v", scope, rel, err)
		}
	}
	fake.SetDefaultBranch("acme", "api", "trunk")
	for _, gh := range []*ghaccess.Client{pat, app} {
		if b, err := gh.DefaultBranch(ctx, "acme/api"); err != nil || b != "trunk" {
			t.Fatalf("DefaultBranch = %q, %v; want trunk", b, err)
		}
	}
	jobID := fake.QueueJob("acme", "api", 77, []string{"self-hosted"})
	if st, err := pat.JobStatus(ctx, "acme/api", jobID); err != nil || st != "queued" {
		t.Fatalf("JobStatus = %q, %v; want queued", st, err)
	}
	if err := pat.CancelRun(ctx, "acme/api", 77); err != nil {
		t.Fatalf("CancelRun: %v", err)
	}

	checked := c.done()
	t.Logf("checked against GitHub's %s description:\n%s", name, strings.Join(checked, "\n"))
	for _, want := range []string{
		"GET /repos/{owner}/{repo}/installation 200",
		"GET /orgs/{org}/installation 200",
		"POST /app/installations/{installation_id}/access_tokens 201",
		"POST /repos/{owner}/{repo}/actions/runners/registration-token 201",
		"POST /orgs/{org}/actions/runners/registration-token 201",
		"POST /repos/{owner}/{repo}/actions/runners/remove-token 201",
		"POST /orgs/{org}/actions/runners/remove-token 201",
		"POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig 201",
		"POST /orgs/{org}/actions/runners/generate-jitconfig 201",
		"GET /repos/{owner}/{repo}/actions/runners 200",
		"GET /orgs/{org}/actions/runners 200",
		"DELETE /repos/{owner}/{repo}/actions/runners/{runner_id} 204",
		"DELETE /orgs/{org}/actions/runners/{runner_id} 204",
		"DELETE /repos/{owner}/{repo}/actions/runners/{runner_id} 404",
		"GET /repos/{owner}/{repo}/actions/runners/{runner_id} 200",
		"GET /orgs/{org}/actions/runners/{runner_id} 200",
		"GET /repos/{owner}/{repo}/actions/runners/{runner_id} 404",
		"GET /orgs/{org}/actions/runners/{runner_id} 404",
		"POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel 202",
		"GET /repos/{owner}/{repo}/actions/jobs/{job_id} 200",
		"GET /repos/{owner}/{repo} 200",
		"GET /repos/{owner}/{repo}/actions/runners/downloads 200",
		"GET /orgs/{org}/actions/runners/downloads 200",
	} {
		if !slices.Contains(checked, want) {
			t.Errorf("%q was not exercised", want)
		}
	}
}

// TestContractCatchesMismatches shows the checker is not vacuous: a handler that answers GitHub's
// operations with the wrong shapes, and a request GitHub does not serve, are all reported.
func TestContractCatchesMismatches(t *testing.T) {
	t.Parallel()
	bad := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/registration-token"):
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"token":"x"}`)) // expires_at is required
		case r.Method == http.MethodGet:
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"total_count":"one","runners":[]}`)) // total_count is an integer
		default:
			w.WriteHeader(http.StatusOK) // generate-jitconfig answers 201
			_, _ = w.Write([]byte(`{}`))
		}
	})
	inner := &testing.T{}
	c := newContract(inner, descriptions[0], bad)
	srv := httptest.NewServer(c)
	defer srv.Close()
	do := func(method, path, body string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	do(http.MethodPost, "/repos/acme/api/actions/runners/registration-token", "")
	do(http.MethodGet, "/repos/acme/api/actions/runners", "")
	do(http.MethodPost, "/repos/acme/api/actions/runners/generate-jitconfig", `{"name":"r","runner_group_id":1,"labels":["x"]}`)
	do(http.MethodPost, "/orgs/acme/actions/runners/generate-jitconfig", `{"name":"r","labels":["x"]}`) // runner_group_id is required
	do(http.MethodGet, "/repos/acme/api/actions/runnerz", "")
	c.mu.Lock()
	errs := slices.Clone(c.errs)
	c.mu.Unlock()
	for _, want := range []string{"expires_at", "total_count", "status is not supported", "runner_group_id", "not an operation"} {
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no mismatch mentioning %q reported; got:\n%s", want, strings.Join(errs, "\n"))
		}
	}
}

var (
	hooksOnce sync.Once
	hooks     *jsonschema.Schema
	hooksErr  error
)

// workflowJobSchema compiles the webhooks description's workflow_job schema (OpenAPI 3.1, whose
// schemas are JSON Schema 2020-12): any of the queued, waiting, in_progress and completed payloads.
func workflowJobSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	hooksOnce.Do(func() {
		file := filepath.Join(nodeModules, "@octokit/openapi-webhooks/generated/api.github.com.json")
		f, err := os.Open(file)
		if err != nil {
			hooksErr = fmt.Errorf("opening %s (run make deps): %w", file, err)
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			hooksErr = fmt.Errorf("reading %s: %w", file, err)
			return
		}
		const base = "file:///octokit/openapi-webhooks.json"
		comp := jsonschema.NewCompiler()
		comp.DefaultDraft(jsonschema.Draft2020)
		if err := comp.AddResource(base, doc); err != nil {
			hooksErr = err
			return
		}
		var refs []any
		for _, action := range []string{"completed", "in-progress", "queued", "waiting"} {
			refs = append(refs, map[string]any{"$ref": base + "#/components/schemas/webhook-workflow-job-" + action})
		}
		if err := comp.AddResource("file:///workflow-job.json", map[string]any{"oneOf": refs}); err != nil {
			hooksErr = err
			return
		}
		hooks, hooksErr = comp.Compile("file:///workflow-job.json")
	})
	if hooksErr != nil {
		t.Fatal(hooksErr)
	}
	return hooks
}

// TestWebhookContract validates the workflow_job payloads the fake sends, for a job queued, taken by
// a runner and completed, against GitHub's webhooks description.
func TestWebhookContract(t *testing.T) {
	t.Parallel()
	schema := workflowJobSchema(t)
	var mu sync.Mutex
	var bodies [][]byte
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
	}))
	defer recv.Close()
	sender := &githubfake.WebhookSender{URL: recv.URL, Secret: "s3cret"}

	// The payloads the sender builds from an event, in every state and with optional parts unset.
	ev := githubfake.WorkflowJobEvent{ID: 501, RunID: 77, Labels: []string{"self-hosted", "pool=dependabot"},
		Owner: "acme", Repo: "app", RepoID: 12, InstallationID: 34}
	running := ev
	running.RunnerID, running.RunnerName, running.RunnerGroupID, running.RunnerGroupName = 9, "runnerpool-i-1", 1, "Default"
	done := running
	done.Conclusion, done.CompletedAt = "success", time.Now()
	for _, tc := range []struct {
		action string
		ev     githubfake.WorkflowJobEvent
	}{
		{"queued", ev}, {"in_progress", running}, {"completed", done},
		{"queued", githubfake.WorkflowJobEvent{ID: 1, RunID: 2, Owner: "acme", Repo: "app"}},
	} {
		if _, status, err := sender.SendWorkflowJob(t.Context(), tc.action, tc.ev); err != nil || status != http.StatusOK {
			t.Fatalf("SendWorkflowJob(%s): %d, %v", tc.action, status, err)
		}
	}

	// And the fake's own deliveries for a job run through the runner protocol.
	fake := githubfake.New(githubfake.Options{Webhook: sender})
	srv := httptest.NewServer(fake)
	defer func() { srv.Close(); fake.Close() }()
	tok := registrationToken(t, srv.URL, fake.PAT())
	rc := githubfake.NewRunnerClient(srv.URL, nil)
	if _, err := rc.Register(t.Context(), githubfake.RegisterOptions{URL: srv.URL + "/acme/app", Token: tok, Name: "r1", Labels: []string{"self-hosted"}}); err != nil {
		t.Fatal(err)
	}
	fake.QueueJob("acme", "app", 88, []string{"self-hosted"})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := rc.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	job, err := rc.NextJob(ctx, 10*time.Second)
	if err != nil || job == nil {
		t.Fatalf("NextJob = %+v, %v", job, err)
	}
	if err := rc.Complete(ctx, job.ID, "success"); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		n := len(bodies)
		mu.Unlock()
		if n >= 7 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(bodies) < 7 {
		t.Fatalf("%d deliveries, want 4 from the sender and 3 from the fake", len(bodies))
	}
	for i, b := range bodies {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if err := schema.Validate(v); err != nil {
			t.Errorf("delivery %d does not match GitHub's workflow_job webhook description: %v\npayload: %s", i, err, b)
		}
	}
}

func registrationToken(t *testing.T, base, pat string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/repos/acme/app/actions/runners/registration-token", nil)
	req.Header.Set("Authorization", "token "+pat)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.Token == "" {
		t.Fatalf("registration token: %v", err)
	}
	return tok.Token
}

// TestRESTContractUnderLimits: the fake's limit and outage answers, as the product's client meets
// them (and waits them out), are GitHub's: documented statuses or basic-error bodies, x-ratelimit-*
// headers as described, and retry-after or x-ratelimit-remaining: 0 on every limit answer.
func TestRESTContractUnderLimits(t *testing.T) {
	t.Parallel()
	fake := githubfake.New(githubfake.Options{AppID: 4242})
	c := newContract(t, descriptions[0], fake)
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var clients [2]*ghaccess.Client
	for i := range clients {
		var err error
		if clients[i], err = ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: fake.PAT()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []githubfake.Limits{
		{Primary: 2, PrimaryWindow: time.Second},
		{Primary: 2, PrimaryWindow: time.Second, Status: http.StatusTooManyRequests},
		{Points: 2, PointsWindow: time.Second},
		{Points: 2, PointsWindow: time.Second, Status: http.StatusTooManyRequests},
	} {
		fake.SetLimits(l)
		for i := range 4 {
			if _, err := clients[i%2].ListRunners(ctx, "acme/api"); err != nil {
				t.Fatalf("ListRunners under %+v: %v", l, err)
			}
		}
	}
	fake.SetLimits(githubfake.Limits{})
	fake.SetOutage(700 * time.Millisecond)
	if _, err := clients[0].RemoveToken(ctx, "acme/api"); err != nil {
		t.Fatalf("RemoveToken through an outage: %v", err)
	}
	checked := c.done()
	for _, want := range []string{
		"GET /repos/{owner}/{repo}/actions/runners 403",
		"GET /repos/{owner}/{repo}/actions/runners 429",
		"POST /repos/{owner}/{repo}/actions/runners/remove-token 503",
	} {
		if !slices.Contains(checked, want) {
			t.Errorf("%q was not exercised; checked:\n%s", want, strings.Join(checked, "\n"))
		}
	}
}

// TestRESTContractRerun: a job that failed (its runner was reclaimed) is re-run through GitHub's
// re-run API, as a new job of the run's next attempt; a run with nothing failed is refused.
func TestRESTContractRerun(t *testing.T) {
	t.Parallel()
	fake := githubfake.New(githubfake.Options{AppID: 4242})
	c := newContract(t, descriptions[0], fake)
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pat, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := pat.RegistrationToken(ctx, "acme/app")
	if err != nil {
		t.Fatal(err)
	}
	rc := githubfake.NewRunnerClient(srv.URL, nil)
	if _, err := rc.Register(ctx, githubfake.RegisterOptions{URL: reg.URL, Token: reg.Token, Name: "r1", Labels: []string{"pool=spot"}}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	first := fake.QueueJob("acme", "app", 91, []string{"pool=spot"})
	job, err := rc.NextJob(ctx, 10*time.Second)
	if err != nil || job == nil || job.ID != first {
		t.Fatalf("NextJob = %+v, %v", job, err)
	}
	if err := rc.Complete(ctx, job.ID, "failure"); err != nil {
		t.Fatal(err)
	}
	if err := pat.RerunFailedJobs(ctx, "acme/app", 91); err != nil {
		t.Fatalf("RerunFailedJobs: %v", err)
	}
	reruns := fake.Reruns()
	if len(reruns) != 1 || reruns[0].Job != first {
		t.Fatalf("reruns = %+v, want the failed job queued again", reruns)
	}
	if j, _ := fake.Job(reruns[0].NewJob); j.Status != githubfake.JobQueued || j.RunAttempt != 2 {
		t.Errorf("the re-run job = %+v, want queued in attempt 2", j)
	}
	if err := pat.RerunFailedJobs(ctx, "acme/app", 91); err == nil {
		t.Error("a run whose latest attempt has no failed job was re-run")
	}
	checked := c.done()
	for _, want := range []string{
		"POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs 201",
		"POST /repos/{owner}/{repo}/actions/runs/{run_id}/rerun-failed-jobs 403",
	} {
		if !slices.Contains(checked, want) {
			t.Errorf("%q was not exercised; checked:\n%s", want, strings.Join(checked, "\n"))
		}
	}
}
