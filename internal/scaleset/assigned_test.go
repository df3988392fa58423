// Contract tests of github.com's shape of the scale set queue (jobs assigned by the service,
// identified by jobId) and of the service's answers for sessions it no longer knows.
package scaleset_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestAssignedJobLifecycle: github.com assigns the job itself (no acquisition), with
// runnerRequestId 0; a runner of the set takes it; JobStarted and JobCompleted follow, all
// carrying the same jobId.
func TestAssignedJobLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme")
	ctx := t.Context()
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 100 * time.Millisecond})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(ctx, set.ID, "replica-a")
	if err != nil {
		t.Fatal(err)
	}
	jobID := e.fake.QueueScaleSetJob("acme", "app", 77, "warm")
	m := next(t, e, s, 0)
	as := m.Jobs[0]
	if as.Type != scaleset.JobAssigned || as.RunnerRequestID != 0 || as.JobID == "" || as.WorkflowRunID != 77 || as.Key() != as.JobID {
		t.Fatalf("first message = %+v, want JobAssigned with runnerRequestId 0 and a jobId", as)
	}
	if m.Statistics == nil || m.Statistics.TotalAssignedJobs != 1 {
		t.Errorf("statistics = %+v, want one assigned job", m.Statistics)
	}
	_, rc, job := e.takeJob(t, set.ID, "runnerpool-i-1")
	if job.ID != jobID {
		t.Fatalf("runner's job = %+v: the assigned job %d goes to a runner of the set without acquisition", job, jobID)
	}
	if m = next(t, e, s, m.ID); m.Jobs[0].Type != scaleset.JobStarted || m.Jobs[0].Key() != as.JobID {
		t.Fatalf("after the runner took it: %+v, want JobStarted of %s", m.Jobs[0], as.JobID)
	}
	if err := rc.Complete(ctx, job.ID, "success"); err != nil {
		t.Fatal(err)
	}
	if done := next(t, e, s, m.ID).Jobs[0]; done.Type != scaleset.JobCompleted || done.Key() != as.JobID || done.RunnerName != "runnerpool-i-1" {
		t.Fatalf("completion = %+v", done)
	}
}

// TestAssignmentCancelledAndReassigned: an assignment no runner took in time ends in JobCompleted
// (canceled, no runner) and a new JobAssigned of the same job, up to 3 times; then the job ends.
func TestAssignmentCancelledAndReassigned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme")
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 50 * time.Millisecond, StartTimeout: time.Minute, SessionIdle: time.Hour})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(t.Context(), set.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	id := e.fake.QueueScaleSetJob("acme", "app", 1, "warm")
	m := next(t, e, s, 0)
	key := m.Jobs[0].Key()
	for round := 1; round <= 4; round++ {
		e.clk.Advance(2 * time.Minute) // no runner took it
		got, err := e.c.GetMessage(t.Context(), s, m.ID, 1)
		if err != nil || got == nil {
			t.Fatalf("round %d: %v, %v", round, got, err)
		}
		if err := e.c.DeleteMessage(t.Context(), s, got.ID); err != nil {
			t.Fatal(err)
		}
		m = got
		var types []string
		for _, j := range got.Jobs {
			if j.Key() != key {
				t.Fatalf("round %d: job message of %s, want %s", round, j.Key(), key)
			}
			types = append(types, j.Type+"/"+j.Result)
		}
		want := "JobCompleted/canceled JobAssigned/"
		if round == 4 {
			want = "JobCompleted/canceled"
		}
		if strings.Join(types, " ") != want {
			t.Fatalf("round %d: %v, want %s", round, types, want)
		}
	}
	if j, _ := e.fake.Job(id); j.Status != githubfake.JobCompleted || j.Conclusion != "cancelled" {
		t.Errorf("job after 3 reassignments = %s/%s, want completed/cancelled", j.Status, j.Conclusion)
	}
}

