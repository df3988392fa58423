// Warm pools through a replica: the GitHub webhook route, the pool job queue, the pool worker and
// the runner classes and warm pools the Terraform provider writes to the state table.
package service_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// hook is one webhook delivery to a replica.
type hook struct {
	delivery, event string
	body            []byte
	secret          string // signs the body; servicetest.WebhookSecret when empty
}

// queuedJob is a queued workflow_job payload of the environment's repository.
func queuedJob(jobID, runID int64, labels ...string) []byte {
	b, _ := json.Marshal(map[string]any{
		"action": "queued",
		"workflow_job": map[string]any{
			"id": jobID, "run_id": runID, "run_attempt": 1, "labels": labels, "status": "queued",
			"created_at": time.Now().UTC().Format(time.RFC3339), "runner_name": nil, "conclusion": nil,
		},
		"repository": map[string]any{"id": 4242, "full_name": servicetest.Repository},
	})
	return b
}

// deliver posts a webhook delivery to a replica and decodes the answer.
func deliver(t *testing.T, replicaURL string, h hook) (int, webhook.Response) {
	t.Helper()
	secret := h.secret
	if secret == "" {
		secret = servicetest.WebhookSecret
	}
	req, err := http.NewRequest(http.MethodPost, replicaURL+apiv1.PathWebhookGitHub, bytes.NewReader(h.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", h.event)
	req.Header.Set("X-GitHub-Delivery", h.delivery)
	req.Header.Set("X-Hub-Signature-256", githubfake.Sign(secret, h.body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("webhook delivery: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out webhook.Response
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("webhook answer %d %q: %v", resp.StatusCode, b, err)
	}
	return resp.StatusCode, out
}

// TestWebhookServesPoolJob: a signed queued workflow_job asking for pool=warm is routed to the job
// queue by the replica's webhook route and served by its pool worker from the warm pool's hot
// instance (a just-in-time runner in the GitHub fake, the instance claimed for the job); a job
// asking for a pool that is not configured has its run cancelled; a redelivery does nothing new; a
// bad signature is refused before anything is read.
func TestWebhookServesPoolJob(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	repo := declared.NewRepository(env.Store)
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	wp := declared.WarmPool{Name: "warm", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 1}}}
	if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	hot := env.Hot(t, rc, wp.Name, declared.SpecHash(rc, wp), 1)[0]
	r := env.Start(t, "a", map[string]string{"RUNNERPOOL_RUNNER_CLASSES_FILE": ""})

	// Served from the warm pool.
	const jobID, runID = 7001, 8001
	job := hook{delivery: "d-7001", event: "workflow_job", body: queuedJob(jobID, runID, "self-hosted", "pool=warm")}
	code, resp := deliver(t, r.URL, job)
	if code != http.StatusOK || resp.Result != webhook.ResultEnqueued || resp.Pool != "warm" || resp.Job != jobID {
		t.Fatalf("queued job: %d %+v, want 200 enqueued for pool warm", code, resp)
	}
	jobRun := warmpool.JobRunID(jobID)
	waitFor(t, 20*time.Second, "the hot instance claimed for the job and its JIT runner", func() bool {
		rec, err := env.Store.Get(ctx, hot)
		return err == nil && rec.RunID == jobRun && (rec.State == store.StateClaimed || rec.State == store.StateRunning) &&
			len(env.GitHub.Runners("acme", "api")) == 1
	})
	runners := env.GitHub.Runners("acme", "api")
	if rn := runners[0]; rn.Name != warmpool.RunnerName(hot) || !rn.JIT || !slices.Contains(rn.Labels, "pool=warm") {
		t.Errorf("runner %+v: want the JIT runner %s labelled pool=warm", rn, warmpool.RunnerName(hot))
	}
	waitFor(t, 10*time.Second, "the instance's agent to register for the job", func() bool {
		return slices.Contains(env.Registered(hot), jobRun)
	})

	// A redelivery of the same delivery: the job is served already, nothing is queued or claimed.
	code, resp = deliver(t, r.URL, job)
	if code != http.StatusOK || resp.Result != webhook.ResultDuplicate || !resp.Redelivery {
		t.Errorf("redelivery: %d %+v, want 200 duplicate redelivery", code, resp)
	}

	// A pool that is not configured: the run is cancelled, nothing is queued.
	code, resp = deliver(t, r.URL, hook{delivery: "d-7002", event: "workflow_job", body: queuedJob(7002, 8002, "pool=nope")})
	if code != http.StatusOK || resp.Result != webhook.ResultCancelled {
		t.Errorf("unknown pool: %d %+v, want 200 cancelled", code, resp)
	}
	if !slices.ContainsFunc(env.GitHub.CancelledRuns(), func(c githubfake.CancelledRun) bool { return c.RunID == 8002 && c.Repo == "api" }) {
		t.Errorf("cancelled runs %+v: want run 8002 of acme/api", env.GitHub.CancelledRuns())
	}

	// A bad signature: 401, and the job is not even recorded.
	code, _ = deliver(t, r.URL, hook{delivery: "d-7003", event: "workflow_job", body: queuedJob(7003, 8003, "pool=warm"), secret: "not-the-secret"})
	if code != http.StatusUnauthorized {
		t.Errorf("bad signature: %d, want 401", code)
	}
	if _, err := env.Store.GetRun(ctx, "pooljob:"+strconv.Itoa(7003)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("job of a badly signed delivery in the ledger: %v", err)
	}

	// Nothing new came of the redelivery or the refused deliveries: one runner, and one instance
	// for the job (none other claimed or launched for it).
	if n := len(env.GitHub.Runners("acme", "api")); n != 1 {
		t.Errorf("%d runners, want 1", n)
	}
	if recs, err := env.Store.ByRun(ctx, jobRun); err != nil || len(recs) != 1 || recs[0].ID != hot {
		t.Errorf("instances of %s: %v %v, want only %s", jobRun, recs, err, hot)
	}
	env.Audit(t)
}

// TestWebhookRouteOnlyWithWarmPools: without a pool job queue there is no webhook endpoint.
func TestWebhookRouteOnlyWithWarmPools(t *testing.T) {
	t.Parallel()
	env := servicetest.New(t, servicetest.Options{})
	r := env.Start(t, "a", nil)
	code, _ := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathWebhookGitHub, "", "{}")
	if code != http.StatusNotFound {
		t.Errorf("webhook without warm pools: %d, want 404", code)
	}
}
