package refresh_test

// Tests of the announcement rule: every poolable instance ends up with exactly one live pool
// message, whichever walker meets which copy, and whatever state (idle or ready) it is in.

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// steerSQS makes a walker's first receive return only the message first (the others it met are
// made visible again), and calls beforeSecond before its second receive: a test decides which walk
// meets which copy of a duplicate first.
type steerSQS struct {
	refresh.SQSAPI
	first        string
	beforeSecond func()
	mu           sync.Mutex
	n            int
}

func (s *steerSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	if n == 2 && s.beforeSecond != nil {
		s.beforeSecond()
	}
	if n != 1 {
		return s.SQSAPI.ReceiveMessage(ctx, in, o...)
	}
	for range 50 {
		out, err := s.SQSAPI.ReceiveMessage(ctx, in, o...)
		if err != nil {
			return out, err
		}
		var keep []types.Message
		for _, m := range out.Messages {
			if aws.ToString(m.MessageId) == s.first {
				keep = append(keep, m)
				continue
			}
			if err := pool.SetVisibilityBatch(ctx, s.SQSAPI, aws.ToString(in.QueueUrl), []string{aws.ToString(m.ReceiptHandle)}, 0).Err(); err != nil {
				return nil, err
			}
		}
		if len(keep) > 0 {
			out.Messages = keep
			return out, nil
		}
	}
	return &sqs.ReceiveMessageOutput{}, nil
}

// messageIDs lists the ids of the queue's messages (received with a long visibility: call last).
func (e *env) messageIDs(t *testing.T) []string {
	t.Helper()
	var ids []string
	for {
		got, err := e.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 30})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) == 0 {
			slices.Sort(ids)
			return ids
		}
		for _, m := range got.Messages {
			ids = append(ids, aws.ToString(m.MessageId))
		}
	}
}

// Two passes walk the queue at once (a replica took the lease over while the old leader's pass still
// runs), and the instance has two messages of one pooling: each walk meets a different copy first.
// Each used to keep the copy it met first and delete the other as a duplicate, leaving the instance
// with no message at all. Both keep the lowest message id: exactly one message is left, that one.
func TestRefreshOverlappingWalksKeepTheSameCopyOfADuplicate(t *testing.T) {
	t.Parallel()
	for _, oneMeetsLowest := range []bool{true, false} {
		t.Run(map[bool]string{true: "first walk meets the lower id", false: "first walk meets the higher id"}[oneMeetsLowest], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			id := e.launch(t, 1, deployment)[0]
			rec := e.pooledIdle(t, id, e.clock.Now().Add(time.Hour))
			body, err := claim.MessageOf(rec).Encode()
			if err != nil {
				t.Fatal(err)
			}
			out, err := e.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(e.queue.URL()), MessageBody: aws.String(body)})
			if err != nil {
				t.Fatal(err)
			}
			copies := []string{aws.ToString(out.MessageId)}
			// The first copy's id, as the queue reports it; both visible again for the walks.
			got, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 5})
			if err != nil {
				t.Fatal(err)
			}
			var receipts []string
			for _, m := range got.Messages {
				receipts = append(receipts, aws.ToString(m.ReceiptHandle))
				if mid := aws.ToString(m.MessageId); mid != copies[0] {
					copies = append(copies, mid)
				}
			}
			if err := pool.SetVisibilityBatch(ctx, e.sqs, e.queue.URL(), receipts, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if len(copies) != 2 {
				t.Fatalf("copies = %v, want two", copies)
			}
			slices.Sort(copies)
			first, second := copies[1], copies[0]
			if oneMeetsLowest {
				first, second = copies[0], copies[1]
			}
			firstMet, secondDone := make(chan struct{}), make(chan struct{})
			walker := func(meets string, before func()) *refresh.Refresher {
				opts := e.opts
				opts.SQS = &steerSQS{SQSAPI: e.sqs, first: meets, beforeSecond: before}
				return refresh.New(e.st, e.ec2, e.gh, pool.StaticResolver{"default": e.queue}, opts)
			}
			one := walker(first, func() {
				close(firstMet)
				select {
				case <-secondDone:
				case <-time.After(60 * time.Second):
					t.Error("the second walk never ended")
				}
			})
			two := walker(second, nil)
			done := make(chan error, 1)
			go func() {
				_, err := one.Run(ctx)
				done <- err
			}()
			<-firstMet
			_, err = two.Run(ctx)
			close(secondDone)
			if err != nil {
				t.Errorf("second pass: %v", err)
			}
			if err := <-done; err != nil {
				t.Errorf("first pass: %v", err)
			}
			if diff := cmp.Diff([]string{copies[0]}, e.messageIDs(t)); diff != "" {
				t.Errorf("messages left (-want +got):\n%s", diff)
			}
		})
	}
}

