package refresh_test

import (
	"context"
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

// pooledIdle makes id an idle instance its release verified (signal, mark) and announces the
// pooling in the queue.
func (e *env) pooledIdle(t *testing.T, id string, threshold time.Time) store.Instance {
	t.Helper()
	e.record(t, id, store.StateIdle, threshold)
	return e.repool(t, id)
}

// repool marks the idle id pooled (a new pooling, one clock tick later) and puts its message.
func (e *env) repool(t *testing.T, id string) store.Instance {
	t.Helper()
	ctx := t.Context()
	e.clock.Advance(time.Second)
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
	return rec
}

// serveAndRelease is a run that claims id through its record (the second look: the message
// stays in the queue), runs and is released, verified, into the pool again.
func (e *env) serveAndRelease(t *testing.T, id string, pooled store.Instance) store.Instance {
	t.Helper()
	ctx := t.Context()
	future := e.clock.Now().Add(time.Hour)
	if _, err := e.st.ClaimPooledAt(ctx, id, "run-2", pooled.PooledAt, future); err != nil {
		t.Fatal(err)
	}
	empty := ""
	for _, c := range []store.Change{
		{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: "run-2", Threshold: future},
		{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "run-2", SetRunID: &empty, Threshold: future},
	} {
		if _, err := e.st.Transition(ctx, id, c); err != nil {
			t.Fatal(err)
		}
	}
	return e.repool(t, id)
}

// poolRefresher is a refresher whose pool check covers the env's queue as the class "default"'s.
func (e *env) poolRefresher() *refresh.Refresher {
	return refresh.New(e.st, e.ec2, e.gh, pool.StaticResolver{"default": e.queue}, e.opts)
}

// wantOnlyMessage fails unless the queue holds exactly one message, of id's pooling at pooledAt.
func (e *env) wantOnlyMessage(t *testing.T, id string, pooledAt time.Time) {
	t.Helper()
	if diff := cmp.Diff(map[string][]time.Time{id: {pooledAt.UTC()}}, e.pooledAt(t)); diff != "" {
		t.Errorf("messages by instance and pooling (-want +got):\n%s", diff)
	}
}

// pooledAt lists the pooling each message of the queue announces, by instance.
func (e *env) pooledAt(t *testing.T) map[string][]time.Time {
	t.Helper()
	out := map[string][]time.Time{}
	for {
		got, err := e.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 30})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) == 0 {
			return out
		}
		for _, m := range got.Messages {
			msg, err := pool.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatal(err)
			}
			out[msg.InstanceID] = append(out[msg.InstanceID], msg.PooledAt.UTC())
		}
	}
}

// A claim through the second look cannot delete the message it did not receive; the instance's
// next release puts a message of its own. Both name a live idle instance, but only the release's
// announces its current pooling: the check drops the other, whichever the queue returns first
// (it used to keep the first and drop the second as a duplicate, here the current one).
func TestRefreshDropsTheMessageOfAnEarlierPooling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id := e.launch(t, 1, deployment)[0]
	first := e.pooledIdle(t, id, e.clock.Now().Add(time.Hour))
	current := e.serveAndRelease(t, id, first)

	r := e.poolRefresher()
	rep, err := r.Run(ctx)
	if err != nil || rep.Pool.Dropped != 1 || rep.Pool.Kept != 1 {
		t.Fatalf("pass: %+v, %v; want the earlier pooling's message dropped, the current one kept", rep.Pool, err)
	}
	e.wantOnlyMessage(t, id, current.PooledAt)
}

// The check keeps a message live, visible again, and walks on. Meanwhile a provision claims the
// instance through it (deleting it) and the run releases it again with a new message: that
// message is the instance's only one, not a duplicate of the one kept earlier in the walk. (The
// check used to drop it, leaving an idle pooled instance with no message: invisible to every
// pickup until a walk pools it again, up to ten minutes later.)
func TestRefreshKeepsTheMessageOfALaterPooling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id := e.launch(t, 1, deployment)[0]
	first := e.pooledIdle(t, id, e.clock.Now().Add(time.Hour))

	var current store.Instance
	var served bool
	hs := &hookSQS{SQSAPI: e.sqs}
	hs.onReceive = func(n int) {
		if n != 2 || served {
			return
		}
		served = true
		// A pickup takes the message the walk judged and handed back, and claims through it.
		pk := pool.NewPickup(e.queue, pool.Filter{}, pool.PickupOptions{})
		m, err := pk.Next(ctx)
		if err != nil {
			t.Errorf("pickup during the walk: %v", err)
			return
		}
		if _, err := e.st.ClaimPooledAt(ctx, m.InstanceID, "run-2", m.PooledAt, e.clock.Now().Add(time.Hour)); err != nil {
			t.Errorf("claim during the walk: %v", err)
			return
		}
		pk.Claimed(ctx, m)
		_ = pk.Close(ctx)
		empty := ""
		for _, c := range []store.Change{
			{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: "run-2"},
			{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "run-2", SetRunID: &empty, Threshold: first.Threshold},
		} {
			if _, err := e.st.Transition(ctx, id, c); err != nil {
				t.Errorf("run during the walk: %v", err)
				return
			}
		}
		current = e.repool(t, id)
	}
	e.opts.SQS = hs
	r := e.poolRefresher()
	rep, err := r.Run(ctx)
	if err != nil || !served {
		t.Fatalf("pass: %+v, %v (served during the walk: %v)", rep.Pool, err, served)
	}
	if rep.Pool.Dropped != 0 {
		t.Errorf("pass dropped %d messages; want none (the instance's only message is live)", rep.Pool.Dropped)
	}
	e.wantOnlyMessage(t, id, current.PooledAt)
}

