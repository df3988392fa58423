// The webhook endpoint over HTTP: signatures, headers, malformed payloads, routing by pool label,
// unknown pools, and delivery marking, with small fakes behind it. The end-to-end burst through the
// real job queue and pool workers is in internal/warmpool (burst_test.go).
package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const secret = "s3cret-webhook"

type fakes struct {
	mu        sync.Mutex
	jobs      []warmpool.Job
	cancelled []int64
	marks     map[string]bool
	enqErr    error
	cancelErr error
	// noDependabot: the deployment has no pool named dependabot.
	noDependabot bool
	leftAlone    []string
}

func (f *fakes) Enqueue(_ context.Context, j warmpool.Job) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.enqErr != nil {
		return "", f.enqErr
	}
	for _, old := range f.jobs {
		if old.JobID == j.JobID && old.Action == j.Action {
			return pooljob.Duplicate, nil
		}
	}
	f.jobs = append(f.jobs, j)
	return pooljob.Enqueued, nil
}

func (f *fakes) Known(_ context.Context, name string) (bool, error) {
	return name == "small" || (name == "dependabot" && !f.noDependabot), nil
}

func (f *fakes) CancelRun(_ context.Context, _ string, runID int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancelErr != nil {
		return f.cancelErr
	}
	f.cancelled = append(f.cancelled, runID)
	return nil
}

// JobStatus says job 23 completed already; every other job is queued.
func (f *fakes) JobStatus(_ context.Context, _ string, jobID int64) (string, error) {
	if jobID == 23 {
		return "completed", nil
	}
	return "queued", nil
}

func (f *fakes) MarkOnce(_ context.Context, key string, _ time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.marks == nil {
		f.marks = map[string]bool{}
	}
	first := !f.marks[key]
	f.marks[key] = true
	return first, nil
}

func newHandler(t *testing.T, f *fakes) http.Handler {
	t.Helper()
	return newHandlerWith(t, f, webhook.DependabotPool)
}

