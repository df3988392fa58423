// Fuzzing the webhook endpoint as GitHub (or anyone) reaches it: any body, event, delivery id and
// signature. With healthy dependencies (fakes here: the pool catalog, the job queue, GitHub and the
// delivery marker all answer) nothing a sender controls may produce a 5xx or a panic; an unsigned
// or wrongly signed delivery is refused with 401 before anything is read, and nothing is queued or
// cancelled for it. Seed corpus in testdata/fuzz/FuzzHandler.
//
//	go test -run '^$' -fuzz '^FuzzHandler$' -fuzztime 10s ./internal/webhook
package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const fuzzSecret = "fuzz-secret"

type fuzzDeps struct {
	mu        sync.Mutex
	enqueued  []warmpool.Job
	cancelled []string
	marked    map[string]bool
}

func (d *fuzzDeps) MarkOnce(_ context.Context, key string, _ time.Duration) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	first := !d.marked[key]
	d.marked[key] = true
	return first, nil
}

func (d *fuzzDeps) Known(_ context.Context, name string) (bool, error) {
	return name == "small" || name == webhook.DependabotPool, nil
}

func (d *fuzzDeps) Enqueue(_ context.Context, j warmpool.Job) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.enqueued = append(d.enqueued, j)
	return webhook.ResultEnqueued, nil
}

func (d *fuzzDeps) CancelRun(_ context.Context, repo string, _ int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelled = append(d.cancelled, repo)
	return nil
}

func (d *fuzzDeps) JobStatus(context.Context, string, int64) (string, error) { return "queued", nil }

func (d *fuzzDeps) reset() (enqueued, cancelled int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	enqueued, cancelled = len(d.enqueued), len(d.cancelled)
	d.enqueued, d.cancelled = d.enqueued[:0], d.cancelled[:0]
	return enqueued, cancelled
}

// FuzzHandler: signed says whether the body is signed with the secret (else sig is sent as is).
func FuzzHandler(f *testing.F) {
	deps := &fuzzDeps{marked: map[string]bool{}}
	h, err := webhook.New(webhook.Config{Secret: fuzzSecret, Deliveries: deps, Pools: deps, Jobs: deps, GitHub: deps, DependabotPool: webhook.DependabotPool,
		Logger: slog.New(slog.DiscardHandler), MaxBodyBytes: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, event, delivery string, signed bool, sig string) {
		deps.reset()
		req := httptest.NewRequest(http.MethodPost, "/v1/webhooks/github", bytes.NewReader(body))
		if signed {
			sig = githubfake.Sign(fuzzSecret, body)
		}
		req.Header.Set("X-Hub-Signature-256", sig)
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", delivery)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var resp webhook.Response
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("%d with a body that is not a JSON response: %q", rec.Code, rec.Body.Bytes())
		}
		enqueued, cancelled := deps.reset()
		switch {
		case rec.Code >= 500:
			t.Fatalf("event %q: %d %+v: a sender's input must never be a 5xx", event, rec.Code, resp)
		case rec.Code >= 400 && resp.Error == "":
			t.Fatalf("%d without an error message", rec.Code)
		case !signed && sig != githubfake.Sign(fuzzSecret, body) && rec.Code != http.StatusUnauthorized:
			t.Fatalf("a delivery without a valid signature answered %d %+v", rec.Code, resp)
		case rec.Code != http.StatusOK && enqueued+cancelled > 0:
			t.Fatalf("answered %d but queued %d jobs and cancelled %d runs", rec.Code, enqueued, cancelled)
		case rec.Code == http.StatusOK && resp.Result == webhook.ResultEnqueued && enqueued != 1:
			t.Fatalf("answered enqueued but queued %d jobs", enqueued)
		}
	})
}
