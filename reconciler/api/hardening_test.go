// Tests of what the API lets out and takes in at its edge: no AWS error text, ARNs, queue URLs,
// account ids or addresses in any answer (they go to the log); the request id; the content type.
package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/client"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/logging"
)

const (
	account   = "123456789012"
	queueURL  = "https://sqs.eu-west-1.amazonaws.com/" + account + "/runnerpool-pool-linux"
	awsReqID  = "5f1e2c3d-aaaa-bbbb-cccc-0123456789ab"
	roleARN   = "arn:aws:sts::" + account + ":assumed-role/runnerpool-reconciler/i-0abc"
	queueARN  = "arn:aws:sqs:eu-west-1:" + account + ":runnerpool-pool-linux"
	privateIP = "10.1.2.3"
)

// awsError is an error as the AWS SDK returns it: operation, status, request id, API error code
// and a message naming the role and the queue.
func awsError() error {
	return &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage", Err: &awshttp.ResponseError{
		RequestID: awsReqID,
		ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 403}},
			Err: &smithy.GenericAPIError{Code: "AccessDenied", Message: "User: " + roleARN +
				" is not authorized to perform: sqs:SendMessage on resource: " + queueARN},
		},
	}}
}

// secrets are what no answer may contain.
var secrets = []string{account, "amazonaws.com", "arn:", awsReqID, "RequestID", "operation error", "api error", "AccessDenied", privateIP}

func checkNoInternals(t *testing.T, what string, hdr http.Header, b []byte) {
	t.Helper()
	for _, s := range secrets {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("%s: the answer contains %q: %s", what, s, b)
		}
	}
	var e struct {
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: %v: %s", what, err, b)
	}
	if e.Code != "" && (e.RequestID == "" || e.RequestID != hdr.Get("X-Request-Id")) {
		t.Errorf("%s: error answer's request_id %q, header %q", what, e.RequestID, hdr.Get("X-Request-Id"))
	}
}

