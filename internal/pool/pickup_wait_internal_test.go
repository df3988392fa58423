// What a pickup's caller waits for after a receive that brought nothing for it: a claim worker that
// arrives while another worker's receive is in flight waits for that receive's batch rather than
// racing it with a receive of its own (which finds the batch's messages hidden); an empty answer of
// a short poll is asked again at once before any pause.
package pool

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// queueWith makes a queue of its own on the shared fauxqs holding a pool message of each id.
func queueWith(t *testing.T, ids ...string) (*sqs.Client, string) {
	t.Helper()
	client := stacktest.Shared(t).SQS()
	created, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: created.QueueUrl})
	})
	url := aws.ToString(created.QueueUrl)
	for _, id := range ids {
		m := Message{InstanceID: id, UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096,
			ResourceClass: "medium", Scope: "acme/api", Threshold: time.Now().Add(time.Hour).UTC().Truncate(time.Second)}
		if err := NewQueue(client, url).Put(t.Context(), m, 0); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	return client, url
}

// sampledOnce answers the first short poll empty without forwarding it, as SQS does when the
// servers it samples hold none of a small queue's messages
// (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html).
type sampledOnce struct {
	SQSAPI
	first sync.Once
}

func (s *sampledOnce) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	empty := false
	s.first.Do(func() { empty = true })
	if empty {
		return &sqs.ReceiveMessageOutput{}, nil
	}
	return s.SQSAPI.ReceiveMessage(ctx, in, opts...)
}

// TestPickupAsksAnEmptyAnswerAgainAtOnce fails on the code before: after a short poll answered
// empty by sampling, the request paused EmptyPause (here an hour) before asking again, with the
// queue's message there all along.
func TestPickupAsksAnEmptyAnswerAgainAtOnce(t *testing.T) {
	t.Parallel()
	client, url := queueWith(t, "i-00000000000000051")
	p := NewPickup(NewQueue(&sampledOnce{SQSAPI: client}, url), Filter{}, PickupOptions{EmptyPause: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m, err := p.Next(ctx)
	if err != nil || m.InstanceID != "i-00000000000000051" {
		t.Fatalf("Next = %q, %v; want the queue's message (stats %+v)", m.InstanceID, err, p.Stats())
	}
	if st := p.Stats(); st.Receives != 2 {
		t.Errorf("%d receives, want 2: the empty answer asked again once (stats %+v)", st.Receives, st)
	}
	p.Claimed(t.Context(), m)
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// gatedReceives holds the answer of the first ReceiveMessage, already applied by the queue (its
// messages hidden), until release is closed.
type gatedReceives struct {
	SQSAPI
	first    sync.Once
	received chan struct{}
	release  chan struct{}
}

func (g *gatedReceives) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := g.SQSAPI.ReceiveMessage(ctx, in, opts...)
	held := false
	g.first.Do(func() { held = true })
	if held {
		close(g.received)
		<-g.release
	}
	return out, err
}

// TestPickupSecondWorkerWaitsForTheBatchInFlight fails on the code before: the second worker of a
// request of 2 received on its own while the first worker's receive held both messages, got an
// empty answer and paused EmptyPause (here an hour) with a match ready for it.
func TestPickupSecondWorkerWaitsForTheBatchInFlight(t *testing.T) {
	t.Parallel()
	ids := []string{"i-00000000000000041", "i-00000000000000042"}
	client, url := queueWith(t, ids...)
	gate := &gatedReceives{SQSAPI: client, received: make(chan struct{}), release: make(chan struct{})}
	p := NewPickup(NewQueue(gate, url), Filter{}, PickupOptions{EmptyPause: time.Hour, Logger: slog.New(slog.DiscardHandler)})

	// The test's own bound: a worker stuck in the hour's pause fails here, not at the test timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	next := func(i int) {
		m, err := p.Next(ctx)
		got[i], errs[i] = m.InstanceID, err
	}
	wg.Go(func() { next(0) })
	<-gate.received // the first receive took both messages and has not answered yet
	wg.Go(func() { next(1) })
	for waiting := 0; waiting < 2; {
		p.mu.Lock()
		waiting = p.waiting
		p.mu.Unlock()
		if waiting < 2 {
			time.Sleep(time.Millisecond) // until the second worker is inside Next
		}
	}
	close(gate.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v (stats %+v)", i, err, p.Stats())
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("workers got %v, want one each of %v", got, ids)
	}
	if st := p.Stats(); st.Receives != 1 {
		t.Errorf("%d receives, want 1: the second worker waited for the first one's batch (stats %+v)", st.Receives, st)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}
