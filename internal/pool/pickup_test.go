// The pickup manager against fauxqs through the real SQS client: re-queue with delay, dropped
// messages, global and local exhaustion, concurrent workers, Return and Close.
package pool_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// testQueue creates a pool queue of its own on the shared fauxqs.
func testQueue(t *testing.T) (*pool.Queue, *sqs.Client) {
	t.Helper()
	client := stacktest.Shared(t).SQS()
	out, err := client.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	})
	return pool.NewQueue(client, aws.ToString(out.QueueUrl)), client
}

var quiet = slog.New(slog.DiscardHandler)

// msg is a valid pool message: on-demand c6i.large, 2 vCPU, 4 GiB, idle for an hour.
func msg(id string, edit ...func(*pool.Message)) pool.Message {
	m := pool.Message{
		InstanceID: id, UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096,
		ResourceClass: "medium", Scope: "acme/api", Threshold: time.Now().Add(time.Hour).UTC().Truncate(time.Second),
	}
	for _, e := range edit {
		e(&m)
	}
	return m
}

func put(t *testing.T, q *pool.Queue, ms ...pool.Message) {
	t.Helper()
	for _, m := range ms {
		if err := q.Put(t.Context(), m, 0); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
}

// drain receives and deletes everything visible now, returning the bodies.
func drain(t *testing.T, client *sqs.Client, q *pool.Queue) []string {
	t.Helper()
	var bodies []string
	for {
		out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL()), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(out.Messages) == 0 {
			sort.Strings(bodies)
			return bodies
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := client.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL()), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage: %v", err)
			}
		}
	}
}

