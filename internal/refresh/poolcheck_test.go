package refresh_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// hookSQS runs onReceive before each of the pool check's receives (with its number, from 1).
type hookSQS struct {
	refresh.SQSAPI
	mu        sync.Mutex
	receives  int
	onReceive func(n int)
}

func (h *hookSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	h.mu.Lock()
	h.receives++
	n, hook := h.receives, h.onReceive
	h.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return h.SQSAPI.ReceiveMessage(ctx, in, o...)
}

func (h *hookSQS) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.receives
	h.receives = 0
	return n
}

// The pool check never hides the pool from provisions: while a queue is walked (every pass: counts
// prove nothing), a provision's pickup finds the live messages of the batches already judged and is
// served from the pool.
func TestRefreshPoolCheckNeverHidesThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 3, deployment)
	future := e.clock.Now().Add(time.Hour)
	for _, id := range ids {
		e.record(t, id, store.StateIdle, future)
		if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalReleased, RunID: "77"}); err != nil {
			t.Fatal(err)
		}
		rec, err := e.st.MarkPooled(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.queue.Put(ctx, claim.MessageOf(rec), 0); err != nil {
			t.Fatal(err)
		}
	}
	hs := &hookSQS{SQSAPI: e.sqs}
	e.opts.SQS = hs
	r := e.poolRefresher()

	// Every pass reads the whole queue once.
	for pass := range 2 {
		rep, err := r.Run(ctx)
		if err != nil || rep.Pool.Kept != 3 || rep.Changed() || hs.count() == 0 {
			t.Fatalf("pass %d: %+v, %v; want the queue walked, 3 kept", pass, rep.Pool, err)
		}
	}

	// A dead message. A provision arriving while the walk is under way (before its second
	// receive) is served from the pool.
	dead := e.launch(t, 1, deployment)[0]
	e.record(t, dead, store.StateRunning, future)
	if err := e.queue.Put(ctx, pool.Message{InstanceID: dead, UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "default", Scope: scope, Threshold: future}, 0); err != nil {
		t.Fatal(err)
	}
	var served string
	var provErr error
	hs.onReceive = func(n int) {
		if n != 2 || served != "" {
			return
		}
		pk := pool.NewPickup(e.queue, pool.Filter{}, pool.PickupOptions{})
		defer func() { _ = pk.Close(context.WithoutCancel(ctx)) }()
		for {
			m, err := pk.Next(ctx)
			if err != nil {
				provErr = err
				return
			}
			if _, err := e.st.ClaimPooled(ctx, m.InstanceID, "run-during-refresh", future); err != nil {
				if errors.Is(err, store.ErrConflict) {
					pk.Drop(ctx, m, "not idle")
					continue
				}
				provErr = err
				return
			}
			pk.Claimed(ctx, m)
			served = m.InstanceID
			return
		}
	}
	rep, err := r.Run(ctx)
	if err != nil || rep.Pool.Dropped != 1 {
		t.Errorf("third pass: %+v, %v; want the queue walked and the dead message dropped", rep.Pool, err)
	}
	if served == "" || provErr != nil {
		t.Fatalf("a provision during the walk was not served from the pool: %v", provErr)
	}
	var want []string
	for _, id := range ids {
		if id != served {
			want = append(want, id)
		}
	}
	if diff := cmp.Diff(sorted(want), e.peek(t)); diff != "" {
		t.Errorf("messages after the walk (-want +got):\n%s", diff)
	}
}
