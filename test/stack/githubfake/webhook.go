// This file sends workflow_job webhooks the way GitHub does (payload shape, X-Hub-Signature-256,
// X-GitHub-Event, X-GitHub-Delivery, redelivery with the same delivery id), both for tests that drive the
// reconciler's webhook endpoint directly and for the Server's own job life cycle (Options.Webhook).

package githubfake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Sign returns the X-Hub-Signature-256 value of body: "sha256=" + hex(HMAC-SHA256(secret, body)).
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// WorkflowJobEvent describes one workflow_job webhook: the job, its repository and the installation.
// Zero fields are filled with GitHub-like defaults or sent as null where GitHub sends null.
type WorkflowJobEvent struct {
	ID              int64
	RunID           int64
	RunAttempt      int64 // 1 when 0
	Name            string
	WorkflowName    string
	HeadBranch      string
	HeadSHA         string
	Labels          []string // runs-on
	Status          string   // defaults to the action ("queued", "in_progress", "completed", "waiting")
	Conclusion      string   // for completed jobs
	RunnerID        int64
	RunnerName      string
	RunnerGroupID   int64
	RunnerGroupName string
	CreatedAt       time.Time // now when zero
	StartedAt       time.Time
	CompletedAt     time.Time
	Owner           string
	OwnerID         int64
	Repo            string
	RepoID          int64
	InstallationID  int64  // no installation object when 0
	DefaultBranch   string // the repository's default_branch in the payload; "main" when empty
}

// WebhookSender delivers webhooks to URL signed with Secret. The zero value of Client means
// http.DefaultClient. It remembers what it sent so Redeliver can send it again. Safe for concurrent use.
type WebhookSender struct {
	URL    string
	Secret string
	Client *http.Client

	mu         sync.Mutex
	deliveries map[string]sent
}

type sent struct {
	event string
	body  []byte
}

var jobActions = []string{"queued", "waiting", "in_progress", "completed"}

// SendWorkflowJob sends a workflow_job event with the given action and returns the delivery id and the
// receiver's HTTP status. err is set only when no response came back (or the event is invalid).
func (w *WebhookSender) SendWorkflowJob(ctx context.Context, action string, job WorkflowJobEvent) (deliveryID string, status int, err error) {
	if !slices.Contains(jobActions, action) {
		return "", 0, fmt.Errorf("workflow_job action %q is not one of %v", action, jobActions)
	}
	if job.ID == 0 || job.RunID == 0 || job.Owner == "" || job.Repo == "" {
		return "", 0, errors.New("workflow_job event needs ID, RunID, Owner and Repo")
	}
	body, err := json.Marshal(workflowJobPayload(action, job))
	if err != nil {
		return "", 0, fmt.Errorf("encoding workflow_job payload: %w", err)
	}
	return w.Send(ctx, "workflow_job", body)
}

// Send delivers an arbitrary event payload (for other events, or deliberately malformed bodies).
func (w *WebhookSender) Send(ctx context.Context, event string, body []byte) (deliveryID string, status int, err error) {
	deliveryID = newUUID()
	w.mu.Lock()
	if w.deliveries == nil {
		w.deliveries = map[string]sent{}
	}
	w.deliveries[deliveryID] = sent{event: event, body: slices.Clone(body)}
	w.mu.Unlock()
	status, err = w.post(ctx, deliveryID, event, body, false)
	return deliveryID, status, err
}

// Redeliver sends an earlier delivery again with the same delivery id and body, as GitHub's "Redeliver"
// does, signed with the current Secret.
func (w *WebhookSender) Redeliver(ctx context.Context, deliveryID string) (status int, err error) {
	w.mu.Lock()
	d, ok := w.deliveries[deliveryID]
	w.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("no delivery %q was sent by this sender", deliveryID)
	}
	return w.post(ctx, deliveryID, d.event, d.body, true)
}

func (w *WebhookSender) post(ctx context.Context, deliveryID, event string, body []byte, redelivery bool) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("building webhook request: %w", err)
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "GitHub-Hookshot/githubfake")
	h.Set("X-GitHub-Event", event)
	h.Set("X-GitHub-Delivery", deliveryID)
	h.Set("X-GitHub-Hook-ID", "1")
	h.Set("X-GitHub-Hook-Installation-Target-Type", "integration")
	h.Set("X-GitHub-Hook-Installation-Target-ID", "1")
	h.Set("X-Hub-Signature-256", Sign(w.Secret, body))
	if redelivery {
		h.Set("X-GitHub-Redelivery", "true") // not sent by GitHub; handy when debugging
	}
	c := w.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("delivering %s webhook %s: %w", event, deliveryID, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, nil
}