// A hot (ready) instance of a warm pool whose announcement was never sent (convergence's Put failed,
// or the message was lost) used to stay unannounced until replaced: only idle instances were pooled
// again. It is announced again, once two walks missed it, like an idle one.
func TestRefreshAnnouncesAReadyInstanceAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id := e.launch(t, 1, deployment)[0]
	hot := e.record(t, id, store.StateReady, e.clock.Now().Add(time.Hour)) // its Put failed
	r := e.poolRefresher()
	for pass, want := range []refresh.PoolReport{{Queues: 1, Missed: []string{id}}, {Queues: 1, Repooled: []string{id}}, {Queues: 1, Checked: 1, Kept: 1}} {
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if diff := cmp.Diff(want, rep.Pool); diff != "" {
			t.Errorf("pass %d (-want +got):\n%s", pass, diff)
		}
		e.clock.Advance(16 * time.Second)
	}
	e.wantOnlyMessage(t, id, hot.PooledAt)
}

// After a walk that found everything in order, a message goes missing while the queue's count still
// matches its pooled records: a stale message (a claim through the second look leaves the
// message it did not receive) or a duplicate makes up for it. The check used to trust equal counts
// for ten minutes and never looked; it walks every pass, drops the stale or duplicate message and,
// once a second walk further apart than the longest visibility timeout misses it too, announces
// the instance whose message was lost.
func TestRefreshCountsNeverHideAMissingMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// drift makes the other instance's message stale or doubled.
		drift func(t *testing.T, e *env, other store.Instance)
	}{
		{"a stale message", func(t *testing.T, e *env, other store.Instance) {
			if _, err := e.st.ClaimPooledAt(t.Context(), other.ID, "run-9", other.PooledAt, e.clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}},
		{"a duplicate", func(t *testing.T, e *env, other store.Instance) {
			if err := e.queue.Put(t.Context(), claim.MessageOf(other), 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			ids := e.launch(t, 2, deployment)
			lost := e.pooledIdle(t, ids[0], e.clock.Now().Add(time.Hour))
			other := e.pooledIdle(t, ids[1], e.clock.Now().Add(time.Hour))
			r := e.poolRefresher()
			if rep, err := r.Run(ctx); err != nil || rep.Pool.Kept != 2 {
				t.Fatalf("first pass: %+v, %v", rep.Pool, err)
			}
			e.takeMessage(t, lost.ID)
			tc.drift(t, e, other)
			for range 2 {
				e.clock.Advance(16 * time.Second) // past the longest visibility timeout
				if _, err := r.Run(ctx); err != nil {
					t.Fatal(err)
				}
			}
			got := e.pooledAt(t)
			if n := len(got[lost.ID]); n != 1 {
				t.Errorf("%d messages of the instance that lost its own; want 1 (all: %v)", n, got)
			}
			if rec, err := e.st.Get(ctx, other.ID); err == nil && rec.State == store.StateIdle {
				if n := len(got[other.ID]); n != 1 {
					t.Errorf("%d messages of the idle %s; want 1", n, other.ID)
				}
			} else if n := len(got[other.ID]); n != 0 {
				t.Errorf("%d messages of the claimed %s; want none", n, other.ID)
			}
		})
	}
}

// takeMessage deletes id's message from the queue, as a message taken by hand or lost with a
// deleted queue.
func (e *env) takeMessage(t *testing.T, id string) {
	t.Helper()
	for range 20 {
		got, err := e.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 5})
		if err != nil {
			t.Fatal(err)
		}
		var back []string
		found := false
		for _, m := range got.Messages {
			msg, err := pool.Decode(aws.ToString(m.Body))
			if err == nil && msg.InstanceID == id && !found {
				if _, err := e.sqs.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(e.queue.URL()), ReceiptHandle: m.ReceiptHandle}); err != nil {
					t.Fatal(err)
				}
				found = true
				continue
			}
			back = append(back, aws.ToString(m.ReceiptHandle))
		}
		if err := pool.SetVisibilityBatch(t.Context(), e.sqs, e.queue.URL(), back, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if found {
			return
		}
	}
	t.Fatalf("no message of %s found", id)
}
