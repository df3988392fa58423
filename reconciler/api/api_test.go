// Unit tests of the API's mapping of domain outcomes to answers, with fakes of the domain behind a
// real HTTP server. The rejections and the domain itself are tested end to end in
// reconciler/service.
package api_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
)

// fakeAuth accepts "Bearer run-<id>" as a token of acme/api (repository id 4242), run <id>.
type fakeAuth struct{}

func (fakeAuth) Authenticate(r *http.Request) (auth.Identity, error) {
	if r.Header.Get("Authorization") == "Bearer issuer-down" {
		return auth.Identity{}, &auth.Error{Status: 503, Code: apiv1.CodeUnavailable, Msg: "the OIDC issuer cannot be reached to verify tokens",
			Err: errors.New("oidc discovery of https://10.1.2.3:8443/token: dial tcp 10.1.2.3:8443: connection refused")}
	}
	run, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer run-")
	if !ok {
		return auth.Identity{}, &auth.Error{Status: 401, Code: apiv1.CodeMissingToken, Msg: "no token"}
	}
	attempt := 1
	if r, n, ok := strings.Cut(run, "@"); ok { // "run-<id>@<attempt>": a re-run attempt's token
		run, attempt = r, int(n[0]-'0')
	}
	return auth.Identity{Repository: "acme/api", RepositoryID: "4242", RepositoryOwner: "acme", RunID: run, RunAttempt: attempt}, nil
}

type fakeProvisioner struct {
	mu   sync.Mutex
	f    func(ctx context.Context, req provision.Request) (provision.Result, error)
	reqs []provision.Request
}

func (p *fakeProvisioner) Provision(ctx context.Context, req provision.Request) (provision.Result, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	f := p.f
	p.mu.Unlock()
	return f(ctx, req)
}

type fakeReleaser struct {
	mu    sync.Mutex
	calls []string
	idle  []time.Duration
	rep   release.Report
	err   error
}

func (r *fakeReleaser) Release(_ context.Context, key string, idle time.Duration) (release.Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, key)
	r.idle = append(r.idle, idle)
	rep := r.rep
	rep.RunID = key
	return rep, r.err
}

type fakeStore struct {
	mu        sync.Mutex
	runs      map[string]store.Run
	instances map[string]store.Instance
	signals   map[string]store.SignalRecord
	err       error // every read fails with it when set
}

func (s *fakeStore) LastSignal(_ context.Context, id string) (store.SignalRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sig, ok := s.signals[id]
	if !ok {
		return store.SignalRecord{}, store.ErrNotFound
	}
	return sig, nil
}

// Settled is api.Runs over the fake's records: it re-reads a run provisioning until it is not, or
// ctx ends (its deadline a minute after its UpdatedAt); the takeover itself is provision's, tested there and in
// reconciler/service.
func (s *fakeStore) Settled(ctx context.Context, key string) (store.Run, error) {
	for {
		run, err := s.GetRun(ctx, key)
		if err != nil || run.Status != provision.StatusProvisioning {
			return run, err
		}
		select {
		case <-ctx.Done():
			return run, &provision.InProgressError{RunKey: key, Since: run.UpdatedAt, TakeOverAt: run.UpdatedAt.Add(time.Minute)}
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *fakeStore) GetRun(_ context.Context, key string) (store.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return store.Run{}, s.err
	}
	r, ok := s.runs[key]
	if !ok {
		return store.Run{}, fmt.Errorf("run %s: %w", key, store.ErrNotFound)
	}
	return r, nil
}

func (s *fakeStore) UpdateRun(_ context.Context, r store.Run, v int64) (store.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs[r.Key].Version != v {
		return store.Run{}, store.ErrConflict
	}
	r.Version = v + 1
	s.runs[r.Key] = r
	return r, nil
}

func (s *fakeStore) Get(_ context.Context, id string) (store.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok {
		return store.Instance{}, store.ErrNotFound
	}
	return in, nil
}

func (s *fakeStore) LiveBrief(context.Context) ([]store.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	var out []store.Instance
	for _, in := range s.instances {
		out = append(out, in)
	}
	return out, nil
}

func (s *fakeStore) setRun(r store.Run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[r.Key] = r
}

type fixture struct {
	srv  *httptest.Server
	api  *api.API
	prov *fakeProvisioner
	rel  *fakeReleaser
	st   *fakeStore
	work context.CancelFunc
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, nil)
}

