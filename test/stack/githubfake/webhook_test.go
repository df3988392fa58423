// Tests of the webhook sender: signatures go-github's ValidatePayload accepts, payloads go-github parses
// as *github.WorkflowJobEvent, redelivery, and the Server's own ordered workflow_job deliveries.

package githubfake_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// received is one delivery as a receiver verifying signatures saw it.
type received struct {
	Delivery string
	Action   string
	JobID    int64
	Status   string
	Runner   string
}

// receiver is a webhook endpoint that verifies signatures like the reconciler does.
type receiver struct {
	secret string
	mu     sync.Mutex
	got    []received
	events []*github.WorkflowJobEvent
}

func (rv *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	payload, err := github.ValidatePayload(r, []byte(rv.secret))
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	ev, err := github.ParseWebHook(github.WebHookType(r), payload)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	wj, ok := ev.(*github.WorkflowJobEvent)
	if !ok {
		http.Error(w, "not workflow_job", http.StatusBadRequest)
		return
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	rv.got = append(rv.got, received{
		Delivery: github.DeliveryID(r), Action: wj.GetAction(), JobID: wj.GetWorkflowJob().GetID(),
		Status: wj.GetWorkflowJob().GetStatus(), Runner: wj.GetWorkflowJob().GetRunnerName(),
	})
	rv.events = append(rv.events, wj)
	w.WriteHeader(http.StatusOK)
}

func (rv *receiver) deliveries() []received {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]received{}, rv.got...)
}

func newReceiver(t *testing.T, secret string) (*receiver, string) {
	rv := &receiver{secret: secret}
	srv := httptest.NewServer(rv)
	t.Cleanup(srv.Close)
	return rv, srv.URL
}

