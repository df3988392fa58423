// The pickup manager: one per provision request, shared by that request's claim workers. It
// short-polls the pool queue, deletes every message it receives at once (so no other pickup
// manager contends for it; from then on the message lives only in this process until it is handed
// on or put back), filters in memory, hands matches to workers and puts misfits back with a short
// delay so no pickup manager hot-loops on them.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// ErrExhausted says the pool has no (more) candidate for this request. Selection is over for it and
// creation makes up the difference.
var ErrExhausted = errors.New("pool exhausted")

// ExhaustReason says why a pickup stopped handing out candidates.
type ExhaustReason string

const (
	// ExhaustedGlobal: a receive returned no message (the queue is empty, or holds only delayed
	// or in-flight messages).
	ExhaustedGlobal ExhaustReason = "global"
	// ExhaustedLocal: the same instance came round MaxSeen times: the queue holds only misfits
	// for this request, cycling through their re-queue delay.
	ExhaustedLocal ExhaustReason = "local"
	// ExhaustedClosed: Close was called.
	ExhaustedClosed ExhaustReason = "closed"
)

// pickupOpTimeout bounds the calls a pickup makes on behalf of a message it already deleted. They
// run detached from the caller's context: a cancelled request must not strand a deleted message
// between "deleted" and "put back".
const pickupOpTimeout = 10 * time.Second

// PickupOptions tunes a Pickup. Zero values take the defaults.
type PickupOptions struct {
	// MisfitDelay hides a re-queued misfit for this long (whole seconds, at most 15 min). Default
	// 3 s; negative: no delay.
	MisfitDelay time.Duration
	// MaxSeen: the pool is locally exhausted once the same instance was received this many times.
	// Default 5.
	MaxSeen int
	// MaxMessages caps MaxNumberOfMessages per receive (1-10). Default 1. A receive asks for as
	// many messages as callers are waiting (within the cap); matches beyond what they take wait
	// in memory until Next hands them on or Close puts them back.
	MaxMessages int
	// EmptyReceives is how many consecutive empty receives make the pool globally exhausted.
	// Default 1. Note that an SQS short poll samples a subset of the queue's servers, so on a
	// queue holding very few messages one empty answer does not prove the queue empty; 2 trades
	// one more round trip on the creation path for fewer needless launches.
	EmptyReceives int
	Now           func() time.Time
	Logger        *slog.Logger
}

// PickupStats counts what a pickup did.
type PickupStats struct {
	Receives       int // ReceiveMessage calls
	Received       int // messages received (each deleted at once)
	Matched        int // handed to a caller by Next
	Requeued       int // misfits put back with MisfitDelay
	Returned       int // put back without delay: by Return, and unclaimed matches by Close
	DroppedExpired int // threshold passed: deleted and not put back
	DroppedBad     int // undecodable or invalid body: deleted and not put back
	Duplicates     int // a message received again after it was handled (SQS delivers at least once)
	DeleteFailed   int // left in the queue; visible again after its visibility timeout
	RequeueFailed  int // deleted but could not be put back (logged with the body)
	Exhausted      ExhaustReason
}

// Dropped is the number of messages deliberately removed from the pool (expired or bad).
func (s PickupStats) Dropped() int { return s.DroppedExpired + s.DroppedBad }

// Pickup hands the candidates of one provision request to its claim workers. It is safe for
// concurrent use; no message is ever handed to two callers.
type Pickup struct {
	q    *Queue
	f    Filter
	opts PickupOptions
	log  *slog.Logger

	mu        sync.Mutex
	ready     []Message           // matches received, not yet handed out
	seen      map[string]int      // instance id -> times received
	handled   map[string]struct{} // SQS message ids already handled
	empties   int                 // consecutive empty receives
	empty     bool                // EmptyReceives reached; exhausted once no receive is in flight
	filling   int                 // receives in flight (and their messages being sorted)
	asked     int                 // messages those receives asked for
	waiting   int                 // callers inside Next
	changed   chan struct{}       // closed and replaced when a receive finishes
	exhausted ExhaustReason
	stats     PickupStats
}