// TestJobMessagesBatched: what piles up between two polls comes in one message, up to 50 job
// messages each.
func TestJobMessagesBatched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme")
	e.fake.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 50 * time.Millisecond})
	set := e.createSet(t, "warm")
	s, err := e.c.CreateSession(t.Context(), set.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		e.fake.QueueScaleSetJob("acme", "app", int64(i+1), "warm")
	}
	first, err := e.c.GetMessage(t.Context(), s, 0, 60)
	if err != nil || first == nil || len(first.Jobs) != 50 || len(first.Problems) > 0 {
		t.Fatalf("first message: %+v, %v; want 50 job messages", first, err)
	}
	second, err := e.c.GetMessage(t.Context(), s, first.ID, 60)
	if err != nil || second == nil || len(second.Jobs) != 10 {
		t.Fatalf("second message: %+v, %v; want the other 10", second, err)
	}
	if second.Statistics.TotalAssignedJobs != 60 {
		t.Errorf("totalAssignedJobs = %d, want 60", second.Statistics.TotalAssignedJobs)
	}
}

// TestUnknownSessionAnswers: deleting a session the service does not know answers 400
// RunnerScaleSetSessionExpiredException, which DeleteSession forgives; refreshing one answers 404
// (ErrSessionGone); the 409 of a second session names RunnerScaleSetSessionConflictException, fully
// qualified; RunnerSetting.disableUpdate is kept.
func TestUnknownSessionAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "acme")
	ctx := t.Context()
	g, err := e.c.RunnerGroupByName(ctx, scaleset.DefaultRunnerGroup)
	if err != nil {
		t.Fatal(err)
	}
	set, err := e.c.CreateScaleSet(ctx, scaleset.ScaleSet{Name: "warm", RunnerGroupID: g.ID, RunnerSetting: scaleset.Setting{DisableUpdate: true}})
	if err != nil || !set.RunnerSetting.DisableUpdate {
		t.Fatalf("created = %+v, %v; want disableUpdate kept", set, err)
	}
	if got, err := e.c.GetScaleSetByID(ctx, set.ID); err != nil || !got.RunnerSetting.DisableUpdate {
		t.Fatalf("read back = %+v, %v; want disableUpdate kept", got, err)
	}
	s, err := e.c.CreateSession(ctx, set.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	var ex *scaleset.Error
	if _, err := e.c.CreateSession(ctx, set.ID, "b"); !errors.As(err, &ex) ||
		ex.TypeName != "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException, GitHub.Actions.Runtime.WebApi" {
		t.Fatalf("second session: %v, want the fully qualified RunnerScaleSetSessionConflictException", err)
	}
	unknown := "5b1f3c3e-0000-4000-a000-000000000001"
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, e.url+"/_actions/_apis/runtime/runnerscalesets/"+strconv.FormatInt(set.ID, 10)+"/sessions/"+unknown+"?api-version=6.0-preview", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken(t, e))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("raw DELETE of an unknown session: %d, want 400", resp.StatusCode)
	}
	if err := e.c.DeleteSession(ctx, set.ID, unknown); err != nil {
		t.Errorf("DeleteSession of an unknown session: %v, want nil (400 forgiven)", err)
	}
	if _, err := e.c.RefreshSession(ctx, set.ID, unknown); !errors.Is(err, scaleset.ErrSessionGone) || scaleset.StatusOf(err) != http.StatusNotFound {
		t.Errorf("refresh of an unknown session: %v, want ErrSessionGone (404)", err)
	}
	if err := e.c.DeleteSession(ctx, set.ID, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteSession(ctx, set.ID, s.SessionID); err != nil {
		t.Errorf("deleting the deleted session again: %v, want nil", err)
	}
}

// adminToken does the registration exchange by hand and returns the Actions service's admin token.
func adminToken(t *testing.T, e env) string {
	t.Helper()
	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.url + "/", Token: e.fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gh.RegistrationToken(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"url": rt.URL, "runner_event": "register"})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+"/actions/runner-registration", bytes.NewReader(body))
	req.Header.Set("Authorization", "RemoteAuth "+rt.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var conn struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&conn); err != nil || conn.Token == "" {
		t.Fatalf("registration exchange: %d, %v", resp.StatusCode, err)
	}
	return conn.Token
}