// TestNoInternalsInAnswers: every error path of provision, release, runs and pools, and the
// release reasons and run details, with an AWS error naming a queue URL, ARNs, an account id and
// a request id behind them: the answer has a stable code and the request id, and none of those.
// The log has the whole error, under the same request id.
func TestNoInternalsInAnswers(t *testing.T) {
	t.Parallel()
	inPool := "deregistered by the agent, in pool " + queueURL
	stored, _ := json.Marshal(provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusFailed, Outcome: "unsuccessful",
		Error:  "creating fleet: " + awsError().Error(),
		Undone: []provision.Undone{{InstanceID: "i-2", Action: provision.ActionTerminated, Reason: "record not written: " + awsError().Error(), Error: awsError().Error()}}})
	withReleases := fmt.Sprintf(`{"runKey":"4242:7:1","status":"failed","releases":[{"message":%q,"instances":[{"instance_id":"i-1","reason":%q}]}]}`,
		"released run 4242:7:1 via "+queueURL, inPool)
	storedAll := strings.Replace(string(stored), "{", withReleases[:len(withReleases)-1]+",", 1)

	tests := []struct {
		name   string
		setup  func(f *fixture)
		method string
		path   string
		token  string
		body   string
		status int
		code   string
	}{
		{"provision: store error", func(f *fixture) {
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) {
				return provision.Result{}, fmt.Errorf("recording run 4242:7:1: %w", awsError())
			}
		}, http.MethodPost, "/v1/provision", "run-7", body, 500, apiv1.CodeInternal},
		{"provision: throttled", func(f *fixture) {
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) {
				return provision.Result{}, fmt.Errorf("recording run: %w: %w", store.ErrThrottled, awsError())
			}
		}, http.MethodPost, "/v1/provision", "run-7", body, 503, apiv1.CodeUnavailable},
		{"provision: failed with an AWS cause", func(f *fixture) {
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) {
				return provision.Result{RunKey: "4242:7:1", Status: provision.StatusFailed, Outcome: "unsuccessful", Error: "creating fleet: " + awsError().Error(),
						Undone: []provision.Undone{{InstanceID: "i-2", Action: provision.ActionTerminated, Reason: "sent to " + queueURL, Error: awsError().Error()}}},
					fmt.Errorf("%w: creating fleet: %w", provision.ErrFailed, awsError())
			}
		}, http.MethodPost, "/v1/provision", "run-7", body, 503, apiv1.CodeUnsuccessful},
		{"provision: dumped", func(f *fixture) {
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) {
				return provision.Result{RunKey: "4242:7:1", Status: provision.StatusFailed, Outcome: "dump", Error: awsError().Error()},
					fmt.Errorf("%w: %w (from %s:443)", provision.ErrFailed, awsError(), privateIP)
			}
		}, http.MethodPost, "/v1/provision", "run-7", body, 500, apiv1.CodeDumped},
		{"provision: timeout", func(f *fixture) {
			f.prov.f = func(context.Context, provision.Request) (provision.Result, error) {
				return provision.Result{}, fmt.Errorf("reading %s: %w", queueURL, context.DeadlineExceeded)
			}
		}, http.MethodPost, "/v1/provision", "run-7", body, 504, apiv1.CodeTimeout},
		{"release: reasons with the queue URL", func(f *fixture) {
			f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", RunID: "7", Attempt: 1, Status: provision.StatusSucceeded, Version: 1})
			f.rel.rep = release.Report{Message: "released run 4242:7:1: 1 pooled", Instances: []release.InstanceResult{
				{ID: "i-1", State: store.StateRunning, Outcome: release.Pooled, Reason: inPool}}}
		}, http.MethodPost, "/v1/release", "run-7", "", 200, ""},
		{"release: incomplete", func(f *fixture) {
			f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", RunID: "7", Attempt: 1, Status: provision.StatusSucceeded, Version: 1})
			f.rel.err = fmt.Errorf("releasing i-2: %w", awsError())
			f.rel.rep = release.Report{Message: "released run 4242:7:1: 1 pooled, 1 failed", Instances: []release.InstanceResult{
				{ID: "i-1", State: store.StateRunning, Outcome: release.Pooled, Reason: inPool},
				{ID: "i-2", State: store.StateRunning, Outcome: release.Failed, Reason: awsError().Error() + "; left running", Err: f.rel.err}}}
		}, http.MethodPost, "/v1/release", "run-7", "", 500, apiv1.CodeReleaseIncomplete},
		{"release: store error", func(f *fixture) { f.st.err = fmt.Errorf("reading run: %w", awsError()) },
			http.MethodPost, "/v1/release", "run-7", "", 500, apiv1.CodeInternal},
		{"runs: store error", func(f *fixture) { f.st.err = fmt.Errorf("reading run: %w", awsError()) },
			http.MethodGet, "/v1/runs/7", "run-7", "", 500, apiv1.CodeInternal},
		{"runs: stored errors and reasons", func(f *fixture) {
			f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", RunID: "7", Attempt: 1, Status: provision.StatusFailed, Version: 1, Result: json.RawMessage(storedAll)})
			f.st.instances["i-2"] = store.Instance{ID: "i-2", State: store.StateTerminated, Reason: "terminate failed: " + awsError().Error()}
		}, http.MethodGet, "/v1/runs/7", "run-7", "", 200, ""},
		{"pools: store error", func(f *fixture) { f.st.err = fmt.Errorf("listing: %w: %w", store.ErrThrottled, awsError()) },
			http.MethodGet, "/v1/pools", "run-7", "", 503, apiv1.CodeUnavailable},
		{"issuer down", nil, http.MethodGet, "/v1/pools", "issuer-down", "", 503, apiv1.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs := &syncBuffer{}
			f := newFixtureWith(t, func(o *api.Options) { o.Logger = logging.New(logs, slog.LevelInfo) })
			if tt.setup != nil {
				tt.setup(f)
			}
			code, hdr, b := f.call(t, tt.method, tt.path, tt.token, tt.body)
			if code != tt.status {
				t.Fatalf("status %d %s, want %d", code, b, tt.status)
			}
			checkNoInternals(t, tt.name, hdr, b)
			var e apiv1.Error
			_ = json.Unmarshal(b, &e)
			if e.Code != tt.code {
				t.Errorf("code %q, want %q", e.Code, tt.code)
			}
			if tt.status == 200 && !bytes.Contains(b, []byte("[redacted]")) {
				t.Errorf("nothing redacted in %s: the test's reasons did not reach the answer", b)
			}
			if tt.code != "" {
				// The access log line of the request has the whole cause, under its request id.
				log := accessLog(logs, hdr.Get("X-Request-Id"))
				if !strings.Contains(log, awsReqID) && !strings.Contains(log, queueURL) && !strings.Contains(log, privateIP) {
					t.Errorf("the log lacks the cause under request id %s:\n%s", hdr.Get("X-Request-Id"), log)
				}
			}
		})
	}
}

// TestRequestID: a caller's X-Request-Id is adopted only when well-formed and bounded, and, with
// trusted proxies configured, only from them; otherwise the request gets a fresh one. The answer's
// header and error body carry the same id.
func TestRequestID(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name    string
		proxies []netip.Prefix
		ids     []string
		adopted bool
	}{
		{"none", nil, nil, false},
		{"well-formed", nil, []string{"gh-1001.2_abc-XYZ"}, true},
		{"64 characters", nil, []string{strings.Repeat("a", 64)}, true},
		{"65 characters", nil, []string{strings.Repeat("a", 65)}, false},
		{"space", nil, []string{"a b"}, false},
		{"markup", nil, []string{"<script>"}, false},
		{"log injection", nil, []string{`x" level=ERROR msg="forged`}, false},
		{"non-ASCII", nil, []string{"idé"}, false},
		{"two headers", nil, []string{"a", "b"}, false},
		{"from a trusted proxy", loopback, []string{"lb-42"}, true},
		{"not from a trusted proxy", elsewhere, []string{"lb-42"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixtureWith(t, func(o *api.Options) { o.TrustedProxies = tt.proxies })
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/pools", nil) // no token: a 401 with a body
			for _, id := range tt.ids {
				req.Header.Add("X-Request-Id", id)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e apiv1.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			got := resp.Header.Get("X-Request-Id")
			if e.RequestID != got {
				t.Errorf("body request_id %q, header %q", e.RequestID, got)
			}
			if tt.adopted {
				if got != tt.ids[0] {
					t.Errorf("request id %q, want the caller's %q", got, tt.ids[0])
				}
				return
			}
			if len(got) != 16 || strings.Trim(got, "0123456789abcdef") != "" {
				t.Errorf("request id %q, want a fresh one", got)
			}
		})
	}
}