func newHandlerWith(t *testing.T, f *fakes, dependabotPool string) http.Handler {
	t.Helper()
	h, err := webhook.New(webhook.Config{Secret: secret, Deliveries: f, Pools: f, Jobs: f, GitHub: f, MaxBodyBytes: 64 << 10,
		Allowed: func(repo string) bool { return repo != "evil/api" }, DependabotPool: dependabotPool,
		OnLeftAlone: func(why string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.leftAlone = append(f.leftAlone, why)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func jobPayload(action string, id int64, labels ...string) []byte {
	b, _ := json.Marshal(map[string]any{
		"action": action,
		"workflow_job": map[string]any{
			"id": id, "run_id": 900 + id, "run_attempt": 1, "labels": labels, "status": action,
			"created_at": "2025-01-15T12:00:00Z", "runner_name": nil,
		},
		"repository":   map[string]any{"id": 42, "full_name": "acme/api"},
		"installation": map[string]any{"id": 7},
	})
	return b
}

type delivery struct {
	method, event, id, signature, contentType string
	body                                      []byte
}

func post(t *testing.T, h http.Handler, d delivery) (int, webhook.Response) {
	t.Helper()
	if d.method == "" {
		d.method = http.MethodPost
	}
	req := httptest.NewRequest(d.method, "/v1/webhooks/github", bytes.NewReader(d.body))
	if d.event != "" {
		req.Header.Set("X-GitHub-Event", d.event)
	}
	req.Header.Set("Content-Type", "application/json")
	if d.contentType != "" {
		req.Header.Set("Content-Type", d.contentType)
	}
	if d.id != "" {
		req.Header.Set("X-GitHub-Delivery", d.id)
	}
	switch d.signature {
	case "":
		req.Header.Set("X-Hub-Signature-256", githubfake.Sign(secret, d.body))
	case "none":
	default:
		req.Header.Set("X-Hub-Signature-256", d.signature)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var resp webhook.Response
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("response %q is not JSON: %v", rec.Body.String(), err)
	}
	return rec.Code, resp
}

func TestNewRefusesWithoutSecret(t *testing.T) {
	t.Parallel()
	f := &fakes{}
	for _, s := range []string{"", "   "} {
		if _, err := webhook.New(webhook.Config{Secret: s, Deliveries: f, Pools: f, Jobs: f, GitHub: f}); err == nil {
			t.Errorf("New with secret %q succeeded", s)
		}
	}
	if _, err := webhook.New(webhook.Config{Secret: secret}); err == nil {
		t.Error("New without its dependencies succeeded")
	}
}

func TestDeliveries(t *testing.T) {
	t.Parallel()
	queued := jobPayload("queued", 1, "self-hosted", "runs-on/pool=small")
	tests := []struct {
		name       string
		d          delivery
		wantStatus int
		want       webhook.Response // compared on Result, Pool, Job; Error/Reason checked for presence
		wantError  string
		wantJobs   int
		wantCancel int
	}{
		{"queued pool job", delivery{event: "workflow_job", id: "d1", body: queued}, 200,
			webhook.Response{Result: webhook.ResultEnqueued, Pool: "small", Job: 1}, "", 1, 0},
		{"deterministic label", delivery{event: "workflow_job", id: "d2", body: jobPayload("queued", 2, "runs-on=123/pool=Small")}, 200,
			webhook.Response{Result: webhook.ResultEnqueued, Pool: "small", Job: 2}, "", 1, 0},
		{"dependabot", delivery{event: "workflow_job", id: "d3", body: jobPayload("queued", 3, "dependabot")}, 200,
			webhook.Response{Result: webhook.ResultEnqueued, Pool: "dependabot", Job: 3}, "", 1, 0},
		{"completed pool job", delivery{event: "workflow_job", id: "d4", body: jobPayload("completed", 4, "pool=small")}, 200,
			webhook.Response{Result: webhook.ResultEnqueued, Pool: "small", Job: 4}, "", 1, 0},
		{"unknown pool cancels the run", delivery{event: "workflow_job", id: "d5", body: jobPayload("queued", 5, "pool=nope")}, 200,
			webhook.Response{Result: webhook.ResultCancelled, Pool: "nope", Job: 5}, "", 0, 1},
		{"two pools cancel the run", delivery{event: "workflow_job", id: "d6", body: jobPayload("queued", 6, "pool=small", "pool=other")}, 200,
			webhook.Response{Result: webhook.ResultCancelled, Job: 6}, "", 0, 1},
		{"no pool label", delivery{event: "workflow_job", id: "d7", body: jobPayload("queued", 7, "linux")}, 200,
			webhook.Response{Result: webhook.ResultIgnored, Job: 7}, "", 0, 0},
		{"in progress", delivery{event: "workflow_job", id: "d8", body: jobPayload("in_progress", 8, "pool=small")}, 200,
			webhook.Response{Result: webhook.ResultIgnored, Job: 8}, "", 0, 0},
		{"ping", delivery{event: "ping", id: "d9", body: []byte(`{"zen":"Keep it logically awesome."}`)}, 200,
			webhook.Response{Result: webhook.ResultPong}, "", 0, 0},
		{"other event", delivery{event: "push", id: "d10", body: []byte(`{}`)}, 200,
			webhook.Response{Result: webhook.ResultIgnored}, "", 0, 0},
		{"no signature", delivery{event: "workflow_job", id: "d11", body: queued, signature: "none"}, 401,
			webhook.Response{}, "missing", 0, 0},
		{"wrong secret", delivery{event: "workflow_job", id: "d12", body: queued, signature: githubfake.Sign("other", queued)}, 401,
			webhook.Response{}, "does not match", 0, 0},
		{"sha1 signature", delivery{event: "workflow_job", id: "d13", body: queued, signature: "sha1=0123"}, 401,
			webhook.Response{}, "sha256", 0, 0},
		{"malformed hex", delivery{event: "workflow_job", id: "d14", body: queued, signature: "sha256=zz"}, 401,
			webhook.Response{}, "hex", 0, 0},
		{"not JSON", delivery{event: "workflow_job", id: "d15", body: []byte(`{"action":`)}, 400,
			webhook.Response{}, "malformed", 0, 0},
		{"no workflow_job", delivery{event: "workflow_job", id: "d16", body: []byte(`{"action":"queued","repository":{"id":1,"full_name":"a/b"}}`)}, 400,
			webhook.Response{}, "workflow_job is missing", 0, 0},
		{"bad repository", delivery{event: "workflow_job", id: "d17", body: []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":["pool=small"]},"repository":{"id":1,"full_name":"nope"}}`)}, 400,
			webhook.Response{}, "owner/name", 0, 0},
		{"no event header", delivery{id: "d18", body: queued}, 400, webhook.Response{}, "X-GitHub-Event", 0, 0},
		{"no delivery header", delivery{event: "workflow_job", body: queued}, 400, webhook.Response{}, "X-GitHub-Delivery", 0, 0},
		{"GET", delivery{method: http.MethodGet, event: "workflow_job", id: "d19"}, 405, webhook.Response{}, "POST", 0, 0},
		{"repository not allowed", delivery{event: "workflow_job", id: "d21", body: bytes.ReplaceAll(queued, []byte("acme/api"), []byte("evil/api"))}, 403,
			webhook.Response{Result: webhook.ResultRefused, Pool: "small", Job: 1}, "", 0, 0},
		{"form-encoded", delivery{event: "workflow_job", id: "d22", body: []byte("payload=" + url.QueryEscape(string(queued))), contentType: "application/x-www-form-urlencoded"}, 200,
			webhook.Response{Result: webhook.ResultEnqueued, Pool: "small", Job: 1}, "", 1, 0},
		{"form-encoded without payload", delivery{event: "workflow_job", id: "d23", body: []byte("other=1"), contentType: "application/x-www-form-urlencoded"}, 415,
			webhook.Response{}, "payload", 0, 0},
		{"unsupported content type", delivery{event: "workflow_job", id: "d24", body: queued, contentType: "text/xml"}, 415,
			webhook.Response{}, "content type", 0, 0},
		{"completed job of an unconfigured pool", delivery{event: "workflow_job", id: "d25", body: jobPayload("completed", 22, "pool=nope")}, 200,
			webhook.Response{Result: webhook.ResultIgnored, Pool: "nope", Job: 22}, "", 0, 0},
		{"unknown pool, job already completed", delivery{event: "workflow_job", id: "d26", body: jobPayload("queued", 23, "pool=nope")}, 200,
			webhook.Response{Result: webhook.ResultIgnored, Pool: "nope", Job: 23}, "", 0, 0},
		{"too large", delivery{event: "workflow_job", id: "d20", body: bytes.Repeat([]byte("x"), 65<<10)}, 413, webhook.Response{}, "larger", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakes{}
			status, resp := post(t, newHandler(t, f), tt.d)
			if status != tt.wantStatus {
				t.Errorf("status %d, want %d (%+v)", status, tt.wantStatus, resp)
			}
			got := webhook.Response{Result: resp.Result, Pool: resp.Pool, Job: resp.Job}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
			if tt.wantError != "" && !strings.Contains(resp.Error, tt.wantError) {
				t.Errorf("error %q, want it to mention %q", resp.Error, tt.wantError)
			}
			if len(f.jobs) != tt.wantJobs || len(f.cancelled) != tt.wantCancel {
				t.Errorf("enqueued %d jobs, cancelled %d runs; want %d and %d", len(f.jobs), len(f.cancelled), tt.wantJobs, tt.wantCancel)
			}
			if tt.wantCancel > 0 && resp.Reason == "" {
				t.Error("a cancelled run has no reason in the response")
			}
		})
	}
}

// A redelivery is reported as such and changes nothing; a failure before the job is durably queued
// leaves the delivery unmarked, so its redelivery is handled in full.
func TestRedeliveryAndFailures(t *testing.T) {
	t.Parallel()
	f := &fakes{}
	h := newHandler(t, f)
	d := delivery{event: "workflow_job", id: "same", body: jobPayload("queued", 1, "pool=small")}
	if status, resp := post(t, h, d); status != 200 || resp.Result != webhook.ResultEnqueued || resp.Redelivery {
		t.Fatalf("first delivery: %d %+v", status, resp)
	}
	if status, resp := post(t, h, d); status != 200 || resp.Result != webhook.ResultDuplicate || !resp.Redelivery {
		t.Fatalf("redelivery: %d %+v", status, resp)
	}
	if len(f.jobs) != 1 {
		t.Errorf("jobs %d, want 1", len(f.jobs))
	}

	f.enqErr = errors.New("sqs down")
	d2 := delivery{event: "workflow_job", id: "later", body: jobPayload("queued", 2, "pool=small")}
	if status, resp := post(t, h, d2); status != http.StatusServiceUnavailable || resp.Error == "" {
		t.Fatalf("enqueue failure: %d %+v", status, resp)
	}
	f.enqErr = nil
	if status, resp := post(t, h, d2); status != 200 || resp.Result != webhook.ResultEnqueued || resp.Redelivery {
		t.Fatalf("redelivery after a failure: %d %+v; want handled in full", status, resp)
	}

	f.cancelErr = errors.New("github down")
	d3 := delivery{event: "workflow_job", id: "unknown", body: jobPayload("queued", 3, "pool=nope")}
	if status, resp := post(t, h, d3); status != http.StatusBadGateway || !strings.Contains(resp.Error, "redeliver") {
		t.Fatalf("cancel failure: %d %+v", status, resp)
	}
}

func TestPoolFromLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		labels  []string
		want    webhook.Ask
		wantErr bool
	}{
		{nil, webhook.Ask{}, false},
		{[]string{"self-hosted", "linux"}, webhook.Ask{}, false},
		{[]string{"pool=small"}, webhook.Ask{Pool: "small", Ours: true}, false},
		{[]string{"Pool = Small"}, webhook.Ask{Pool: "small", Ours: true}, false},
		{[]string{"runs-on/pool=cheap-x64"}, webhook.Ask{Pool: "cheap-x64"}, false},
		{[]string{"runs-on=12345/pool=cheap-x64"}, webhook.Ask{Pool: "cheap-x64"}, false},
		{[]string{"runs-on=12345/cpu=2/pool=Cheap_X64/ram=4"}, webhook.Ask{Pool: "cheap_x64"}, false},
		{[]string{"Dependabot"}, webhook.Ask{Dependabot: true}, false},
		{[]string{"dependabot", "pool=dependabot"}, webhook.Ask{Pool: "dependabot", Ours: true}, false},
		{[]string{"pool=small", "runs-on/pool=small"}, webhook.Ask{Pool: "small", Ours: true}, false},
		{[]string{"pool=small", "runs-on/pool=other"}, webhook.Ask{Pool: "small", Ours: true}, false},
		{[]string{"dependabot", "pool=small"}, webhook.Ask{Pool: "small", Ours: true}, false},
		// Another product's labels are never an error: what they ask is left alone when unclear.
		{[]string{"runs-on/pool=a", "runs-on/pool=b"}, webhook.Ask{}, false},
		{[]string{"runs-on/pool=-bad"}, webhook.Ask{}, false},
		{[]string{"pool=small", "pool=large"}, webhook.Ask{}, true},
		{[]string{"pool="}, webhook.Ask{}, true},
		{[]string{"pool=-bad"}, webhook.Ask{}, true},
		{[]string{"pool=" + strings.Repeat("a", 64)}, webhook.Ask{}, true},
		{[]string{"spool=small", "poolx=y", "pool"}, webhook.Ask{}, false},
	}
	for _, tt := range tests {
		got, err := webhook.PoolFromLabels(tt.labels)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("PoolFromLabels(%q) = %+v, %v; want %+v, error %v", tt.labels, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestLabelsWeDoNotOwnNeverCancel (issue #33 item 5): with an organisation webhook, a job
// labelled dependabot, or naming a pool in another product's label, is not this deployment's
// unless it has that pool: it is left alone (answered, logged, counted), never cancelled, while
// pool=NAME, this deployment's own syntax, still fails clearly for a pool it does not have. On the
// old code the first two cancelled their runs.
func TestLabelsWeDoNotOwnNeverCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		labels         []string
		noDependabot   bool
		dependabotPool string
		want           string // result
		wantPool       string
		wantLeft       string
	}{
		{"dependabot without a dependabot pool", []string{"self-hosted", "dependabot"}, true, webhook.DependabotPool, webhook.ResultIgnored, "dependabot", webhook.LeftDependabot},
		{"dependabot answered by no pool", []string{"dependabot"}, false, "", webhook.ResultIgnored, "", webhook.LeftDependabot},
		{"dependabot with a dependabot pool", []string{"self-hosted", "dependabot"}, false, webhook.DependabotPool, webhook.ResultEnqueued, "dependabot", ""},
		{"dependabot mapped to another pool", []string{"dependabot"}, true, "small", webhook.ResultEnqueued, "small", ""},
		{"another product's unknown pool", []string{"runs-on=77/runner=2cpu-linux-x64/pool=nope"}, false, webhook.DependabotPool, webhook.ResultIgnored, "nope", webhook.LeftForeignPool},
		{"another product's label naming our pool", []string{"runs-on=77/pool=small"}, false, webhook.DependabotPool, webhook.ResultEnqueued, "small", ""},
		{"pool=unknown still fails clearly", []string{"self-hosted", "pool=nope"}, false, webhook.DependabotPool, webhook.ResultCancelled, "nope", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakes{noDependabot: tt.noDependabot}
			h := newHandlerWith(t, f, tt.dependabotPool)
			status, resp := post(t, h, delivery{event: "workflow_job", id: "q", body: jobPayload("queued", 5, tt.labels...)})
			if status != http.StatusOK || resp.Result != tt.want || resp.Pool != tt.wantPool {
				t.Fatalf("queued: %d %+v; want 200 %s for pool %q", status, resp, tt.want, tt.wantPool)
			}
			wantCancelled := 0
			if tt.want == webhook.ResultCancelled {
				wantCancelled = 1
				if !strings.Contains(resp.Reason, `"nope"`) || !strings.Contains(resp.Reason, "not configured") {
					t.Errorf("reason %q does not say which pool is missing", resp.Reason)
				}
			}
			if len(f.cancelled) != wantCancelled {
				t.Errorf("cancelled runs %v, want %d", f.cancelled, wantCancelled)
			}
			if tt.wantLeft != "" && (resp.Reason == "" || !strings.Contains(resp.Reason, "left to whoever serves it")) {
				t.Errorf("reason %q, want it to say the job is left alone", resp.Reason)
			}
			// Its completion is left alone too, and counted once (the queued event).
			if status, resp := post(t, h, delivery{event: "workflow_job", id: "c", body: jobPayload("completed", 5, tt.labels...)}); status != http.StatusOK ||
				(tt.wantLeft != "" && resp.Result != webhook.ResultIgnored) {
				t.Errorf("completed: %d %+v", status, resp)
			}
			var wantLeft []string
			if tt.wantLeft != "" {
				wantLeft = []string{tt.wantLeft}
			}
			if diff := cmp.Diff(wantLeft, f.leftAlone); diff != "" {
				t.Errorf("counted as left alone (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReRunJobsAreQueued: a queued job of a re-run attempt that asks for a label of its own run
// (an earlier attempt's, or its own) is queued as a re-run job for the pool worker; a label naming
// another run, a first attempt's job, and a deployment that serves no re-runs queue nothing.
func TestReRunJobsAreQueued(t *testing.T) {
	t.Parallel()
	payload := func(run, attempt int64, labels ...string) []byte {
		b, _ := json.Marshal(map[string]any{
			"action":       "queued",
			"workflow_job": map[string]any{"id": 77, "run_id": run, "run_attempt": attempt, "labels": labels, "status": "queued"},
			"repository":   map[string]any{"id": 42, "full_name": "acme/api"},
		})
		return b
	}
	tests := []struct {
		name   string
		body   []byte
		reruns bool
		want   bool
	}{
		{"earlier attempt's label", payload(500, 2, "500-1"), true, true},
		{"own attempt's label", payload(500, 3, "self-hosted", "500-3"), true, true},
		{"another run's label", payload(500, 2, "499-1"), true, false},
		{"a later attempt's label", payload(500, 2, "500-3"), true, false},
		{"first attempt", payload(500, 1, "500-1"), true, false},
		{"not a run label", payload(500, 2, "500-x"), true, false},
		{"re-runs not served", payload(500, 2, "500-1"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakes{}
			h, err := webhook.New(webhook.Config{Secret: secret, Deliveries: f, Pools: f, Jobs: f, GitHub: f, Reruns: tt.reruns})
			if err != nil {
				t.Fatal(err)
			}
			status, resp := post(t, h, delivery{event: "workflow_job", id: "r", body: tt.body})
			if status != http.StatusOK {
				t.Fatalf("status %d %+v", status, resp)
			}
			queued := len(f.jobs) == 1 && f.jobs[0].Rerun && f.jobs[0].Pool == "" && f.jobs[0].RunAttempt >= 2
			if queued != tt.want || (!tt.want && len(f.jobs) != 0) || len(f.cancelled) != 0 {
				t.Errorf("queued %+v, cancelled %v; want a re-run job queued: %v", f.jobs, f.cancelled, tt.want)
			}
		})
	}
}
