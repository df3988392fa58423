// The pickup manager: one per provision request, shared by that request's claim workers. It
// short-polls the pool queue (with scope queues: the queues of the scopes that cover the request,
// the repository's first, then its owner's; each until it answers empty or shows only misfits) and
// keeps every idle instance visible to every other request for as long as it can:
//
//   - a receive hides its messages only for a short visibility timeout (VisibilityTimeout), never
//     deletes them on receive;
//   - a misfit, and a match beyond what the workers wait for, is handed back at once
//     (ChangeMessageVisibility 0): visible again to every other request after one round trip;
//   - a match handed to a worker stays hidden until the worker's conditional claim decided: Claimed
//     deletes the message (the instance is the run's), Drop deletes a dead one (its record is gone or
//     no longer idle: DESIGN rule 3), Return makes it visible again.
//
// A crash anywhere loses nothing: a message this process held reappears when its visibility timeout
// ends. The conditional claim in the table stays the only arbiter of who gets an instance; a message
// only says where to look.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
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
	// ExhaustedGlobal: EmptyReceives receives in a row returned no message (the queue is empty, or
	// holds only messages other requests hold for the moment, or SQS's sampling answered empty);
	// with scope queues, from the last queue read (or it does not exist).
	ExhaustedGlobal ExhaustReason = "global"
	// ExhaustedLocal: the same instance came round MaxSeen times: the queue (the last one read)
	// holds only misfits for this request.
	ExhaustedLocal ExhaustReason = "local"
	// ExhaustedClosed: Close was called.
	ExhaustedClosed ExhaustReason = "closed"
)

// Reasons a pickup drops a message (deletes it for good), as passed to PickupOptions.OnDrop.
const (
	DropMalformed = "malformed" // undecodable or invalid body: a foreign or broken message
	DropExpired   = "expired"   // the message's idle threshold passed
	DropDead      = "dead"      // its record is gone, no longer idle, or claimed by another run
)

// pickupOpTimeout bounds the calls a pickup makes on behalf of a message it holds. They run
// detached from the caller's context: a cancelled request must still hand back what it holds.
const pickupOpTimeout = 10 * time.Second

// DefaultVisibilityTimeout is how long a received message stays hidden from other requests while
// this one decides about it: a claim is one conditional write, so a message is normally handed back
// or deleted within milliseconds; the timeout only matters when this process dies holding it.
const DefaultVisibilityTimeout = 15 * time.Second

// PickupOptions tunes a Pickup. Zero values take the defaults.
type PickupOptions struct {
	// VisibilityTimeout hides a received message from other requests until this one claims it,
	// drops it or hands it back (whole seconds, at least 1; default DefaultVisibilityTimeout).
	VisibilityTimeout time.Duration
	// MaxSeen: the pool is locally exhausted once the same instance was received this many times.
	// Default 5.
	MaxSeen int
	// MaxMessages is MaxNumberOfMessages per receive (1-10; default 10). Matches beyond what the
	// waiting workers take are handed back at once, so a large batch costs other requests one round
	// trip of visibility and finds the fitting instances among misfits in fewer receives.
	MaxMessages int
	// EmptyReceives is how many consecutive empty receives make the pool globally exhausted.
	// Default 2. An SQS short poll samples a subset of the queue's servers, so on a queue holding
	// very few messages one empty answer does not prove the queue empty; a second short poll costs
	// one round trip and spares most requests the caller's second look (claim.Request.SecondLook,
	// a read of the table's idle index), which covers the rest.
	// The first empty answer of a run of them is asked again at once and not counted: the next
	// short poll samples other servers, and most empty answers on a small queue are that sampling,
	// which no pause makes likelier to pass (a job waits out every pause).
	EmptyReceives int
	// The options above count per queue read: a request reads its scope queues one after another.
	// EmptyPause is the wait between two counted receives of a queue after an empty one, jittered
	// up to twice (default 20 ms; negative: none): long enough for what another request received
	// and does not need to be handed back, short enough not to delay a request the pool cannot
	// serve.
	EmptyPause time.Duration
	// OnDrop, when set, is called once for every message dropped, with its reason (DropMalformed,
	// DropExpired, DropDead): the reconciler counts them in its metrics.
	OnDrop func(reason string)
	Now    func() time.Time
	Logger *slog.Logger
}

