// Contract tests: our client against the GitHub fake's Actions service, pinning the protocol's facts
// taken from GitHub's published client (github.com/actions/scaleset): paths, headers, status codes and
// JSON names. The registration token comes through the reconciler's own GitHub access (ghaccess).

package scaleset_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

type clock struct{ offset atomic.Int64 }

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func (c *clock) Now() time.Time          { return t0.Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

type env struct {
	fake *githubfake.Server
	url  string
	c    *scaleset.Client
	clk  *clock
}

// newEnv serves a fake (of the GHES shape when shape says so) and returns a scale set client for
// scope, on a clock the test moves. The client retries quickly.
func newEnv(t *testing.T, scope string, shape ...githubfake.ScaleSetShape) env {
	t.Helper()
	clk := &clock{}
	fake := githubfake.New(githubfake.Options{Now: clk.Now})
	for _, sh := range shape {
		fake.SetScaleSetShape(sh)
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(func() { fake.Close(); srv.Close() })
	gh, err := ghaccess.New(ghaccess.Config{APIURL: srv.URL + "/", Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := scaleset.New(scaleset.Config{
		APIURL: srv.URL + "/", Now: clk.Now, RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond,
		RegistrationToken: func(ctx context.Context) (string, string, error) {
			rt, err := gh.RegistrationToken(ctx, scope)
			return rt.Token, rt.URL, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return env{fake: fake, url: srv.URL, c: c, clk: clk}
}

func (e env) createSet(t *testing.T, name string) scaleset.ScaleSet {
	t.Helper()
	g, err := e.c.RunnerGroupByName(t.Context(), scaleset.DefaultRunnerGroup)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.c.CreateScaleSet(t.Context(), scaleset.ScaleSet{Name: name, RunnerGroupID: g.ID})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestScaleSetAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme")
	ctx := t.Context()
	g, err := e.c.RunnerGroupByName(ctx, "default")
	if err != nil || g.ID != 1 || !g.IsDefault {
		t.Fatalf("default group = %+v, %v", g, err)
	}
	if _, ok, err := e.c.GetScaleSet(ctx, g.ID, "linux-warm"); ok || err != nil {
		t.Fatalf("scale set before creation: ok %v, err %v", ok, err)
	}
	created := e.createSet(t, "linux-warm")
	if created.ID == 0 || len(created.Labels) != 1 || created.Labels[0] != (scaleset.Label{Type: "System", Name: "linux-warm"}) {
		t.Fatalf("created = %+v: want an id and the name as its System label", created)
	}
	got, ok, err := e.c.GetScaleSet(ctx, g.ID, "linux-warm")
	if err != nil || !ok || got.ID != created.ID {
		t.Fatalf("get by name = %+v, %v, %v", got, ok, err)
	}
	if _, err := e.c.CreateScaleSet(ctx, scaleset.ScaleSet{Name: "linux-warm", RunnerGroupID: 1}); scaleset.StatusOf(err) != http.StatusConflict {
		t.Fatalf("second scale set of the same name: %v, want 409", err)
	}
	upd, err := e.c.UpdateScaleSet(ctx, created.ID, scaleset.ScaleSet{Name: "linux-warm", RunnerGroupID: 1, Labels: []scaleset.Label{{Name: "linux-warm-2"}}})
	if err != nil || upd.LabelNames()[0] != "linux-warm-2" {
		t.Fatalf("update = %+v, %v", upd, err)
	}
	jit, err := e.c.GenerateJITConfig(ctx, created.ID, "runnerpool-i-0abc", "")
	if err != nil || jit.RunnerID == 0 || jit.Encoded == "" || jit.RunnerName != "runnerpool-i-0abc" {
		t.Fatalf("JIT config = %+v, %v", jit, err)
	}
	if _, err := e.c.GenerateJITConfig(ctx, created.ID, "runnerpool-i-0abc", ""); scaleset.StatusOf(err) != http.StatusConflict {
		t.Fatalf("second runner of the same name: %v, want 409", err)
	}
	if err := e.c.RemoveRunner(ctx, jit.RunnerID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.RemoveRunner(ctx, jit.RunnerID); err != nil {
		t.Fatalf("removing a removed runner: %v, want nil", err)
	}
	if n := e.fake.Calls()["POST /actions/runner-registration"]; n != 1 {
		t.Errorf("registration exchanges = %d, want 1 (the admin token is reused until it nearly expires)", n)
	}
	e.clk.Advance(time.Hour)
	if _, err := e.c.GetScaleSetByID(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	if n := e.fake.Calls()["POST /actions/runner-registration"]; n != 2 {
		t.Errorf("registration exchanges after the admin token expired = %d, want 2", n)
	}
	if err := e.c.DeleteScaleSet(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
}

// takeJob starts a runner of the scale set named name (a JIT configuration) and waits for its job.
func (e env) takeJob(t *testing.T, setID int64, name string) (scaleset.JITConfig, *githubfake.RunnerClient, *githubfake.AssignedJob) {
	t.Helper()
	jit, err := e.c.GenerateJITConfig(t.Context(), setID, name, "")
	if err != nil {
		t.Fatal(err)
	}
	rc := githubfake.NewRunnerClient(e.url, nil)
	if _, err := rc.Register(t.Context(), githubfake.RegisterOptions{JITConfig: jit.Encoded}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	job, err := rc.NextJob(t.Context(), 5*time.Second)
	if err != nil || job == nil {
		t.Fatalf("runner %s's job = %+v, %v", name, job, err)
	}
	return jit, rc, job
}

// next polls until a message comes, and deletes it.
func next(t *testing.T, e env, s scaleset.Session, last int64) *scaleset.Message {
	t.Helper()
	m, err := e.c.GetMessage(t.Context(), s, last, 3)
	if err != nil || m == nil {
		t.Fatalf("get message after %d = %v, %v", last, m, err)
	}
	if len(m.Problems) > 0 || len(m.Jobs) != 1 {
		t.Fatalf("message %d: problems %v, jobs %+v", m.ID, m.Problems, m.Jobs)
	}
	if err := e.c.DeleteMessage(t.Context(), s, m.ID); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSessionJobLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme", githubfake.ShapeAvailable)
	ctx := t.Context()
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 100 * time.Millisecond})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(ctx, set.ID, "replica-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateSession(ctx, set.ID, "replica-b"); !errors.Is(err, scaleset.ErrSessionConflict) || scaleset.StatusOf(err) != http.StatusConflict {
		t.Fatalf("second session: %v, want ErrSessionConflict (409)", err)
	}
	if m, err := e.c.GetMessage(ctx, s, 0, 3); m != nil || err != nil {
		t.Fatalf("empty queue: %v, %v, want a 202 (nil, nil)", m, err)
	}
	jobID := e.fake.QueueScaleSetJob("acme", "app", 77, "warm")
	m := next(t, e, s, 0)
	avail := m.Jobs[0]
	if avail.Type != scaleset.JobAvailable || avail.RunnerRequestID != jobID || avail.WorkflowRunID != 77 ||
		avail.OwnerName != "acme" || avail.RepositoryName != "app" || avail.QueueTime.IsZero() || avail.RequestLabels[0] != "warm" {
		t.Fatalf("JobAvailable = %+v", avail)
	}
	if m.Statistics == nil || m.Statistics.TotalAvailableJobs != 1 {
		t.Errorf("statistics = %+v, want one available job", m.Statistics)
	}
	if st, _ := e.fake.ScaleSet("acme", "warm"); st.MaxCapacity != 3 {
		t.Errorf("X-ScaleSetMaxCapacity seen = %d, want 3", st.MaxCapacity)
	}
	got, err := e.c.AcquireJobs(ctx, s, set.ID, []int64{jobID, 999999})
	if err != nil || len(got) != 1 || got[0] != jobID {
		t.Fatalf("acquire = %v, %v", got, err)
	}
	if m = next(t, e, s, m.ID); m.Jobs[0].Type != scaleset.JobAssigned {
		t.Fatalf("after acquire: %+v, want JobAssigned", m.Jobs[0])
	}

	jit, rc, job := e.takeJob(t, set.ID, "runnerpool-i-1")
	if job.ID != jobID {
		t.Fatalf("runner's job = %+v, want %d", job, jobID)
	}
	if m = next(t, e, s, m.ID); m.Jobs[0].Type != scaleset.JobStarted || m.Jobs[0].RunnerName != "runnerpool-i-1" {
		t.Fatalf("after the runner took it: %+v, want JobStarted by runnerpool-i-1", m.Jobs[0])
	}
	if err := rc.Complete(ctx, job.ID, "success"); err != nil {
		t.Fatal(err)
	}
	done := next(t, e, s, m.ID).Jobs[0]
	if done.Type != scaleset.JobCompleted || done.Result != "success" || done.RunnerName != "runnerpool-i-1" || done.RunnerID != jit.RunnerID {
		t.Fatalf("completion = %+v", done)
	}
	if err := e.c.DeleteSession(ctx, set.ID, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateSession(ctx, set.ID, "replica-b"); err != nil {
		t.Fatalf("session after the first was deleted: %v", err)
	}
}

func TestSessionExpiryAndRefresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme/app")
	ctx := t.Context()
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 50 * time.Millisecond, QueueTokenTTL: time.Minute, SessionIdle: 5 * time.Minute})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(ctx, set.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Minute)
	if _, err := e.c.GetMessage(ctx, s, 0, 1); !errors.Is(err, scaleset.ErrQueueTokenExpired) {
		t.Fatalf("poll with an expired queue token: %v, want ErrQueueTokenExpired (401)", err)
	}
	s2, err := e.c.RefreshSession(ctx, set.ID, s.SessionID)
	if err != nil || s2.SessionID != s.SessionID || s2.MessageQueueAccessToken == s.MessageQueueAccessToken {
		t.Fatalf("refresh = %+v, %v: want the same session with a new token", s2, err)
	}
	if _, err := e.c.GetMessage(ctx, s2, 0, 1); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(6 * time.Minute) // nobody polls: the session expires
	if _, err := e.c.GetMessage(ctx, s2, 0, 1); !errors.Is(err, scaleset.ErrSessionGone) {
		t.Fatalf("poll of an expired session: %v, want ErrSessionGone (404)", err)
	}
	if _, err := e.c.CreateSession(ctx, set.ID, "b"); err != nil {
		t.Fatalf("new session after expiry: %v", err)
	}
}

func TestJobsOfferedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme", githubfake.ShapeAvailable)
	ctx := t.Context()
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 50 * time.Millisecond, AcquireTimeout: time.Minute, StartTimeout: 3 * time.Minute, SessionIdle: time.Hour})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(ctx, set.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	id := e.fake.QueueScaleSetJob("acme", "app", 1, "warm")
	m := next(t, e, s, 0)
	e.clk.Advance(2 * time.Minute) // not acquired in time
	m2 := next(t, e, s, m.ID)
	if m2.Jobs[0].Type != scaleset.JobAvailable || m2.Jobs[0].RunnerRequestID != id {
		t.Fatalf("after the acquire timeout: %+v, want the job offered again", m2.Jobs[0])
	}
	if _, err := e.c.AcquireJobs(ctx, s, set.ID, []int64{id}); err != nil {
		t.Fatal(err)
	}
	m3 := next(t, e, s, m2.ID)     // JobAssigned
	e.clk.Advance(4 * time.Minute) // no runner took it
	if m4 := next(t, e, s, m3.ID); m4.Jobs[0].Type != scaleset.JobAvailable {
		t.Fatalf("after the start timeout: %+v, want the job available again", m4.Jobs[0])
	}
}

func TestRedeliveryUntilDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme")
	ctx := t.Context()
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 50 * time.Millisecond})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(ctx, set.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	e.fake.QueueScaleSetJob("acme", "app", 1, "warm")
	first, err := e.c.GetMessage(ctx, s, 0, 1)
	if err != nil || first == nil {
		t.Fatal(first, err)
	}
	again, err := e.c.GetMessage(ctx, s, 0, 1) // a new holder starts from 0: the undeleted message comes again
	if err != nil || again == nil || again.ID != first.ID {
		t.Fatalf("redelivery = %+v, %v; want message %d again", again, err, first.ID)
	}
	if m, err := e.c.GetMessage(ctx, s, first.ID, 1); m != nil || err != nil {
		t.Fatalf("after lastMessageId %d: %+v, %v, want nothing", first.ID, m, err)
	}
}

// TestRawContract pins what the client sends and the service demands, without our client.
func TestRawContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme")
	ctx := t.Context()
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 50 * time.Millisecond})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(ctx, set.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.MessageQueueURL, "/messages") || s.Statistics == nil || s.RunnerScaleSet == nil || s.RunnerScaleSet.ID != set.ID {
		t.Fatalf("session = %+v", s)
	}
	do := func(method, url string, hdr map[string]string) int {
		req, _ := http.NewRequestWithContext(ctx, method, url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	auth := "Bearer " + s.MessageQueueAccessToken
	cases := []struct {
		name   string
		method string
		url    string
		hdr    map[string]string
		want   int
	}{
		{"poll without X-ScaleSetMaxCapacity", "GET", s.MessageQueueURL, map[string]string{"Authorization": auth}, 400},
		{"poll with a bad queue token", "GET", s.MessageQueueURL, map[string]string{"Authorization": "Bearer x", scaleset.HeaderMaxCapacity: "1"}, 401},
		{"poll", "GET", s.MessageQueueURL, map[string]string{"Authorization": auth, scaleset.HeaderMaxCapacity: "1"}, 202},
		{"delete an unknown message", "DELETE", s.MessageQueueURL + "/12345", map[string]string{"Authorization": auth}, 404},
		{"scale sets without api-version", "GET", e.url + "/_actions/_apis/runtime/runnerscalesets", map[string]string{"Authorization": auth}, 400},
		{"registration without RemoteAuth", "POST", e.url + "/actions/runner-registration", nil, 401},
	}
	for _, tc := range cases {
		if got := do(tc.method, tc.url, tc.hdr); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	e.fake.SetActionsServiceDown(true)
	if _, err := e.c.GetMessage(ctx, s, 0, 1); scaleset.StatusOf(err) != http.StatusServiceUnavailable {
		t.Errorf("poll while the service is down: %v, want 503 (after the retries)", err)
	}
	if n := e.fake.Calls()["GET /_actions/_queue/{id}/{sid}/messages"]; n < 5 {
		t.Errorf("polls sent = %d, want at least 5: the 503 is retried 4 times", n)
	}
	e.fake.SetActionsServiceDown(false)
	if _, err := e.c.GetMessage(ctx, s, 0, 1); err != nil {
		t.Errorf("poll once the service is back: %v", err)
	}
}