func encode(t *testing.T, ms ...pool.Message) []string {
	t.Helper()
	var out []string
	for _, m := range ms {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// Misfits are handed back at once, so another request sees them while this one still holds its
// match; the match stays hidden until its claim decides, and Claimed deletes it.
func TestPickupHandsMisfitsBackAtOnce(t *testing.T) {
	t.Parallel()
	q, client := testQueue(t)
	match := msg("i-00000000000000001")
	spot := msg("i-00000000000000002", func(m *pool.Message) { m.UsageClass = "spot" })
	small := msg("i-00000000000000003", func(m *pool.Message) { m.CPU = 1 })
	put(t, q, spot, match, small)

	p := pool.NewPickup(q, pool.Filter{UsageClass: "on-demand", MinCPU: 2},
		pool.PickupOptions{VisibilityTimeout: time.Second, MaxMessages: 10, Logger: quiet})
	got, err := p.Next(t.Context())
	if err != nil || got.InstanceID != match.InstanceID {
		t.Fatalf("Next = %s, %v; want %s", got.InstanceID, err, match.InstanceID)
	}
	// Visible to everyone else at once, with their exact bodies; the held match is not.
	if now, want := drain(t, client, q), encode(t, spot, small); !slices.Equal(now, want) {
		t.Fatalf("visible while the match is held = %v, want the misfits %v", now, want)
	}
	p.Claimed(t.Context(), got)
	time.Sleep(1500 * time.Millisecond) // past the visibility timeout: a claimed match is gone for good
	if left := drain(t, client, q); len(left) != 0 {
		t.Errorf("claimed match came back: %v", left)
	}
	st := p.Stats()
	if st.Matched != 1 || st.Misfits != 2 || st.Received != 3 || st.Claimed != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// A process that dies holding a match loses nothing: the message reappears when its visibility
// timeout ends. Drop deletes a dead candidate's message for good.
func TestPickupHeldMessageReappearsAndDropDeletes(t *testing.T) {
	t.Parallel()
	q, client := testQueue(t)
	a, b := msg("i-00000000000000041"), msg("i-00000000000000042")
	put(t, q, a, b)
	var drops []string
	p := pool.NewPickup(q, pool.Filter{}, pool.PickupOptions{VisibilityTimeout: time.Second, MaxMessages: 1, Logger: quiet,
		OnDrop: func(reason string) { drops = append(drops, reason) }})
	first, err := p.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p.Drop(t.Context(), second, "record running")
	// first is never claimed, dropped or returned: the pickup "crashed".
	var back []string
	deadline := time.Now().Add(10 * time.Second)
	for len(back) == 0 && time.Now().Before(deadline) {
		back = drain(t, client, q)
		time.Sleep(200 * time.Millisecond)
	}
	if want := encode(t, first); !slices.Equal(back, want) {
		t.Errorf("after the visibility timeout the queue holds %v, want only the held match %v", back, want)
	}
	if st := p.Stats(); st.DroppedDead != 1 || !slices.Equal(drops, []string{pool.DropDead}) {
		t.Errorf("stats = %+v, drops %v", st, drops)
	}
}

func TestPickupDropsExpiredAndBadMessages(t *testing.T) {
	t.Parallel()
	q, client := testQueue(t)
	for _, body := range []string{
		`not json`,
		`{"instanceId":"i-00000000000000009","usageClass":"spot","instanceType":"c6i.large","cpu":2,"memoryMiB":1,"threshold":"2099-01-01T00:00:00Z","extra":1}`,
		`{"instanceId":"x-1","usageClass":"spot","instanceType":"c6i.large","threshold":"2099-01-01T00:00:00Z"}`,
	} {
		if _, err := client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL()), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	expired := msg("i-00000000000000004", func(m *pool.Message) { m.Threshold = time.Now().Add(-time.Minute) })
	good := msg("i-00000000000000005")
	put(t, q, expired, good)

	var drops []string
	p := pool.NewPickup(q, pool.Filter{}, pool.PickupOptions{Logger: quiet, OnDrop: func(r string) { drops = append(drops, r) }})
	got, err := p.Next(t.Context())
	if err != nil || got.InstanceID != good.InstanceID {
		t.Fatalf("Next = %s, %v; want %s", got.InstanceID, err, good.InstanceID)
	}
	if _, err := p.Next(t.Context()); !errors.Is(err, pool.ErrExhausted) {
		t.Fatalf("second Next: %v, want ErrExhausted", err)
	}
	p.Claimed(t.Context(), got)
	if left := drain(t, client, q); len(left) != 0 {
		t.Errorf("dropped messages came back: %v", left)
	}
	st := p.Stats()
	if st.DroppedBad != 3 || st.DroppedExpired != 1 || st.Dropped() != 4 || st.Misfits != 0 || st.Matched != 1 {
		t.Errorf("stats = %+v", st)
	}
	slices.Sort(drops)
	if want := []string{pool.DropExpired, pool.DropMalformed, pool.DropMalformed, pool.DropMalformed}; !slices.Equal(drops, want) {
		t.Errorf("OnDrop reasons %v, want %v", drops, want)
	}
}

func TestPickupGlobalExhaustion(t *testing.T) {
	t.Parallel()
	q, _ := testQueue(t)
	p := pool.NewPickup(q, pool.Filter{}, pool.PickupOptions{Logger: quiet})
	for range 3 {
		if _, err := p.Next(t.Context()); !errors.Is(err, pool.ErrExhausted) {
			t.Fatalf("Next on an empty pool: %v, want ErrExhausted", err)
		}
	}
	// Exhaustion is final for the request: the first empty answer asked again at once, then two
	// empty receives (the default EmptyReceives), not three per call.
	if st := p.Stats(); st.Exhausted != pool.ExhaustedGlobal || st.Receives != 3 {
		t.Errorf("stats = %+v, want global exhaustion after 3 receives", st)
	}
}

func TestPickupLocalExhaustion(t *testing.T) {
	t.Parallel()
	q, client := testQueue(t)
	a := msg("i-0000000000000000a", func(m *pool.Message) { m.UsageClass = "spot" })
	b := msg("i-0000000000000000b", func(m *pool.Message) { m.UsageClass = "spot" })
	put(t, q, a, b)

	// Misfits are handed back at once and come straight back: only the seen count ends the loop.
	p := pool.NewPickup(q, pool.Filter{UsageClass: "on-demand"}, pool.PickupOptions{MaxSeen: 3, Logger: quiet})
	if got, err := p.Next(t.Context()); !errors.Is(err, pool.ErrExhausted) {
		t.Fatalf("Next = %s, %v; want ErrExhausted", got.InstanceID, err)
	}
	st := p.Stats()
	if st.Exhausted != pool.ExhaustedLocal || st.Matched != 0 || st.Misfits != st.Received || st.Received < 3 || st.Received > 6 {
		t.Errorf("stats = %+v, want local exhaustion after 3-6 misfits, all handed back", st)
	}
	if left, want := drain(t, client, q), encode(t, a, b); !slices.Equal(left, want) {
		t.Errorf("pool after exhaustion = %v, want the two misfits %v", left, want)
	}
}

func TestPickupConcurrentWorkersNeverShareAMessage(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 10} {
		t.Run(fmt.Sprintf("MaxMessages=%d", batch), func(t *testing.T) {
			t.Parallel()
			q, _ := testQueue(t)
			var want []string
			for i := range 50 {
				m := msg(fmt.Sprintf("i-%017x", 0x1000+i))
				want = append(want, m.InstanceID)
				put(t, q, m)
			}
			p := pool.NewPickup(q, pool.Filter{}, pool.PickupOptions{MaxMessages: batch, EmptyReceives: 2, Logger: quiet})
			var mu sync.Mutex
			var got []string
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for {
						m, err := p.Next(t.Context())
						if errors.Is(err, pool.ErrExhausted) {
							return
						}
						if err != nil {
							t.Errorf("Next: %v", err)
							return
						}
						mu.Lock()
						got = append(got, m.InstanceID)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("handed out %d messages %v, want each of the 50 exactly once", len(got), got)
			}
			if st := p.Stats(); st.Matched != 50 || st.Duplicates != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestPickupReturnAndClose(t *testing.T) {
	t.Parallel()
	q, client := testQueue(t)
	ms := []pool.Message{msg("i-00000000000000021"), msg("i-00000000000000022"), msg("i-00000000000000023")}
	put(t, q, ms...)

	p := pool.NewPickup(q, pool.Filter{}, pool.PickupOptions{MaxMessages: 10, Logger: quiet})
	first, err := p.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A cancelled caller still gets its candidate back in the pool.
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Return(cancelled, first); err != nil {
		t.Fatalf("Return: %v", err)
	}
	// Close hands back what was received but never handed out, and ends the pickup.
	if err := p.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := p.Next(t.Context()); !errors.Is(err, pool.ErrExhausted) {
		t.Errorf("Next after Close: %v, want ErrExhausted", err)
	}
	var back []string
	deadline := time.Now().Add(10 * time.Second)
	for len(back) < 3 && time.Now().Before(deadline) {
		back = append(back, drain(t, client, q)...)
	}
	sort.Strings(back)
	if want := encode(t, ms...); !slices.Equal(back, want) {
		t.Errorf("pool after Return and Close = %v, want %v", back, want)
	}
}

// One worker's batch must reach the others: a worker whose receive comes back empty while
// another still sorts the batch it received waits for it instead of calling the pool exhausted.
func TestPickupEmptyReceiveWaitsForABatchInFlight(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			t.Parallel()
			q, _ := testQueue(t)
			put(t, q, msg("i-00000000000000031"), msg("i-00000000000000032"), msg("i-00000000000000033"))
			p := pool.NewPickup(q, pool.Filter{}, pool.PickupOptions{MaxMessages: 3, Logger: quiet})
			var got sync.Map
			var wg sync.WaitGroup
			for w := range 3 {
				wg.Go(func() {
					m, err := p.Next(t.Context())
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					got.Store(m.InstanceID, w)
				})
			}
			wg.Wait()
			n := 0
			got.Range(func(_, _ any) bool { n++; return true })
			if n != 3 {
				t.Errorf("%d distinct candidates handed to 3 workers, want 3 (stats %+v)", n, p.Stats())
			}
		})
	}
}

// A matching message the caller cannot use (a second message of an instance another worker of the
// request is deciding about) is handed back by Skip, visible at once, and counted like a misfit:
// a request that receives only such messages ends in local exhaustion instead of handing them back
// forever.
func TestPickupSkipCountsTowardsLocalExhaustion(t *testing.T) {
	t.Parallel()
	q, client := testQueue(t)
	a := msg("i-0000000000000000a")
	put(t, q, a)

	p := pool.NewPickup(q, pool.Filter{}, pool.PickupOptions{MaxSeen: 3, Logger: quiet})
	skips := 0
	for {
		m, err := p.Next(t.Context())
		if errors.Is(err, pool.ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if skips++; skips > 10 {
			t.Fatalf("still handing %s out after %d skips: no local exhaustion", m.InstanceID, skips)
		}
		p.Skip(t.Context(), m)
	}
	if st := p.Stats(); st.Exhausted != pool.ExhaustedLocal || skips != 3 || st.Duplicates != 3 {
		t.Errorf("after %d skips: stats = %+v, want local exhaustion after 3 skips counted as duplicates", skips, p.Stats())
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left, want := drain(t, client, q), encode(t, a); !slices.Equal(left, want) {
		t.Errorf("pool after the skips = %v, want the skipped message back %v", left, want)
	}
}