// PickupStats counts what a pickup did.
type PickupStats struct {
	Receives       int // ReceiveMessage calls
	Received       int // messages received
	Matched        int // handed to a caller by Next
	Misfits        int // handed back at once: they do not fit the request
	Surplus        int // matches handed back at once: no worker was waiting for them
	Claimed        int // deleted after the worker's claim succeeded
	Returned       int // made visible again by Return, and unclaimed matches by Close
	DroppedExpired int // threshold passed: deleted
	DroppedBad     int // undecodable or invalid body: deleted
	DroppedDead    int // record gone or not idle: deleted by Drop
	Duplicates     int // a second message of an instance this pickup holds
	DeleteFailed   int // left in the queue; visible again after its visibility timeout
	HandBackFailed int // not made visible at once; visible again after its visibility timeout
	Exhausted      ExhaustReason
}

// Dropped is the number of messages deliberately removed from the pool (expired, bad or dead).
func (s PickupStats) Dropped() int { return s.DroppedExpired + s.DroppedBad + s.DroppedDead }

// held is a received message this pickup keeps hidden, and the queue it came from.
type held struct {
	id, receipt, url string
	src              int // index of the queue in Pickup.srcs
}

// Pickup hands the candidates of one provision request to its claim workers. It is safe for
// concurrent use; no message is handed to two callers of one pickup.
type Pickup struct {
	q    *Queue
	f    Filter
	opts PickupOptions
	log  *slog.Logger
	vis  int32
	srcs []string // the queues read, in order

	mu        sync.Mutex
	src       int             // the queue being read (index in srcs)
	ready     []Message       // matches received, not yet handed out
	holding   map[string]held // instance id -> the message held for it (ready or handed out)
	seen      map[string]int  // instance id -> times received
	empties   int             // consecutive empty receives of the queue being read, counted
	retried   bool            // the first empty answer of this run of them was asked again at once
	empty     bool            // EmptyReceives reached on the last queue; exhausted once no receive is in flight
	filling   int             // receives in flight (and their messages being sorted)
	asked     int             // matches the receives in flight may produce for waiting callers: their batch sizes
	waiting   int             // callers inside Next
	changed   chan struct{}   // closed and replaced when a receive finishes
	exhausted ExhaustReason
	stats     PickupStats
}

// NewPickup returns the pickup manager of one request on queue q.
func NewPickup(q *Queue, f Filter, opts PickupOptions) *Pickup {
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if opts.MaxSeen <= 0 {
		opts.MaxSeen = 5
	}
	if opts.MaxMessages == 0 {
		opts.MaxMessages = 10
	}
	opts.MaxMessages = min(max(opts.MaxMessages, 1), 10)
	if opts.EmptyPause == 0 {
		opts.EmptyPause = 20 * time.Millisecond
	}
	if opts.EmptyReceives <= 0 {
		opts.EmptyReceives = 2
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	srcs := q.readURLs(f.Scope)
	return &Pickup{
		q: q, f: f, opts: opts, srcs: srcs,
		log:     opts.Logger.With("queue", q.URL()),
		vis:     int32(min(max(math.Ceil(opts.VisibilityTimeout.Seconds()), 1), 43200)),
		holding: map[string]held{},
		seen:    map[string]int{},
		changed: make(chan struct{}),
		empty:   len(srcs) == 0, // every queue it would read is missing
	}
}

// Next returns a matching candidate. Its message stays hidden until the caller calls Claimed, Drop
// or Return for it (or its visibility timeout ends). It returns ErrExhausted once the pool is
// exhausted for this request, and the receive error when SQS fails.
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
		// Every match of the batch is kept while callers wait (sort), so the whole batch counts
		// as asked: a caller arriving while it is in flight waits for it rather than racing it
		// with a receive of its own, which finds the batch's messages hidden, answers empty and
		// pauses (EmptyPause) with a match ready for it.
		batch := batchFor(need, p.opts.MaxMessages)
		p.asked += batch
		p.filling++
		src := p.src
		p.mu.Unlock()
		got, missing, err := p.fill(ctx, src, need, batch)
		p.mu.Lock()
		p.asked -= batch
		p.filling--
		counted := p.received(src, got, missing, err)
		if counted && got == 0 && err == nil && !missing && !p.empty && p.src == src {
			// Another request's receive may hold this queue's messages for one round trip before
			// handing back what it does not need: ask again once that trip is likely over.
			p.mu.Unlock()
			pause(ctx, p.opts.EmptyPause)
			p.mu.Lock()
		}
		close(p.changed)
		p.changed = make(chan struct{})
		if err != nil {
			return leave(Message{}, err)
		}
	}
}