// newUUID returns a random RFC 4122 version 4 UUID, the shape of GitHub's delivery ids.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Payload shapes, as GitHub sends them (nullable fields are pointers so they appear as null).

type webhookPayload struct {
	Action       string            `json:"action"`
	WorkflowJob  workflowJob       `json:"workflow_job"`
	Repository   map[string]any    `json:"repository"`
	Organization *organizationJSON `json:"organization,omitempty"`
	Sender       accountJSON       `json:"sender"`
	Installation *installationRef  `json:"installation,omitempty"`
}

type installationRef struct {
	ID     int64  `json:"id"`
	NodeID string `json:"node_id"`
}

type workflowJob struct {
	ID              int64      `json:"id"`
	RunID           int64      `json:"run_id"`
	RunURL          string     `json:"run_url"`
	RunAttempt      int64      `json:"run_attempt"`
	NodeID          string     `json:"node_id"`
	HeadSHA         string     `json:"head_sha"`
	HeadBranch      string     `json:"head_branch"`
	URL             string     `json:"url"`
	HTMLURL         string     `json:"html_url"`
	Status          string     `json:"status"`
	Conclusion      *string    `json:"conclusion"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       time.Time  `json:"started_at"`
	CompletedAt     *time.Time `json:"completed_at"`
	Name            string     `json:"name"`
	Steps           []any      `json:"steps"`
	CheckRunURL     string     `json:"check_run_url"`
	Labels          []string   `json:"labels"`
	RunnerID        *int64     `json:"runner_id"`
	RunnerName      *string    `json:"runner_name"`
	RunnerGroupID   *int64     `json:"runner_group_id"`
	RunnerGroupName *string    `json:"runner_group_name"`
	WorkflowName    string     `json:"workflow_name"`
}

func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func workflowJobPayload(action string, ev WorkflowJobEvent) webhookPayload {
	wj := toWorkflowJob(ev, action)
	owner := account(ev.Owner, cmpOrInt(ev.OwnerID, 1), "Organization")
	org := organization(ev.Owner, cmpOrInt(ev.OwnerID, 1))
	p := webhookPayload{
		Action:       action,
		WorkflowJob:  wj,
		Repository:   webhookRepository(owner, ev.Repo, cmpOrInt(ev.RepoID, 1), true),
		Organization: &org,
		Sender:       account("octocat", 583231, "User"),
	}
	if ev.DefaultBranch != "" {
		p.Repository["default_branch"] = ev.DefaultBranch
	}
	if ev.InstallationID != 0 {
		p.Installation = &installationRef{ID: ev.InstallationID, NodeID: fmt.Sprintf("MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u%d", ev.InstallationID)}
	}
	return p
}

func cmpOrInt(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

func toWorkflowJob(ev WorkflowJobEvent, status string) workflowJob {
	if ev.Status != "" {
		status = ev.Status
	}
	created := ev.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	started := ev.StartedAt
	if started.IsZero() {
		started = created // GitHub sets started_at even on queued jobs
	}
	repoAPI := fmt.Sprintf("https://api.github.com/repos/%s/%s", ev.Owner, ev.Repo)
	wj := workflowJob{
		ID: ev.ID, RunID: ev.RunID, RunURL: fmt.Sprintf("%s/actions/runs/%d", repoAPI, ev.RunID),
		RunAttempt: cmpOrInt(ev.RunAttempt, 1), NodeID: fmt.Sprintf("CR_kwDOfake%d", ev.ID),
		HeadSHA: cmpOr(ev.HeadSHA, "0000000000000000000000000000000000000000"), HeadBranch: cmpOr(ev.HeadBranch, "main"),
		URL:     fmt.Sprintf("%s/actions/jobs/%d", repoAPI, ev.ID),
		HTMLURL: fmt.Sprintf("https://github.com/%s/%s/actions/runs/%d/job/%d", ev.Owner, ev.Repo, ev.RunID, ev.ID),
		Status:  status, Conclusion: nonZero(ev.Conclusion),
		CreatedAt: created.UTC().Truncate(time.Second), StartedAt: started.UTC().Truncate(time.Second),
		Name: cmpOr(ev.Name, "job"), Steps: []any{}, CheckRunURL: fmt.Sprintf("%s/check-runs/%d", repoAPI, ev.ID),
		Labels: append([]string{}, ev.Labels...), RunnerID: nonZero(ev.RunnerID), RunnerName: nonZero(ev.RunnerName),
		RunnerGroupID: nonZero(ev.RunnerGroupID), RunnerGroupName: nonZero(ev.RunnerGroupName),
		WorkflowName: cmpOr(ev.WorkflowName, "CI"),
	}
	if !ev.CompletedAt.IsZero() {
		c := ev.CompletedAt.UTC().Truncate(time.Second)
		wj.CompletedAt = &c
	}
	return wj
}

// WorkflowJobEvent returns the webhook event describing a job queued with QueueJob, in its current state,
// for tests that send webhooks themselves.
func (s *Server) WorkflowJobEvent(jobID int64) (WorkflowJobEvent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[jobID]
	if !ok {
		return WorkflowJobEvent{}, false
	}
	return s.eventLocked(j), true
}

func (s *Server) eventLocked(j *jobRec) WorkflowJobEvent {
	ev := WorkflowJobEvent{
		ID: j.ID, RunID: j.RunID, RunAttempt: j.RunAttempt, Name: j.Name, Labels: slices.Clone(j.Labels),
		Status: j.Status, Conclusion: j.Conclusion, RunnerID: j.RunnerID, RunnerName: j.RunnerName,
		RunnerGroupID: j.RunnerGroupID, CreatedAt: j.QueuedAt, StartedAt: j.StartedAt, CompletedAt: j.CompletedAt,
		Owner: j.repo.owner.login, OwnerID: j.repo.owner.id, Repo: j.repo.name, RepoID: j.repo.id,
		InstallationID: s.instByOwner[j.repo.owner.key],
	}
	if j.RunnerGroupID != 0 {
		ev.RunnerGroupName = "Default" // repository runners are all in Default
		for _, g := range s.groups[j.repo.owner.key] {
			if g.id == j.RunnerGroupID {
				ev.RunnerGroupName = g.name
			}
		}
	}
	return ev
}

// workflowJobJSON is a job as GET /repos/{owner}/{repo}/actions/jobs/{job_id} returns it.
func workflowJobJSON(j *jobRec) workflowJob {
	ev := WorkflowJobEvent{
		ID: j.ID, RunID: j.RunID, RunAttempt: j.RunAttempt, Name: j.Name, Labels: j.Labels, Conclusion: j.Conclusion,
		RunnerID: j.RunnerID, RunnerName: j.RunnerName, RunnerGroupID: j.RunnerGroupID, CreatedAt: j.QueuedAt,
		StartedAt: j.StartedAt, CompletedAt: j.CompletedAt, Owner: j.Owner, Repo: j.Repo,
	}
	return toWorkflowJob(ev, j.Status)
}

// emitLocked queues a webhook for the job's current state when Options.Webhook is set.
func (s *Server) emitLocked(j *jobRec, action string) {
	s.ssJobEventLocked(j, action) // scale set messages (actions_queue.go)
	if s.hooks != nil {
		s.hooks.enqueue(action, s.eventLocked(j))
	}
}

// webhookQueue delivers the Server's own workflow_job events in order, from one goroutine.
type webhookQueue struct {
	sender *WebhookSender
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu    sync.Mutex
	items []queuedHook
}

type queuedHook struct {
	action string
	ev     WorkflowJobEvent
}

func newWebhookQueue(sender *WebhookSender, log *slog.Logger) *webhookQueue {
	q := &webhookQueue{sender: sender, log: log, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	go q.run()
	return q
}

func (q *webhookQueue) enqueue(action string, ev WorkflowJobEvent) {
	q.mu.Lock()
	q.items = append(q.items, queuedHook{action, ev})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *webhookQueue) run() {
	defer close(q.done)
	for {
		select {
		case <-q.ctx.Done():
			return
		case <-q.wake:
		}
		for {
			q.mu.Lock()
			if len(q.items) == 0 {
				q.mu.Unlock()
				break
			}
			h := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			id, status, err := q.sender.SendWorkflowJob(q.ctx, h.action, h.ev)
			if err != nil || status/100 != 2 {
				q.log.Warn("githubfake: webhook delivery failed", "action", h.action, "job", h.ev.ID, "delivery", id, "status", status, "err", err)
			}
		}
	}
}

// close stops delivery; events not yet delivered are dropped.
func (q *webhookQueue) close() {
	q.cancel()
	<-q.done
}