// newFixtureWith is newFixture with options changed by opt.
func newFixtureWith(t *testing.T, opt func(*api.Options)) *fixture {
	t.Helper()
	work, cancel := context.WithCancel(context.Background())
	f := &fixture{
		prov: &fakeProvisioner{}, rel: &fakeReleaser{},
		st:   &fakeStore{runs: map[string]store.Run{}, instances: map[string]store.Instance{}},
		work: cancel,
	}
	o := api.Options{
		Provisioner: f.prov, Releaser: f.rel, Runs: f.st, Store: f.st, Auth: fakeAuth{}, Work: work,
		IdleTime: 15 * time.Minute, MaxIdleTime: time.Hour,
		RunnerClassIdleTime: func(c string) time.Duration {
			if c == "linux" {
				return 20 * time.Minute
			}
			return 0
		},
		DefaultRunnerClass: "linux", ReleaseTimeout: 2 * time.Second,
	}
	if opt != nil {
		opt(&o)
	}
	a, err := api.New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.api = a
	f.srv = httptest.NewServer(a.Handler(true))
	t.Cleanup(func() {
		f.srv.Close()
		cancel()
	})
	return f
}

func (f *fixture) call(t *testing.T, method, path, token, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

const body = `{"count": 2, "allowed_instance_types": ["c*"], "resource_class": "small"}`

func TestProvisionAnswers(t *testing.T) {
	t.Parallel()
	good := provision.Result{
		RunKey: "4242:7:1", Label: "7", Status: provision.StatusSucceeded,
		Runners: []provision.Runner{{InstanceID: "i-1", InstanceType: "c6i.large", UsageClass: "on-demand", Zone: "z", Source: provision.SourceReused}},
		Timing:  provision.Timing{Select: 1500 * time.Millisecond, Total: 2 * time.Second},
	}
	failed := provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusFailed, Outcome: "unsuccessful", Error: "no capacity",
		Undone: []provision.Undone{{InstanceID: "i-2", Action: provision.ActionReturned, Reason: "provision unsuccessful"}}}
	dumped := failed
	dumped.Outcome = "dump"
	tests := []struct {
		name      string
		res       provision.Result
		err       error
		status    int
		code      string
		retryable bool
	}{
		{"succeeded", good, nil, 200, "", false},
		{"invalid", provision.Result{}, fmt.Errorf("%w: count 0", provision.ErrInvalid), 400, apiv1.CodeInvalidRequest, false},
		{"in progress", provision.Result{}, fmt.Errorf("run x: %w", provision.ErrInProgress), 409, apiv1.CodeInProgress, true},
		{"unsuccessful", failed, fmt.Errorf("%w: no capacity", provision.ErrFailed), 503, apiv1.CodeUnsuccessful, false},
		{"dumped", dumped, fmt.Errorf("%w: boom", provision.ErrFailed), 500, apiv1.CodeDumped, false},
		{"throttled", provision.Result{}, fmt.Errorf("recording run: %w", store.ErrThrottled), 503, apiv1.CodeUnavailable, true},
		{"timeout", provision.Result{}, fmt.Errorf("waiting: %w", context.DeadlineExceeded), 504, apiv1.CodeTimeout, true},
		{"other", provision.Result{}, errors.New("dynamodb down"), 500, apiv1.CodeInternal, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) { return tt.res, tt.err }
			code, hdr, b := f.call(t, http.MethodPost, "/v1/provision", "run-7", body)
			if code != tt.status {
				t.Fatalf("status %d %s, want %d", code, b, tt.status)
			}
			if hdr.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			if tt.status == 200 {
				var got apiv1.ProvisionResponse
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatal(err)
				}
				want := apiv1.ProvisionResponse{
					RunKey: "4242:7:1", Label: "7", Labels: []string{"7", "runnerpool"}, Status: "succeeded",
					Runners: []apiv1.Runner{{InstanceID: "i-1", InstanceType: "c6i.large", UsageClass: "on-demand", Zone: "z", Source: "reused"}},
					Timing:  apiv1.Timing{SelectMS: 1500, TotalMS: 2000},
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
				req := f.prov.reqs[0]
				if req.RepositoryID != "4242" || req.Repository != "acme/api" || req.RunID != "7" || req.Attempt != 1 || req.Count != 2 ||
					req.ResourceClass != "small" || len(req.InstanceTypes) != 1 {
					t.Errorf("provisioner got %+v: identity from the token, the rest from the body", req)
				}
				return
			}
			var e apiv1.Error
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			if e.Code != tt.code || e.Retryable != tt.retryable {
				t.Errorf("error %+v, want code %s retryable %v", e, tt.code, tt.retryable)
			}
			if tt.res.Status == provision.StatusFailed && (e.Provision == nil || len(e.Provision.Undone) != 1 || e.Provision.Undone[0].InstanceID != "i-2") {
				t.Errorf("failed provision answer lacks what was undone: %s", b)
			}
			if tt.retryable && (tt.status == 503 || tt.status == 409) && hdr.Get("Retry-After") == "" {
				t.Error("retryable answer without Retry-After")
			}
		})
	}
}

