package refresh_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// pooledIn writes an idle record of id narrowed to scope, confirmed clean and marked pooled.
func (e *env) pooledIn(t *testing.T, id, scope string, threshold time.Time) store.Instance {
	t.Helper()
	ctx := t.Context()
	e.record(t, id, store.StateRunning, threshold)
	empty := ""
	if _, err := e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, SetRunID: &empty,
		Threshold: threshold, SetScope: scope, RunnerClass: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalReleased, RunID: "77"}); err != nil {
		t.Fatal(err)
	}
	rec, err := e.st.MarkPooled(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// peekURL lists the instance ids of the messages of the queue at url (visible again after).
func (e *env) peekURL(t *testing.T, url string) []string {
	t.Helper()
	saved := e.queue
	e.queue = pool.NewQueue(e.sqs, url)
	defer func() { e.queue = saved }()
	return e.peek(t)
}

// With a queue per scope, the pool check walks each queue against the pooled records whose scope
// puts their message there: it pools again a record whose message two walks missed (into its
// scope's queue), drops a duplicate, moves a message found in the class queue to its scope's, and deletes
// a scope queue that stayed empty for a day (on the injected clock).
func TestRefreshPoolCheckWithScopeQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	sq := pool.NewScopedQueue(e.sqs, e.queue.URL(), pool.ScopeOptions{Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		scoped, _ := pool.ListScopeQueues(context.Background(), e.sqs, sq.URL())
		for _, u := range scoped {
			_, _ = e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	e.opts.Queues = nil
	r := refresh.New(e.st, e.ec2, e.gh, pool.StaticResolver{"default": sq}, e.opts)
	const api, web = "acme/api", "acme/web"
	apiURL, webURL := sq.URLFor(api), sq.URLFor(web)
	ids := e.launch(t, 4, deployment)
	a1, a2, w1, w2 := ids[0], ids[1], ids[2], ids[3]
	future := e.clock.Now().Add(72 * time.Hour)
	recs := map[string]store.Instance{}
	for id, s := range map[string]string{a1: api, a2: api, w1: web, w2: web} {
		recs[id] = e.pooledIn(t, id, s, future)
	}
	for _, id := range []string{a1, a1, w1} { // a1 twice: a duplicate; a2 lost its message
		if err := sq.Put(ctx, claim.MessageOf(recs[id]), 0); err != nil {
			t.Fatal(err)
		}
	}
	// w2's message went to the class queue (before scope queues, or its queue would not take it).
	if err := e.queue.Put(ctx, claim.MessageOf(recs[w2]), 0); err != nil {
		t.Fatal(err)
	}

	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The class queue is checked first: the message moved from it is checked again in its scope queue.
	want := refresh.PoolReport{Queues: 3, Checked: 5, Dropped: 1, Kept: 3, Moved: 1, Missed: []string{a2}}
	if diff := cmp.Diff(want, rep.Pool); diff != "" {
		t.Errorf("first pass (-want +got):\n%s", diff)
	}
	// A second complete walk, further apart than the longest visibility timeout, misses a2 too.
	e.clock.Advance(31 * time.Second)
	rep, err = r.Run(ctx)
	want = refresh.PoolReport{Queues: 3, Checked: 3, Kept: 3, Repooled: []string{a2}}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff(want, rep.Pool); diff != "" {
		t.Errorf("second pass (-want +got):\n%s", diff)
	}
	for url, ids := range map[string][]string{apiURL: {a1, a2}, webURL: {w1, w2}, sq.URL(): nil} {
		if diff := cmp.Diff(sorted(ids), e.peekURL(t, url)); diff != "" {
			t.Errorf("messages of %s (-want +got):\n%s", url, diff)
		}
	}
	rep, err = r.Run(ctx)
	if err != nil || rep.Changed() || rep.Pool.Kept != 4 {
		t.Errorf("third pass = %+v, %v; want every message kept, nothing changed", rep.Pool, err)
	}

	// acme/web's instances are claimed: their messages are dead, dropped by the next pass; from
	// then on the queue is empty with no pooled record expecting it, and a day later it is deleted.
	for _, id := range []string{w1, w2} {
		if _, err := e.st.ClaimPooled(ctx, id, "run-2", future, store.StateIdle); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err = r.Run(ctx); err != nil || rep.Pool.Dropped != 2 {
		t.Fatalf("pass after the claims = %+v, %v; want 2 dead messages dropped", rep.Pool, err)
	}
	for _, step := range []struct {
		advance time.Duration
		deleted []string
	}{{0, nil}, {23 * time.Hour, nil}, {time.Hour, []string{webURL}}} {
		e.clock.Advance(step.advance)
		if rep, err = r.Run(ctx); err != nil || !cmp.Equal(step.deleted, rep.Pool.DeletedQueues) {
			t.Fatalf("pass after %s: %+v, %v; want deleted %v", step.advance, rep.Pool, err, step.deleted)
		}
	}
	left, err := pool.ListScopeQueues(ctx, e.sqs, sq.URL())
	if err != nil || !cmp.Equal(left, []string{apiURL}) {
		t.Errorf("scope queues left = %v, %v; want only %s", left, err, apiURL)
	}
	// A release into acme/web creates its queue again.
	m := claim.MessageOf(recs[w1])
	m.Threshold = e.clock.Now().Add(time.Hour)
	if err := sq.Put(ctx, m, 0); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{w1}, e.peekURL(t, webURL)); diff != "" {
		t.Errorf("recreated queue (-want +got):\n%s", diff)
	}
}