// received notes what a receive of queue src brought (p.mu is held): messages keep the pickup on
// that queue; EmptyReceives empty answers in a row (after the first, asked again at once and not
// counted), or a missing queue, move it to the next queue, and past the last one make it empty. A
// receive of a queue the pickup already left counts for nothing. counted reports an empty answer
// that counted: the next receive of the queue waits EmptyPause.
func (p *Pickup) received(src, got int, missing bool, err error) (counted bool) {
	switch {
	case src != p.src:
	case got > 0:
		p.empties, p.retried, p.empty = 0, false, false
	case missing:
		p.nextSource()
	case err == nil && !p.retried:
		p.retried = true
	case err == nil:
		if p.empties++; p.empties >= p.opts.EmptyReceives {
			p.nextSource()
		}
		return true
	}
	return false
}

// nextSource moves the pickup to the next queue it reads, or makes it empty after the last one.
// p.mu is held.
func (p *Pickup) nextSource() {
	if p.src+1 < len(p.srcs) {
		p.src++
		p.empties, p.retried = 0, false
		return
	}
	p.empty = true
}

// fill receives one batch (of at most batch messages) from queue src and sorts it: up to want
// matches to ready, and more while callers wait for them; everything else handed back or dropped.
// It returns how many messages the receive returned, or that the queue does not exist (a scope
// queue nothing was released into yet, or that refresh deleted).
func (p *Pickup) fill(ctx context.Context, src, want, batch int) (int, bool, error) {
	url := p.srcs[src]
	out, err := p.q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(url),
		MaxNumberOfMessages: int32(batch),
		VisibilityTimeout:   p.vis,
		WaitTimeSeconds:     0, // short poll: an empty pool must send the request on at once
	})
	p.count(func(s *PickupStats) { s.Receives++ })
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return 0, false, ctx.Err()
	case url != p.q.url && IsQueueMissing(err):
		p.q.scopes.markAbsent(url)
		return 0, true, nil
	default:
		return 0, false, fmt.Errorf("receiving from pool %s: %w", url, err)
	}
	// What this receive hides must be handed back or dropped even if the caller gives up now.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pickupOpTimeout)
	defer cancel()
	var back, drop []held
	for _, msg := range out.Messages {
		h := held{id: aws.ToString(msg.MessageId), receipt: aws.ToString(msg.ReceiptHandle), url: url, src: src}
		switch p.sort(msg, h, &want) {
		case fateBack:
			back = append(back, h)
		case fateDrop:
			drop = append(drop, h)
		}
	}
	p.handBack(dctx, back)
	for _, h := range drop {
		p.delete(dctx, h)
	}
	return len(out.Messages), false, nil
}