// TestProvisionOutlivesTheConnection: a client that hangs up does not cancel its provision; the
// service's work context does.
func TestProvisionContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{})
	ended := make(chan error, 1)
	f.prov.f = func(ctx context.Context, _ provision.Request) (provision.Result, error) {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return provision.Result{}, ctx.Err()
	}
	ctx, hangUp := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/provision", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer run-8")
	req.Header.Set("Content-Type", "application/json")
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	hangUp()
	select {
	case err := <-ended:
		t.Fatalf("the provision was cancelled with the connection: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if n := f.api.InFlight(); n != 1 {
		t.Errorf("in flight: %d, want 1", n)
	}
	f.api.Drain()
	code, _, b := f.call(t, http.MethodPost, "/v1/provision", "run-9", body)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(b), apiv1.CodeShuttingDown) {
		t.Errorf("provision while draining: %d %s", code, b)
	}
	if code, _, _ := f.call(t, http.MethodGet, "/readyz", "", ""); code != http.StatusServiceUnavailable {
		t.Errorf("readyz while draining: %d", code)
	}
	f.work() // the drain timeout passed
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("provision ended with %v, want cancelled", err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := f.api.Wait(wctx); err != nil {
		t.Errorf("Wait: %v", err)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.prov.f = func(context.Context, provision.Request) (provision.Result, error) { panic("boom") }
	code, _, b := f.call(t, http.MethodPost, "/v1/provision", "run-7", body)
	if code != http.StatusInternalServerError || !strings.Contains(string(b), apiv1.CodeInternal) {
		t.Errorf("panicking provision: %d %s", code, b)
	}
	if code, _, _ := f.call(t, http.MethodGet, "/healthz", "", ""); code != http.StatusOK {
		t.Errorf("healthz after a panic: %d", code)
	}
	if n := f.api.InFlight(); n != 0 {
		t.Errorf("in flight after a panic: %d", n)
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	req, _ := json.Marshal(provision.Request{RunnerClass: ""})
	res, _ := json.Marshal(provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusSucceeded,
		Runners: []provision.Runner{{InstanceID: "i-1", Source: provision.SourceReused}, {InstanceID: "i-2", Source: provision.SourceCreated}}})
	f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", Repository: "acme/api", RunID: "7", Attempt: 1,
		Status: provision.StatusProvisioning, Request: req, Version: 1})
	f.rel.rep = release.Report{Message: "released", Instances: []release.InstanceResult{
		{ID: "i-1", State: store.StateRunning, Outcome: release.Pooled}, {ID: "i-2", State: store.StateRunning, Outcome: release.Pooled}}}

	// The release waits for the provision still in progress.
	go func() {
		time.Sleep(100 * time.Millisecond)
		f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", Repository: "acme/api", RunID: "7", Attempt: 1,
			Status: provision.StatusSucceeded, Request: req, Result: res, Version: 2})
	}()
	code, _, b := f.call(t, http.MethodPost, "/v1/release", "run-7", "")
	if code != http.StatusOK {
		t.Fatalf("release: %d %s", code, b)
	}
	var rr apiv1.ReleaseResponse
	if err := json.Unmarshal(b, &rr); err != nil || rr.Counts["pooled"] != 2 || rr.RunKey != "4242:7:1" {
		t.Errorf("release answer %s (%v)", b, err)
	}
	if len(f.rel.idle) != 1 || f.rel.idle[0] != 20*time.Minute {
		t.Errorf("idle times %v, want the runner class's 20m", f.rel.idle)
	}
	// The release is on the run record, next to the provision's result, which is kept.
	run, _ := f.st.GetRun(context.Background(), "4242:7:1")
	var stored map[string]json.RawMessage
	if err := json.Unmarshal(run.Result, &stored); err != nil || stored["releases"] == nil || stored["runners"] == nil {
		t.Errorf("stored result %s", run.Result)
	}
	f.st.instances["i-1"] = store.Instance{ID: "i-1", State: store.StateIdle, Reason: "released by run 4242:7:1"}
	f.st.instances["i-2"] = store.Instance{ID: "i-2", State: store.StateClaimed, RunID: "9999:1:1", Reason: "claimed by run 9999:1:1"}
	code, _, b = f.call(t, http.MethodGet, "/v1/runs/7", "run-7", "")
	var got apiv1.RunResponse
	if err := json.Unmarshal(b, &got); err != nil || code != 200 {
		t.Fatalf("GET run: %d %s", code, b)
	}
	if len(got.Releases) != 1 || len(got.Instances) != 2 || got.Instances[0].State != "idle" || got.Instances[1].State != apiv1.StateReassigned ||
		got.Instances[1].Reason != "" || strings.Contains(string(b), "9999") {
		t.Errorf("run after release: %s", b)
	}

	// Explicit idle time; a failed instance makes the release incomplete and retryable.
	f.rel.err = errors.New("releasing i-2: dynamodb down")
	f.rel.rep.Instances[1] = release.InstanceResult{ID: "i-2", State: store.StateRunning, Outcome: release.Failed, Err: f.rel.err}
	code, _, b = f.call(t, http.MethodPost, "/v1/release", "run-7", `{"idle_time_seconds": 60}`)
	var e apiv1.Error
	if err := json.Unmarshal(b, &e); err != nil || code != 500 || e.Code != apiv1.CodeReleaseIncomplete || !e.Retryable || e.Release == nil {
		t.Errorf("incomplete release: %d %s", code, b)
	}
	if f.rel.idle[1] != time.Minute {
		t.Errorf("idle time %v, want 1m", f.rel.idle[1])
	}
	if code, _, b := f.call(t, http.MethodPost, "/v1/release", "run-7", `{"idle_time_seconds": 7200}`); code != 400 {
		t.Errorf("idle time above the maximum: %d %s", code, b)
	}
	if code, _, b := f.call(t, http.MethodPost, "/v1/release", "run-8", ``); code != 404 || !strings.Contains(string(b), apiv1.CodeRunNotFound) {
		t.Errorf("release of a run without provision: %d %s", code, b)
	}
}