// A pickup holds an instance's message while it decides (a claim write, a misfit's hand-back), or
// a crashed replica received it and it stays hidden until its visibility timeout: the walk does not
// see it. One walk's miss proves nothing: the instance is not pooled again (it used to be, and the
// second message of the pooling was a duplicate until the next walk), and once the held message is
// back the next walk keeps it and forgets the miss.
func TestRefreshDoesNotPoolAgainWhatAPickupHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id := e.launch(t, 1, deployment)[0]
	rec := e.pooledIdle(t, id, e.clock.Now().Add(time.Hour))

	pk := pool.NewPickup(e.queue, pool.Filter{}, pool.PickupOptions{VisibilityTimeout: time.Minute})
	m, err := pk.Next(ctx)
	if err != nil || m.InstanceID != id {
		t.Fatalf("pickup: %+v, %v", m, err)
	}
	r := e.poolRefresher()
	rep, err := r.Run(ctx)
	if err != nil || len(rep.Pool.Repooled) != 0 || !cmp.Equal([]string{id}, rep.Pool.Missed) {
		t.Fatalf("pass: %+v, %v; want the held instance missed, not pooled again", rep.Pool, err)
	}
	if err := pk.Return(ctx, m); err != nil { // the pickup's claim failed for a reason of its own
		t.Fatal(err)
	}
	for pass := range 2 {
		e.clock.Advance(time.Minute)
		rep, err = r.Run(ctx)
		if err != nil || rep.Pool.Dropped != 0 || len(rep.Pool.Repooled) != 0 || len(rep.Pool.Missed) != 0 {
			t.Fatalf("pass %d after the hand-back: %+v, %v; want the message kept, nothing pooled again", pass, rep.Pool, err)
		}
	}
	e.wantOnlyMessage(t, id, rec.PooledAt)
}

// oneAtATime receives one message per call, so that a test decides which walk meets which message.
type oneAtATime struct{ refresh.SQSAPI }

func (o oneAtATime) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	cp := *in
	cp.MaxNumberOfMessages = 1
	return o.SQSAPI.ReceiveMessage(ctx, &cp, opts...)
}

// Two passes walk the queue at once (a replica took the lease over while the old leader's pass
// still runs): the first meets the message an earlier pooling left, the second the release's. Each
// used to keep the one it met first and drop the other as a duplicate, leaving the idle pooled
// instance with no message at all. The earlier pooling's message is dropped, the current one kept.
func TestRefreshPassesWalkingAtOnceKeepTheCurrentMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id := e.launch(t, 1, deployment)[0]
	first := e.pooledIdle(t, id, e.clock.Now().Add(time.Hour))
	current := e.serveAndRelease(t, id, first)

	firstMet, secondMet := make(chan struct{}), make(chan struct{})
	walker := func(onSecond func()) *refresh.Refresher {
		hs := &hookSQS{SQSAPI: oneAtATime{e.sqs}}
		hs.onReceive = func(n int) {
			if n == 2 {
				onSecond()
			}
		}
		opts := e.opts
		opts.SQS = hs
		return refresh.New(e.st, e.ec2, e.gh, pool.StaticResolver{"default": e.queue}, opts)
	}
	// The first walk judges the queue's first message, then waits for the second walk to judge
	// the next one.
	one := walker(func() {
		close(firstMet)
		select {
		case <-secondMet:
		case <-time.After(30 * time.Second):
			t.Error("the second walk never met its first message")
		}
	})
	two := walker(func() { close(secondMet) })
	done := make(chan error, 1)
	go func() {
		_, err := one.Run(ctx)
		done <- err
	}()
	select {
	case <-firstMet:
	case err := <-done:
		t.Fatalf("the first pass ended before its second receive: %v", err)
	}
	if _, err := two.Run(ctx); err != nil {
		t.Errorf("second pass: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("first pass: %v", err)
	}
	e.wantOnlyMessage(t, id, current.PooledAt)
}