func TestSign(t *testing.T) {
	t.Parallel()
	// The example from GitHub's "Validating webhook deliveries" documentation.
	got := githubfake.Sign("It's a Secret to Everybody", []byte("Hello, World!"))
	if want := "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestWebhookSender(t *testing.T) {
	t.Parallel()
	ev := githubfake.WorkflowJobEvent{
		ID: 501, RunID: 77, Labels: []string{"self-hosted", "pool=dependabot"}, Owner: "acme", Repo: "app",
		RepoID: 12, InstallationID: 34, CreatedAt: t0,
	}
	tests := []struct {
		name         string
		senderSecret string
		action       string
		ev           githubfake.WorkflowJobEvent
		wantStatus   int
		wantErr      bool
	}{
		{"queued", "s3cret", "queued", ev, http.StatusOK, false},
		{"in progress", "s3cret", "in_progress", func() githubfake.WorkflowJobEvent {
			e := ev
			e.RunnerName, e.RunnerID, e.RunnerGroupID, e.RunnerGroupName = "i-1", 9, 1, "Default"
			return e
		}(), http.StatusOK, false},
		{"wrong secret", "other", "queued", ev, http.StatusUnauthorized, false},
		{"unknown action", "s3cret", "started", ev, 0, true},
		{"missing ids", "s3cret", "queued", githubfake.WorkflowJobEvent{Owner: "acme", Repo: "app"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rv, url := newReceiver(t, "s3cret")
			s := &githubfake.WebhookSender{URL: url, Secret: tt.senderSecret}
			id, status, err := s.SendWorkflowJob(t.Context(), tt.action, tt.ev)
			if (err != nil) != tt.wantErr || status != tt.wantStatus {
				t.Fatalf("SendWorkflowJob = %q, %d, %v; want status %d, error %v", id, status, err, tt.wantStatus, tt.wantErr)
			}
			if tt.wantStatus != http.StatusOK {
				return
			}
			if len(id) != 36 {
				t.Errorf("delivery id %q is not a UUID", id)
			}
			rv.mu.Lock()
			got := rv.events[0]
			rv.mu.Unlock()
			wj := got.GetWorkflowJob()
			if got.GetAction() != tt.action || wj.GetID() != 501 || wj.GetRunID() != 77 || wj.GetRunAttempt() != 1 || wj.GetStatus() != tt.action {
				t.Errorf("event = %s", github.Stringify(got))
			}
			if diff := cmp.Diff(tt.ev.Labels, wj.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if wj.GetRunnerName() != tt.ev.RunnerName || wj.GetRunnerGroupName() != tt.ev.RunnerGroupName {
				t.Errorf("runner = %q/%q, want %q/%q", wj.GetRunnerName(), wj.GetRunnerGroupName(), tt.ev.RunnerName, tt.ev.RunnerGroupName)
			}
			if r := got.GetRepo(); r.GetID() != 12 || r.GetFullName() != "acme/app" || r.GetName() != "app" || r.GetOwner().GetLogin() != "acme" {
				t.Errorf("repository = %s", github.Stringify(r))
			}
			if got.GetInstallation().GetID() != 34 {
				t.Errorf("installation = %s, want id 34", github.Stringify(got.GetInstallation()))
			}
			if !wj.GetCreatedAt().Time.Equal(t0) {
				t.Errorf("created_at = %v, want %v", wj.GetCreatedAt(), t0)
			}

			status, err = s.Redeliver(t.Context(), id)
			if err != nil || status != http.StatusOK {
				t.Fatalf("Redeliver = %d, %v", status, err)
			}
			if ds := rv.deliveries(); len(ds) != 2 || ds[0].Delivery != id || ds[1].Delivery != id {
				t.Errorf("deliveries = %+v, want the same delivery id twice", ds)
			}
		})
	}
	t.Run("redeliver unknown", func(t *testing.T) {
		t.Parallel()
		if _, err := (&githubfake.WebhookSender{URL: "http://127.0.0.1:1"}).Redeliver(t.Context(), "nope"); err == nil {
			t.Error("Redeliver of an unknown delivery succeeded")
		}
	})
}

// TestServerWebhooks follows a job through the Server's own deliveries: queued, in_progress, completed.
func TestServerWebhooks(t *testing.T) {
	t.Parallel()
	rv, url := newReceiver(t, "hook-secret")
	fake, base := newFake(t, githubfake.Options{Webhook: &githubfake.WebhookSender{URL: url, Secret: "hook-secret"}})
	instID := fake.AddInstallation("acme")
	gh := tokenClient(t, base, fake.PAT())
	cfg, _, err := gh.Actions.GenerateRepoJITConfig(t.Context(), "acme", "app", &github.GenerateJITConfigRequest{Name: "i-9", RunnerGroupID: 1, Labels: []string{"run-5"}})
	if err != nil {
		t.Fatal(err)
	}
	rc := githubfake.NewRunnerClient(base, nil)
	if _, err := rc.Register(t.Context(), githubfake.RegisterOptions{JITConfig: cfg.GetEncodedJITConfig()}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	id := fake.QueueJob("acme", "app", 5, []string{"run-5"})
	job, err := rc.NextJob(t.Context(), 5*time.Second)
	if err != nil || job == nil {
		t.Fatalf("NextJob = %v, %v", job, err)
	}
	if err := rc.Complete(t.Context(), id, "success"); err != nil {
		t.Fatal(err)
	}
	want := []received{
		{Action: "queued", JobID: id, Status: "queued"},
		{Action: "in_progress", JobID: id, Status: "in_progress", Runner: "i-9"},
		{Action: "completed", JobID: id, Status: "completed", Runner: "i-9"},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for len(rv.deliveries()) < len(want) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	got := rv.deliveries()
	for i := range got {
		got[i].Delivery = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	ev, ok := fake.WorkflowJobEvent(id)
	if !ok || ev.InstallationID != instID || ev.Conclusion != "success" || ev.RunnerName != "i-9" {
		t.Errorf("WorkflowJobEvent = %+v, want the completed job with installation %d", ev, instID)
	}
}