// TestReleaseOfAReRun (issue #33 item 4): a re-run that did not repeat the provision job releases
// the earlier attempt's run key its carried outputs name; its release also ends what was
// provisioned for the re-run's own attempt label (provision.ServeRerun marks it ServedAttempt), and
// never an attempt whose own provision job made its record.
func TestReleaseOfAReRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	req, _ := json.Marshal(provision.Request{})
	res, _ := json.Marshal(provision.Result{RunKey: "4242:8:1", Status: provision.StatusSucceeded})
	f.st.setRun(store.Run{Key: "4242:8:1", RepositoryID: "4242", Repository: "acme/api", RunID: "8", Attempt: 1,
		Status: provision.StatusSucceeded, Request: req, Result: res, Version: 1})
	f.st.setRun(store.Run{Key: "4242:8:2", RepositoryID: "4242", Repository: "acme/api", RunID: "8", Attempt: 2, ServedAttempt: 2,
		Status: provision.StatusSucceeded, Request: req, Result: res, Version: 1})
	f.rel.rep = release.Report{Message: "released", Instances: []release.InstanceResult{{ID: "i-1", State: store.StateRunning, Outcome: release.Pooled}}}
	if code, _, b := f.call(t, http.MethodPost, "/v1/release", "run-8@2", `{"run_key": "4242:8:1"}`); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, b)
	}
	if want := []string{"4242:8:1", "4242:8:2"}; !slices.Equal(f.rel.calls, want) {
		t.Errorf("released %v, want %v", f.rel.calls, want)
	}
	f.st.setRun(store.Run{Key: "4242:8:2", RepositoryID: "4242", Repository: "acme/api", RunID: "8", Attempt: 2,
		Status: provision.StatusSucceeded, Request: req, Result: res, Version: 2})
	f.rel.calls = nil
	if code, _, b := f.call(t, http.MethodPost, "/v1/release", "run-8@2", `{"attempt": 1}`); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, b)
	}
	if want := []string{"4242:8:1"}; !slices.Equal(f.rel.calls, want) {
		t.Errorf("released %v, want %v: attempt 2 provisioned for itself", f.rel.calls, want)
	}
}