// NewPickup returns the pickup manager of one request on queue q.
func NewPickup(q *Queue, f Filter, opts PickupOptions) *Pickup {
	if opts.MisfitDelay == 0 {
		opts.MisfitDelay = 3 * time.Second
	}
	if opts.MaxSeen <= 0 {
		opts.MaxSeen = 5
	}
	opts.MaxMessages = min(max(opts.MaxMessages, 1), 10)
	if opts.EmptyReceives <= 0 {
		opts.EmptyReceives = 1
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Pickup{
		q: q, f: f, opts: opts,
		log:     opts.Logger.With("queue", q.URL()),
		seen:    map[string]int{},
		handled: map[string]struct{}{},
		changed: make(chan struct{}),
	}
}

// Next returns a matching candidate, already deleted from the queue: the caller owns it and must
// claim it, Return it, or drop it. It returns ErrExhausted once the pool is exhausted for this
// request, and the receive error when SQS fails.
func (p *Pickup) Next(ctx context.Context) (Message, error) {
	p.mu.Lock()
	p.waiting++
	leave := func(m Message, err error) (Message, error) {
		p.waiting--
		p.mu.Unlock()
		return m, err
	}
	for {
		if len(p.ready) > 0 {
			m := p.ready[0]
			p.ready = p.ready[1:]
			p.stats.Matched++
			return leave(m, nil)
		}
		if p.exhausted != "" {
			return leave(Message{}, ErrExhausted)
		}
		if err := ctx.Err(); err != nil {
			return leave(Message{}, err)
		}
		// Ask SQS only for what the callers now waiting need beyond the receives in flight: a
		// message taken into memory is invisible to every other request until it is put back.
		need := p.waiting - p.asked
		if p.empty && p.filling == 0 {
			// The queue answered empty and no receive of this request is still sorting messages:
			// the pool is exhausted.
			p.exhausted = ExhaustedGlobal
			p.stats.Exhausted = ExhaustedGlobal
			continue
		}
		if p.empty || need <= 0 {
			// A receive in flight may still produce matches: wait for it.
			changed := p.changed
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-changed:
			}
			p.mu.Lock()
			continue
		}
		n := min(need, p.opts.MaxMessages)
		p.asked += n
		p.filling++
		p.mu.Unlock()
		got, err := p.fill(ctx, n)
		p.mu.Lock()
		p.asked -= n
		p.filling--
		if got > 0 {
			p.empties, p.empty = 0, false
		} else if err == nil {
			p.empties++
			p.empty = p.empties >= p.opts.EmptyReceives
		}
		close(p.changed)
		p.changed = make(chan struct{})
		if err != nil {
			return leave(Message{}, err)
		}
	}
}

// fill receives one batch and sorts it: matches to ready, misfits back to the queue. It returns
// how many messages the receive returned.
func (p *Pickup) fill(ctx context.Context, n int) (int, error) {
	out, err := p.q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(p.q.url),
		MaxNumberOfMessages: int32(n),
		WaitTimeSeconds:     0, // short poll: an empty pool must send the request to creation now
	})
	p.count(func(s *PickupStats) { s.Receives++ })
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("receiving from pool %s: %w", p.q.url, err)
	}
	// Deleted messages must reach their destination even if the caller gives up now.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pickupOpTimeout)
	defer cancel()
	for _, msg := range out.Messages {
		p.handle(dctx, msg)
	}
	return len(out.Messages), nil
}