// batchFor is how many messages a receive for want matches asks for: a few more than it needs, so
// that misfits do not cost a receive each, but not a whole batch of 10 for a request of 1 or 2. In a
// burst every message a receive takes is hidden from the other requests for a round trip; 30
// requests of 2 each taking 10 hide a pool of 60 from one another, answer each other empty, and
// send most of the burst to the second look, where they race for the same records.
func batchFor(want, most int) int {
	return min(most, max(2*want, 4))
}

type fate int

const (
	fateKeep fate = iota // a match kept for a waiting worker
	fateBack             // handed back at once
	fateDrop             // deleted for good
)

// sort decides one received message's fate; a kept match goes to ready and is held as h.
func (p *Pickup) sort(msg types.Message, h held, want *int) fate {
	body, id := aws.ToString(msg.Body), h.id
	p.count(func(s *PickupStats) { s.Received++ })
	m, err := Decode(body)
	if err != nil {
		p.log.Warn("bad pool message dropped", "message_id", id, "body", truncate(body, 512), "err", err)
		p.count(func(s *PickupStats) { s.DroppedBad++ })
		p.dropped(DropMalformed)
		return fateDrop
	}
	if !p.opts.Now().Before(m.Threshold) {
		// The idle deadline passed: refresh terminates (or has terminated) the instance.
		p.log.Info("expired pool message dropped", "instance", m.InstanceID, "threshold", m.Threshold)
		p.count(func(s *PickupStats) { s.DroppedExpired++ })
		p.dropped(DropExpired)
		return fateDrop
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, dup := p.holding[m.InstanceID]
	match := p.f.Matches(m)
	if dup || !match {
		// Only what this request cannot use counts towards local exhaustion: a match handed back
		// as surplus may rightly come round again.
		p.sawUnusable(m.InstanceID, h.src)
	}
	switch {
	case dup:
		// A second message of an instance this request holds (a duplicate release, a message left
		// behind by a claim through the index): the one held decides; this one goes back.
		p.stats.Duplicates++
		return fateBack
	case !match:
		p.stats.Misfits++
		return fateBack
	case (*want <= 0 && len(p.ready) >= p.waiting) || p.exhausted == ExhaustedClosed:
		// Nobody waits for it: visible to other requests at once.
		p.stats.Surplus++
		return fateBack
	}
	*want--
	p.holding[m.InstanceID] = h
	p.ready = append(p.ready, m)
	return fateKeep
}

// sawUnusable counts one sighting, in queue src, of an instance this request cannot use; MaxSeen
// of them move the pickup to the next queue, or make the pool locally exhausted after the last
// one. p.mu is held.
func (p *Pickup) sawUnusable(instanceID string, src int) {
	p.seen[instanceID]++
	switch {
	case p.seen[instanceID] < p.opts.MaxSeen || p.exhausted != "" || src != p.src:
	case p.src+1 < len(p.srcs):
		p.nextSource()
	default:
		p.exhausted = ExhaustedLocal
		p.stats.Exhausted = ExhaustedLocal
	}
}

// Skip hands back, visible at once, a candidate the caller cannot use although it matched: a
// second message of an instance another worker of the same request is still deciding about. Like
// a misfit it counts towards local exhaustion, so a request that keeps receiving only such
// messages stops receiving instead of handing the same ones back forever.
func (p *Pickup) Skip(ctx context.Context, m Message) {
	h, ok := p.release(m.InstanceID)
	p.mu.Lock()
	if !ok {
		h.src = p.src
	}
	p.sawUnusable(m.InstanceID, h.src)
	p.stats.Duplicates++
	p.mu.Unlock()
	if !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pickupOpTimeout)
	defer cancel()
	p.handBack(dctx, []held{h})
}

// release forgets the message held for an instance and returns it.
func (p *Pickup) release(instanceID string) (held, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.holding[instanceID]
	delete(p.holding, instanceID)
	return h, ok
}