// TestRunShowsSpotInterruption: while a step-driven run still holds its runners, the run's report
// names the one whose agent reported EC2's spot interruption notice (signed by its pinned key), with
// the announced time; an unsigned claim of a notice, or another instance's, changes nothing.
func TestRunShowsSpotInterruption(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res, _ := json.Marshal(provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusSucceeded,
		Runners: []provision.Runner{{InstanceID: "i-1"}, {InstanceID: "i-2"}, {InstanceID: "i-3"}}})
	f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", Repository: "acme/api", RunID: "7", Attempt: 1,
		Status: provision.StatusSucceeded, Result: res, Version: 2})
	pub, key, _ := ed25519.GenerateKey(nil)
	pin := base64.StdEncoding.EncodeToString(pub)
	notice := store.SignalRecord{Signal: store.SignalSpotInterrupted, RunID: "4242:7:1",
		Detail: `{"action":"terminate","time":"2026-11-26T17:02:00Z"}`}
	signed, unsigned := notice, notice
	signed.Sign("i-1", key, time.Now())
	f.st.signals = map[string]store.SignalRecord{"i-1": signed, "i-2": unsigned}
	for _, id := range []string{"i-1", "i-2", "i-3"} {
		f.st.instances[id] = store.Instance{ID: id, State: store.StateRunning, RunID: "4242:7:1", AgentKey: pin, Reason: "registered for run 4242:7:1"}
	}
	code, _, b := f.call(t, http.MethodGet, "/v1/runs/7", "run-7", "")
	var got apiv1.RunResponse
	if err := json.Unmarshal(b, &got); err != nil || code != 200 || len(got.Instances) != 3 {
		t.Fatalf("GET run: %d %s", code, b)
	}
	want := []apiv1.InstanceStatus{
		{InstanceID: "i-1", State: "running", Interrupted: true, Reason: "runner i-1 was reclaimed by EC2 (spot interruption) at 2026-11-26T17:02:00Z"},
		{InstanceID: "i-2", State: "running", Reason: "registered for run 4242:7:1"},
		{InstanceID: "i-3", State: "running", Reason: "registered for run 4242:7:1"},
	}
	if diff := cmp.Diff(want, got.Instances); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
}

func TestReleaseOfStuckProvision(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // ReleaseTimeout 2s
	f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", RunID: "7", Attempt: 1, Status: provision.StatusProvisioning, Version: 1, UpdatedAt: time.Now()})
	code, hdr, b := f.call(t, http.MethodPost, "/v1/release", "run-7", "")
	if code != http.StatusConflict || !strings.Contains(string(b), apiv1.CodeInProgress) {
		t.Errorf("release of a run still provisioning: %d %s", code, b)
	}
	// Retry-After: the time left to the provision deadline (a minute after the try started, in the
	// fake), less the second the release waited (half its time limit).
	if s, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || s < 50 || s > 60 {
		t.Errorf("Retry-After %q, want the time left to the provision deadline (about 59 s)", hdr.Get("Retry-After"))
	}
	if len(f.rel.calls) != 0 {
		t.Errorf("releaser called %v", f.rel.calls)
	}
}

func TestPools(t *testing.T) {
	t.Parallel()
	live := []store.Instance{
		{ID: "i-1", State: store.StateIdle, RunnerClass: "linux"},
		{ID: "i-2", State: store.StateRunning, RunnerClass: "linux", RunID: "4242:7:1"},
		{ID: "i-3", State: store.StateRunning, RunnerClass: "linux", RunID: "5555:8:1"},
		{ID: "i-4", State: store.StateReady, RunnerClass: "linux", Pool: "hot"},
	}
	got := api.Pools(live, "4242", time.Unix(0, 0))
	want := apiv1.PoolsResponse{
		At: time.Unix(0, 0).UTC(),
		Pools: []apiv1.PoolCount{
			{RunnerClass: "linux", States: map[string]int{"idle": 1, "running": 2}, Total: 3},
			{RunnerClass: "linux", Pool: "hot", States: map[string]int{"ready": 1}, Total: 1},
		},
		Totals: map[string]int{"idle": 1, "running": 2, "ready": 1},
		Runs:   []apiv1.ActiveRun{{RunKey: "4242:7:1", RunID: "7", Attempt: 1, States: map[string]int{"running": 1}, Instances: 1}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Pools (-want +got):\n%s", diff)
	}
}