// handle deletes one received message and decides its fate.
func (p *Pickup) handle(ctx context.Context, msg types.Message) {
	body := aws.ToString(msg.Body)
	if _, err := p.q.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl: aws.String(p.q.url), ReceiptHandle: msg.ReceiptHandle,
	}); err != nil {
		// The message stays in the queue and becomes visible again after its visibility timeout:
		// nothing is lost, but it is not ours to hand on.
		p.log.Warn("pool message not deleted; leaving it in the queue", "message_id", aws.ToString(msg.MessageId), "err", err)
		p.count(func(s *PickupStats) { s.DeleteFailed++ })
		return
	}

	p.mu.Lock()
	p.stats.Received++
	id := aws.ToString(msg.MessageId)
	if _, dup := p.handled[id]; dup && id != "" {
		p.stats.Duplicates++
		p.mu.Unlock()
		p.log.Info("duplicate pool message dropped", "message_id", id)
		return
	}
	p.handled[id] = struct{}{}
	p.mu.Unlock()

	m, err := Decode(body)
	if err != nil {
		p.log.Warn("bad pool message dropped", "message_id", id, "body", body, "err", err)
		p.count(func(s *PickupStats) { s.DroppedBad++ })
		return
	}
	if !p.opts.Now().Before(m.Threshold) {
		// The idle deadline passed: refresh terminates (or has terminated) the instance.
		p.log.Info("expired pool message dropped", "instance", m.InstanceID, "threshold", m.Threshold)
		p.count(func(s *PickupStats) { s.DroppedExpired++ })
		return
	}

	match := p.f.Matches(m)
	p.mu.Lock()
	p.seen[m.InstanceID]++
	if p.seen[m.InstanceID] >= p.opts.MaxSeen && p.exhausted == "" {
		p.exhausted = ExhaustedLocal
		p.stats.Exhausted = ExhaustedLocal
	}
	if match {
		p.ready = append(p.ready, m)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if err := p.send(ctx, m.InstanceID, body, p.opts.MisfitDelay); err != nil {
		p.log.Error("pool message lost: re-queue failed after delete; the idle instance will be terminated at its threshold",
			"instance", m.InstanceID, "body", body, "err", err)
		p.count(func(s *PickupStats) { s.RequeueFailed++ })
		return
	}
	p.count(func(s *PickupStats) { s.Requeued++ })
}

// Return puts an unused candidate back in the pool, visible at once. It runs detached from ctx's
// cancellation (a cancelled request is the usual reason to return a candidate). An expired
// candidate is dropped instead.
func (p *Pickup) Return(ctx context.Context, m Message) error {
	if !p.opts.Now().Before(m.Threshold) {
		p.log.Info("expired candidate dropped instead of returned", "instance", m.InstanceID, "threshold", m.Threshold)
		p.count(func(s *PickupStats) { s.DroppedExpired++ })
		return nil
	}
	body, err := m.Encode()
	if err != nil {
		return fmt.Errorf("returning %s to pool %s: %w", m.InstanceID, p.q.url, err)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pickupOpTimeout)
	defer cancel()
	if err := p.send(dctx, m.InstanceID, body, -1); err != nil {
		p.count(func(s *PickupStats) { s.RequeueFailed++ })
		return err
	}
	p.count(func(s *PickupStats) { s.Returned++ })
	return nil
}

// Close ends the pickup: later Next calls return ErrExhausted, and matches received but never
// handed out are put back in the pool. The caller of NewPickup must call it when done.
func (p *Pickup) Close(ctx context.Context) error {
	p.mu.Lock()
	left := p.ready
	p.ready = nil
	if p.exhausted == "" {
		p.exhausted = ExhaustedClosed
	}
	p.mu.Unlock()
	var errs []error
	for _, m := range left {
		errs = append(errs, p.Return(ctx, m))
	}
	return errors.Join(errs...)
}

// Stats returns a snapshot of the counters.
func (p *Pickup) Stats() PickupStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Pickup) count(f func(*PickupStats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// send re-queues a body this pickup deleted. If that fails the message is gone from the pool, so
// the error carries the body (misfits log it at error level, Return's caller gets it) and an
// operator can put it back by hand. Nothing runs forever because of it: the instance's record
// stays idle with its idle threshold, and refresh terminates it when that passes.
func (p *Pickup) send(ctx context.Context, instanceID, body string, delay time.Duration) error {
	_, err := p.q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(p.q.url), MessageBody: aws.String(body), DelaySeconds: delaySeconds(delay),
	})
	if err != nil {
		return fmt.Errorf("re-queueing %s in pool %s (message lost from the pool; body %s): %w", instanceID, p.q.url, body, err)
	}
	return nil
}

// delaySeconds turns a delay into SQS DelaySeconds: whole seconds, rounded up, 0-900.
func delaySeconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32(min(math.Ceil(d.Seconds()), 900))
}