// Claimed deletes the message of a candidate whose conditional claim succeeded: from now on the
// record, not the queue, says where the instance is. A candidate this pickup does not hold (found
// through the table's index) has nothing to delete. A failed delete leaves a stale message that the
// next pickup or refresh drops.
func (p *Pickup) Claimed(ctx context.Context, m Message) {
	h, ok := p.release(m.InstanceID)
	if !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pickupOpTimeout)
	defer cancel()
	if p.delete(dctx, h) {
		p.count(func(s *PickupStats) { s.Claimed++ })
	}
}

// Drop deletes the message of a dead candidate: its record is gone, no longer idle, or claimed by
// another run (DESIGN rule 3: such a message is dropped, never claimed).
func (p *Pickup) Drop(ctx context.Context, m Message, why string) {
	h, ok := p.release(m.InstanceID)
	if !ok {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pickupOpTimeout)
	defer cancel()
	p.log.Info("dead pool message dropped", "instance", m.InstanceID, "reason", why)
	if p.delete(dctx, h) {
		p.count(func(s *PickupStats) { s.DroppedDead++ })
		p.dropped(DropDead)
	}
}

// Return hands an unused candidate back, visible at once. It runs detached from ctx's cancellation
// (a cancelled request is the usual reason to return a candidate). A candidate this pickup does not
// hold any more (or never held) is sent as a new message; an expired one is dropped instead.
func (p *Pickup) Return(ctx context.Context, m Message) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pickupOpTimeout)
	defer cancel()
	h, ok := p.release(m.InstanceID)
	if !p.opts.Now().Before(m.Threshold) {
		p.log.Info("expired candidate dropped instead of returned", "instance", m.InstanceID, "threshold", m.Threshold)
		if ok {
			p.delete(dctx, h)
		}
		p.count(func(s *PickupStats) { s.DroppedExpired++ })
		p.dropped(DropExpired)
		return nil
	}
	if ok {
		p.handBack(dctx, []held{h})
		p.count(func(s *PickupStats) { s.Returned++ })
		return nil
	}
	if err := p.q.Put(dctx, m, 0); err != nil {
		return fmt.Errorf("returning %s to pool %s: %w", m.InstanceID, p.q.URLFor(m.Scope), err)
	}
	p.count(func(s *PickupStats) { s.Returned++ })
	return nil
}

// Close ends the pickup: later Next calls return ErrExhausted, and matches received but never
// handed out are handed back. The caller of NewPickup must call it when done.
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

func (p *Pickup) dropped(reason string) {
	if p.opts.OnDrop != nil {
		p.opts.OnDrop(reason)
	}
}

// delete removes a held message for good. A failure leaves it in the queue, visible again after
// its visibility timeout: nothing is lost, and whoever sees it next judges it again.
func (p *Pickup) delete(ctx context.Context, h held) bool {
	if _, err := p.q.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl: aws.String(h.url), ReceiptHandle: aws.String(h.receipt),
	}); err != nil {
		p.log.Warn("pool message not deleted; it reappears after its visibility timeout", "message_id", h.id, "err", err)
		p.count(func(s *PickupStats) { s.DeleteFailed++ })
		return false
	}
	return true
}

// handBack makes held messages visible again at once (ChangeMessageVisibility 0), ten per call
// and queue. A failure only delays them: they reappear when their visibility timeout ends.
func (p *Pickup) handBack(ctx context.Context, hs []held) {
	byURL := map[string][]string{}
	for _, h := range hs {
		byURL[h.url] = append(byURL[h.url], h.receipt)
	}
	for url, receipts := range byURL {
		res := SetVisibilityBatch(ctx, p.q.api, url, receipts, 0)
		if res.Failed > 0 {
			p.log.Warn("pool messages not handed back at once; they reappear after their visibility timeout", "pool", url, "failed", res.Failed, "err", res.Err())
			p.count(func(s *PickupStats) { s.HandBackFailed += res.Failed })
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// pause waits d to 2d (jittered, so the requests of a burst do not ask again together), or until
// ctx ends; nothing for d <= 0.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d + rand.N(d))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
