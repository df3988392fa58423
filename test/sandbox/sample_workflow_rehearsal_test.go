//go:build rehearsal

package sandbox_test

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/test/actionrun"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestSampleWorkflowWithTheActions (the rehearsal's sample-workflow step; RELEASE_URL, VERSION and
// SSL_CERT_FILE name its release host): examples/github-actions/workflow.yml's shape runs in the
// GitHub fake as TestReRunsGetRunners runs it (the same wiring and player), but its provision and
// release jobs run the provision and release actions' own steps (actionrun: action.yml as the runner
// runs it), with the inputs workflow.yml gives them plus the release host as release-url and its
// version: each job installs runnerpool from the release host, checksums verified, and calls the
// public API (reconciler/api over the control plane) with the job's OIDC token from the Actions
// token endpoint. The build and test jobs run on real agents; attempt 1's test fails, then "re-run
// failed jobs" runs the same way, and its release leaves nothing running.
func TestSampleWorkflowWithTheActions(t *testing.T) {
	releaseURL, version := os.Getenv("RELEASE_URL"), os.Getenv("VERSION")
	if releaseURL == "" || version == "" {
		t.Fatal("RELEASE_URL and VERSION are not set: make rehearsal runs this test on the release it serves")
	}
	sb := start(t, sandbox.Options{})
	cp := sb.Components(sandbox.ComponentOptions{})
	w := newRerunWiring(t, sb, cp)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiURL := "http://" + ln.Addr().String()
	verifier, err := auth.New(auth.Config{Issuer: sb.Stack.OIDC.URL(), Audience: apiURL, Allowed: []string{sandbox.Scope}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Options{Provisioner: cp.Provisioner, Releaser: cp.Releaser, Runs: cp.Provisioner, Store: sb.Store,
		Auth: verifier, Logger: sb.Log, DefaultRunnerClass: sandbox.RunnerClass, IdleTime: 10 * time.Minute, MaxIdleTime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: a.Handler(true), ReadHeaderTimeout: 10 * time.Second}}
	srv.Start()
	t.Cleanup(srv.Close)
	w.actions = &scriptActions{api: apiURL, releaseURL: releaseURL, version: version, with: sampleWith(t)}

	run := w.fake.StartRun("acme", "app", sampleWorkflow(provisionLabel))
	first := w.play(t, run)
	if first["test"].Conclusion != "failure" || first["build"].Conclusion != "success" || first["release"].Conclusion != "success" || first["build"].RunnerName == "" {
		t.Fatalf("attempt 1: %+v", first)
	}
	if _, err := w.gh.Actions.RerunFailedJobsByID(t.Context(), "acme", "app", run); err != nil {
		t.Fatal(err)
	}
	second := w.play(t, run)
	if j := second["test"]; j.RunAttempt != 2 || j.Conclusion != "success" || j.RunnerName == "" {
		t.Errorf("re-run test job: attempt %d %s on %q; want attempt 2 successful on a runner", j.RunAttempt, j.Conclusion, j.RunnerName)
	}
	w.nothingRunning(t, run)
}

// sampleWith is the with: of workflow.yml's provision and release steps, by action.
func sampleWith(t *testing.T) map[string]map[string]string {
	t.Helper()
	with, err := actionrun.WorkflowInputs("../../examples/github-actions/workflow.yml")
	if err != nil {
		t.Fatal(err)
	}
	if with["provision"] == nil || with["release"] == nil {
		t.Fatalf("workflow.yml: the provision and release steps' with: %v", with)
	}
	return with
}

// scriptActions run the actions' own steps as the sample workflow calls them.
type scriptActions struct {
	api, releaseURL, version string
	with                     map[string]map[string]string
}

func (s *scriptActions) provision(t *testing.T, w *rerunWiring, ev githubfake.WorkflowJobEvent, attempt int64) map[string]string {
	t.Helper()
	out := s.run(t, w, "provision", ev, attempt, githubfake.Job{})
	if out["label"] == "" || out["run-key"] == "" {
		t.Fatalf("the provision action's outputs: %v", out)
	}
	t.Logf("provision action (attempt %d): label %s, run-key %s, %s runner(s) %s", attempt, out["label"], out["run-key"], out["count"], out["instance-ids"])
	return map[string]string{"label": out["label"], "run-key": out["run-key"]}
}

func (s *scriptActions) release(t *testing.T, w *rerunWiring, ev githubfake.WorkflowJobEvent, attempt int64, p githubfake.Job) {
	t.Helper()
	out := s.run(t, w, "release", ev, attempt, p)
	t.Logf("release action (attempt %d): %v", attempt, out)
}

// run runs one action in a fresh GitHub-hosted job's environment, with the job's Actions token
// context (the claims GitHub puts in the job's OIDC token).
func (s *scriptActions) run(t *testing.T, w *rerunWiring, action string, ev githubfake.WorkflowJobEvent, attempt int64, p githubfake.Job) map[string]string {
	t.Helper()
	a, err := actionrun.Load("../../examples/github-actions/" + action)
	if err != nil {
		t.Fatal(err)
	}
	with := map[string]string{"release-url": s.releaseURL, "version": s.version}
	for k, v := range s.with[action] {
		switch v {
		case "${{ env.RUNNERPOOL_API }}":
			v = s.api
		case "${{ needs.provision.outputs.run-key }}":
			v = p.Outputs["run-key"]
		}
		if strings.Contains(v, "${{") {
			t.Fatalf("workflow.yml: %s's %s = %q: an expression this test does not know", action, k, v)
		}
		with[k] = v
	}
	const requestToken = "rehearsal-actions-request-token"
	w.sb.Stack.OIDC.SetActionsContext(requestToken, map[string]any{
		"repository": sandbox.Scope, "repository_id": strconv.FormatInt(ev.RepoID, 10),
		"run_id": strconv.FormatInt(ev.RunID, 10), "run_attempt": strconv.FormatInt(attempt, 10),
	})
	home := t.TempDir()
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "RUNNER_OS=Linux",
		"RUNNER_ARCH=" + map[string]string{"amd64": "X64", "arm64": "ARM64"}[runtime.GOARCH],
		"RUNNER_TOOL_CACHE=" + filepath.Join(home, "toolcache"), "RUNNER_TEMP=" + filepath.Join(home, "temp"),
		"SSL_CERT_FILE=" + os.Getenv("SSL_CERT_FILE"), "CURL_CA_BUNDLE=" + os.Getenv("SSL_CERT_FILE"),
		"ACTIONS_ID_TOKEN_REQUEST_URL=" + w.sb.Stack.OIDC.ActionsTokenURL(), "ACTIONS_ID_TOKEN_REQUEST_TOKEN=" + requestToken}
	var log bytes.Buffer
	out, err := a.Run(t.Context(), with, env, &log)
	if err != nil {
		t.Fatalf("the %s action: %v\n%s", action, err, log.String())
	}
	if !strings.Contains(log.String(), "installed runnerpool "+version(s.version)) {
		t.Errorf("the %s action did not install runnerpool %s from the release host:\n%s", action, s.version, log.String())
	}
	return out
}

func version(v string) string { return strings.TrimPrefix(v, "v") }