// TestContentType: a body must be declared application/json (UTF-8); only an empty body may come
// without a content type. A refused request reaches neither the provisioner nor the releaser.
func TestContentType(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, provision.Request) (provision.Result, error) {
		return provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusSucceeded}, nil
	}
	tests := []struct {
		name, path, ct, body string
		status               int
	}{
		{"provision without a content type", "/v1/provision", "", body, 415},
		{"provision as text", "/v1/provision", "text/plain", body, 415},
		{"provision as a form", "/v1/provision", "application/x-www-form-urlencoded", body, 415},
		{"provision as another JSON type", "/v1/provision", "application/vnd.acme+json", body, 415},
		{"provision in latin-1", "/v1/provision", "application/json; charset=iso-8859-1", body, 415},
		{"provision, malformed type", "/v1/provision", "application/json;;", body, 415},
		{"provision", "/v1/provision", "application/json", body, 200},
		{"provision, utf-8", "/v1/provision", "Application/JSON; charset=UTF-8", body, 200},
		{"release without a content type", "/v1/release", "", `{"idle_time_seconds": 60}`, 415},
		{"release, empty body without a content type", "/v1/release", "", "", 200},
		{"release", "/v1/release", "application/json", `{}`, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.prov.f = ok
			f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", RunID: "7", Attempt: 1, Status: provision.StatusSucceeded, Version: 1})
			f.rel.rep = release.Report{Message: release.NothingToRelease}
			req, _ := http.NewRequest(http.MethodPost, f.srv.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer run-7")
			if tt.ct != "" {
				req.Header.Set("Content-Type", tt.ct)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e apiv1.Error
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%+v), want %d", resp.StatusCode, e, tt.status)
			}
			called := len(f.prov.reqs) + len(f.rel.calls)
			if tt.status == 415 && (e.Code != apiv1.CodeUnsupportedMedia || called != 0) {
				t.Errorf("415 with code %q after %d domain calls", e.Code, called)
			}
			if tt.status == 200 && called != 1 {
				t.Errorf("200 after %d domain calls", called)
			}
		})
	}
}

// syncBuffer is a log sink safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// accessLog returns the access log line ("msg":"request") of a request id, waiting for it: the
// line is written as the handler returns, which may be just after the client read the answer.
func accessLog(logs *syncBuffer, requestID string) string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `"msg":"request"`) && strings.Contains(line, `"request_id":"`+requestID+`"`) {
				return line
			}
		}
		if time.Now().After(deadline) {
			return "no access log line for request " + requestID + " in:\n" + logs.String()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientAgainstAPI: the workflow client (what `runnerpool provision` and `runnerpool release`,
// and so the composite actions, run) passes the API's content type rule on every call.
func TestClientAgainstAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.prov.f = func(context.Context, provision.Request) (provision.Result, error) {
		return provision.Result{RunKey: "4242:7:1", Label: "7", Status: provision.StatusSucceeded}, nil
	}
	f.rel.rep = release.Report{Message: release.NothingToRelease}
	c, err := client.New(f.srv.URL, client.StaticToken("run-7"), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.Provision(ctx, apiv1.ProvisionRequest{Count: 1, ResourceClass: "small"}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	f.st.setRun(store.Run{Key: "4242:7:1", RepositoryID: "4242", RunID: "7", Attempt: 1, Status: provision.StatusSucceeded, Version: 1})
	if _, err := c.Release(ctx, apiv1.ReleaseRequest{}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := c.Release(ctx, apiv1.ReleaseRequest{IdleTimeSeconds: 60}); err != nil {
		t.Fatalf("Release with an idle time: %v", err)
	}
	if _, err := c.Run(ctx, "7", 0); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := c.Pools(ctx); err != nil {
		t.Fatalf("Pools: %v", err)
	}
	if len(f.prov.reqs) != 1 || len(f.rel.calls) != 2 {
		t.Errorf("%d provisions, %d releases reached the domain, want 1 and 2", len(f.prov.reqs), len(f.rel.calls))
	}
}
