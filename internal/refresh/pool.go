// Phase 5: the pool check. A pool message must stand for an idle instance the control plane marked
// pooled (DESIGN rule 3); one whose record is gone, no longer idle, not marked, past its threshold,
// malformed or a duplicate is dead and is deleted, so pickups stop paying for it.
//
// The check never hides the pool from provisions. It compares first: the queue's messages
// (GetQueueAttributes: visible, in flight and delayed) against the pooled records of the pass's
// listing whose runner class the queue serves. Equal counts need no walk, and nothing is received.
// A queue whose counts differ, and every queue at least every FullCheckEvery (a dead message and a
// lost one cancel out in the counts), is walked. SQS cannot be read without taking messages, so the
// walk receives a batch (held for VisibilityTimeout at most), judges each message against its
// record, deletes the dead ones and makes the batch's live ones visible again at once
// (ChangeMessageVisibility 0), before it receives the next: a live message is away for the
// milliseconds its batch is judged, not for the walk, and a pickup meanwhile finds the rest. A
// message received again is not judged again; the walk ends after receives that bring nothing new.
// A live message is never deleted: when its record cannot be read it is kept, and if making it
// visible fails it reappears by itself when the visibility timeout ends.
//
// Nothing is lost on a crash: an idle instance whose message is gone (a crash between an instance
// going idle and its message being put, or a message taken by hand) is pooled again, once a walk
// read the whole queue (at least the messages it counted visible when it began). Before it
// decides that a message is missing, the check confirms with a long poll (a short poll samples a
// subset of SQS's servers and may miss the last messages of a queue); it then re-reads the record
// and pools the instance only if it is still idle and unchanged, has been so for RepoolGrace (the
// release or unclaim that made it idle puts its own message within that time), and its agent's last
// word is the clean deregistration (DESIGN rule 3: never pool what the agent has not confirmed).

package refresh

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// maxReceivesPerQueue bounds one queue's check (10 messages per receive): a pool larger than that is
// checked in part, the rest in later passes.
const maxReceivesPerQueue = 1000

func (r *Refresher) pool(ctx context.Context, p *pass) {
	r.indexPooled(p)
	for _, q := range r.queues() {
		p.update(func(rep *Report) { rep.Pool.Queues++ })
		// The class queue first: what it moves to a scope queue is checked there in this pass.
		r.checkQueue(ctx, p, q, q.URL())
		if !q.Scoped() {
			continue
		}
		scoped, err := r.scopeQueues(ctx, p, q)
		if err != nil {
			p.fail(PhasePool, err)
		}
		p.update(func(rep *Report) { rep.Pool.Queues += len(scoped) })
		forEach(r.opts.Concurrency, scoped, func(url string) { r.checkQueue(ctx, p, q, url) })
	}
}

type received struct {
	id, receipt, body string
}

// checkQueue compares the count of q's queue at url (the class queue, or one of its scope queues)
// with its pooled records and walks it when they differ or a full check is due.
func (r *Refresher) checkQueue(ctx context.Context, p *pass, q *pool.Queue, url string) {
	counts, err := r.counts(ctx, url)
	switch {
	case pool.IsQueueMissing(err):
		// A scope queue its pooled records expect, deleted or never created: nothing to walk, and
		// what lost its message is pooled again (which creates it).
		r.repool(ctx, p, url, nil)
		return
	case err != nil:
		// Unknown: walk, as before the counts existed.
		r.log.WarnContext(ctx, "refresh: pool queue attributes not read; walking the queue", "queue", url, "error", err)
		counts.visible = -1
	case r.emptyFor(p, q, url, counts) >= r.opts.EmptyScopeQueueAge:
		r.deleteQueue(ctx, p, q, url)
		return
	case counts.total() == len(r.pooledIn(p, url)) && !r.fullCheckDue(url, p.now):
		p.update(func(rep *Report) { rep.Pool.Matched++ })
		return
	}
	if r.walk(ctx, p, q, url, counts.visible) {
		r.mu.Lock()
		if r.walked == nil {
			r.walked = map[string]time.Time{}
		}
		r.walked[url] = p.now
		r.mu.Unlock()
	}
}

// queueCounts are SQS's approximate message counts of a queue.
type queueCounts struct{ visible, inFlight, delayed int }

func (c queueCounts) total() int { return c.visible + c.inFlight + c.delayed }

func (r *Refresher) counts(ctx context.Context, url string) (queueCounts, error) {
	out, err := r.opts.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed},
	})
	if err != nil {
		return queueCounts{}, err
	}
	num := func(name types.QueueAttributeName) (int, error) {
		v, err := strconv.Atoi(out.Attributes[string(name)])
		if err != nil {
			return 0, fmt.Errorf("attribute %s = %q: %w", name, out.Attributes[string(name)], err)
		}
		return v, nil
	}
	var c queueCounts
	var errs [3]error
	c.visible, errs[0] = num(types.QueueAttributeNameApproximateNumberOfMessages)
	c.inFlight, errs[1] = num(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	c.delayed, errs[2] = num(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)
	return c, errors.Join(errs[:]...)
}

// pooledIn lists the records the pass's listing shows poolable (idle or ready, marked pooled) whose
// message belongs in the queue at url (target).
func (r *Refresher) pooledIn(p *pass, url string) []store.Instance { return p.pooled[url] }

// indexPooled sorts the pass's poolable records by the queue their message belongs in, once per
// pass: a pool with a queue per scope has as many queues as scopes.
func (r *Refresher) indexPooled(p *pass) {
	p.pooled = map[string][]store.Instance{}
	if r.resolver == nil {
		return
	}
	for _, rec := range p.live {
		if poolable(rec, p.now) {
			if url := r.target(rec); url != "" {
				p.pooled[url] = append(p.pooled[url], rec)
			}
		}
	}
}

// target is the URL of the queue the record's pool message belongs in: its runner class's queue
// for its scope ("" when the class has no queue).
func (r *Refresher) target(rec store.Instance) string {
	q, err := r.resolver.Queue(rec.RunnerClass)
	if err != nil {
		return ""
	}
	return q.URLFor(rec.Scope)
}

// fullCheckDue reports whether the queue was last walked to its end FullCheckEvery ago or more.
func (r *Refresher) fullCheckDue(url string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.walked[url]
	return !ok || !now.Before(last.Add(r.opts.FullCheckEvery))
}

// walk judges every message of the queue, one batch at a time, and reports whether it read the
// whole queue (then it also pooled again what lost its message). visibleAtStart, when known (>= 0),
// is how many distinct messages a whole walk must have seen.
func (r *Refresher) walk(ctx context.Context, p *pass, q *pool.Queue, url string, visibleAtStart int) (complete bool) {
	vis := int32(min(max(math.Ceil(r.opts.VisibilityTimeout.Seconds()), 1), 43200))
	seen := map[string]bool{} // message ids received and judged
	dead := map[string]bool{} // of those, the ones judged dead (a failed delete leaves them)
	// liveInstance: instances with a live message, and the pooling it announces (a second message
	// of that pooling is a duplicate; one of a later pooling is not).
	liveInstance := map[string]int64{}
	defer func() {
		p.update(func(rep *Report) { rep.Pool.Kept += len(liveInstance) })
		if complete {
			r.repool(ctx, p, url, liveInstance)
		}
	}()
	idle, wait := 0, int32(0)
	for range maxReceivesPerQueue {
		out, err := r.opts.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: vis,
			// A short poll, as pickups use, until a missing message is suspected: then a long poll,
			// which asks every server.
			WaitTimeSeconds: wait,
		})
		if err != nil {
			p.fail(PhasePool, fmt.Errorf("receiving from %s: %w", url, err))
			return false
		}
		var fresh []received
		var again []string // receipts of messages judged before: visible again at once
		for _, m := range out.Messages {
			id, receipt := aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle)
			if seen[id] {
				if !dead[id] {
					again = append(again, receipt)
				}
				continue
			}
			seen[id] = true
			fresh = append(fresh, received{id: id, receipt: receipt, body: aws.ToString(m.Body)})
		}
		live := r.judgeBatch(ctx, p, q, url, fresh, liveInstance, dead)
		r.release(ctx, url, append(again, live...))
		p.update(func(rep *Report) { rep.Pool.Checked += len(fresh) })
		// A short poll samples a subset of SQS's servers and may come back empty while messages
		// remain, and messages made visible again come back: stop after two receives in a row with
		// nothing new. What is missed is checked by a later pass (and pickups re-check every record
		// before a claim).
		if len(fresh) > 0 {
			idle = 0
			continue
		}
		if idle++; idle < 2 {
			continue
		}
		if wait == 0 && len(r.unpooled(p, url, liveInstance)) > 0 {
			wait = 1
			continue
		}
		return visibleAtStart < 0 || len(seen) >= visibleAtStart
	}
	return false
}

// judgeBatch judges fresh messages, deletes the dead ones, moves the live ones that belong in
// another of q's queues and returns the receipts of the live ones that stay.
func (r *Refresher) judgeBatch(ctx context.Context, p *pass, q *pool.Queue, url string, fresh []received, liveInstance map[string]int64, dead map[string]bool) (live []string) {
	if len(fresh) == 0 {
		return nil
	}
	verdicts := r.judge(ctx, p, fresh)
	var drop, moved []received
	for i, m := range fresh {
		v := verdicts[i]
		if v.live && q.URLFor(v.msg.Scope) != url && r.move(ctx, q, url, v.msg) {
			dead[m.id] = true // gone from here: never released or judged again
			moved = append(moved, m)
			continue
		}
		// Only a second message of the same pooling is a duplicate. The message kept earlier in the
		// walk is visible again and may be gone since (claimed), its instance pooled again with a
		// new message: that one is the instance's only message, never a duplicate.
		if prev, ok := liveInstance[v.instance]; v.live && (!ok || prev != v.pooledAt) {
			liveInstance[v.instance] = v.pooledAt // the pooling judged last is the current one
			live = append(live, m.receipt)
			continue
		}
		if v.live {
			v.why = "duplicate message of " + v.instance
		}
		r.log.InfoContext(ctx, "refresh: dropping pool message", "queue", url, "message", m.id, "reason", v.why)
		dead[m.id] = true
		drop = append(drop, m)
	}
	p.update(func(rep *Report) { rep.Pool.Dropped += r.deleteMessages(ctx, p, url, drop) })
	p.update(func(rep *Report) { rep.Pool.Moved += r.deleteMessages(ctx, p, url, moved) })
	return live
}

type verdict struct {
	live     bool
	instance string
	pooledAt int64 // the pooling the message announces (Unix ms; 0: it names none)
	why      string
	msg      pool.Message // decoded (zero when it is not)
}

// judge decides for each message whether it stands for a live idle instance: from the pass's
// listing when that says so, else from a consistent read of the record (reads run in parallel).
func (r *Refresher) judge(ctx context.Context, p *pass, msgs []received) []verdict {
	out := make([]verdict, len(msgs))
	idx := make([]int, len(msgs))
	for i := range idx {
		idx[i] = i
	}
	forEach(r.opts.Concurrency, idx, func(i int) {
		msg, err := pool.Decode(msgs[i].body)
		if err != nil {
			out[i] = verdict{why: err.Error()}
			return
		}
		v := verdict{instance: msg.InstanceID, pooledAt: msg.PooledAt.UnixMilli(), msg: msg}
		if msg.PooledAt.IsZero() {
			v.pooledAt = 0
		}
		if !p.now.Before(msg.Threshold) {
			v.why = "the message's threshold passed"
			out[i] = v
			return
		}
		// A message the pass's listing shows live is kept without a read: if the listing lags, the
		// message lives one more pass and a pickup's conditional claim rejects it. A drop is only
		// ever decided on a consistent read.
		if rec, ok := p.live[msg.InstanceID]; ok && poolable(rec, p.now) && msg.Announces(rec.PooledAt) {
			v.live = true
			out[i] = v
			return
		}
		rec, err := r.st.Get(ctx, msg.InstanceID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			v.why = "no record"
		case err != nil:
			// Cannot judge: keep it. Pickup re-checks the record before any claim.
			p.fail(PhasePool, fmt.Errorf("reading the record of pooled %s (message kept): %w", msg.InstanceID, err))
			v.live = true
		case poolable(rec, p.now) && msg.Announces(rec.PooledAt):
			v.live = true
		case poolable(rec, p.now):
			v.why = "a message of an earlier pooling (the instance was pooled again, with a message of its own)"
		case (rec.State == store.StateIdle || rec.State == store.StateReady) && rec.RunID == "" && !rec.Expired(p.now):
			v.why = "the record is " + string(rec.State) + " but not marked pooled (a message of an earlier pooling)"
		case (rec.State == store.StateIdle || rec.State == store.StateReady) && rec.RunID == "":
			v.why = "the record's " + string(rec.State) + " threshold passed"
		default:
			v.why = "the record is " + string(rec.State)
		}
		out[i] = v
	})
	return out
}

// poolable reports whether a record may stand behind a pool message: an idle (released, clean) or
// ready (hot warm-pool) instance with no run, a deadline ahead, and the control plane's pool mark
// (a message of an instance idle again but not verified clean yet is stale: no claim takes it,
// and the release that verifies it puts a message of its own).
func poolable(rec store.Instance, now time.Time) bool {
	return (rec.State == store.StateIdle || rec.State == store.StateReady) && rec.RunID == "" && !rec.Expired(now) &&
		!rec.PooledAt.IsZero()
}

// deleteMessages deletes msgs from the queue at url and returns how many it deleted.
func (r *Refresher) deleteMessages(ctx context.Context, p *pass, url string, msgs []received) int {
	if len(msgs) == 0 {
		return 0
	}
	receipts := make([]string, len(msgs))
	for i, m := range msgs {
		receipts[i] = m.receipt
	}
	res := pool.DeleteBatch(ctx, r.opts.SQS, url, receipts)
	for _, err := range res.Errs {
		p.fail(PhasePool, fmt.Errorf("deleting messages from %s (they return; next pass): %w", url, err))
	}
	return res.Succeeded
}

// release makes received live messages visible again. It runs even when ctx is done: held
// messages must not stay invisible longer than needed (they would reappear anyway when the
// timeout ends).
func (r *Refresher) release(ctx context.Context, url string, receipts []string) {
	if len(receipts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if res := pool.SetVisibilityBatch(ctx, r.opts.SQS, url, receipts, 0); res.Failed > 0 {
		r.log.WarnContext(ctx, "refresh: some live pool messages stay hidden until their visibility timeout ends", "queue", url, "failed", res.Failed, "error", res.Err())
	}
}

// unpooled lists the records the pass's listing shows poolable in this queue's runner class that
// have no live message among those the check kept.
func (r *Refresher) unpooled(p *pass, url string, live map[string]int64) []store.Instance {
	if r.resolver == nil {
		return nil
	}
	var out []store.Instance
	for _, rec := range r.pooledIn(p, url) {
		if _, ok := live[rec.ID]; !ok && rec.State == store.StateIdle {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b store.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// repool puts a message for every idle instance of this queue that has none, once a consistent
// read shows it still idle and unchanged for RepoolGrace, and its agent confirmed it clean.
func (r *Refresher) repool(ctx context.Context, p *pass, url string, live map[string]int64) {
	if ctx.Err() != nil || r.resolver == nil {
		return
	}
	// The walk does not see a message a pickup holds while it decides, nor one a crashed replica
	// received, hidden until its visibility timeout ends: such an instance is pooled again all the
	// same. Its second message is of the same pooling, and the next walk drops it as a duplicate;
	// waiting instead (pooling again only when the queue's counts fell short) left an instance
	// with no message when another instance's message in flight made up the count.
	cands := r.unpooled(p, url, live)
	if len(cands) == 0 {
		return
	}
	forEach(r.opts.Concurrency, cands, func(listed store.Instance) {
		rec, err := r.st.Get(ctx, listed.ID)
		switch {
		case err != nil:
			if !errors.Is(err, store.ErrNotFound) {
				p.fail(PhasePool, fmt.Errorf("reading unpooled idle %s: %w", listed.ID, err))
			}
			return
		case rec.Version != listed.Version || rec.State != store.StateIdle || !poolable(rec, p.now):
			return // changed since the listing: whoever changed it decides
		case p.now.Sub(rec.UpdatedAt) < r.opts.RepoolGrace:
			return // its release or unclaim may still be putting its message
		}
		if rec.PooledAt.IsZero() {
			// Never pooled by the control plane (its release or unclaim did not verify the hand-back,
			// whatever the agent wrote): never pooled here either; its idle threshold ends it.
			r.log.InfoContext(ctx, "refresh: idle instance without a pool message was never marked pooled; left to its threshold",
				"instance", rec.ID)
			return
		}
		q, err := r.resolver.Queue(rec.RunnerClass)
		if err != nil {
			return
		}
		m := pool.Message{
			InstanceID: rec.ID, UsageClass: rec.UsageClass, InstanceType: rec.InstanceType, CPU: rec.CPU,
			MemoryMiB: rec.MemoryMiB, ResourceClass: rec.ResourceClass, RunnerClass: rec.RunnerClass,
			Scope: rec.Scope, Zone: rec.Zone, Threshold: rec.Threshold, PooledAt: rec.PooledAt,
		}
		if err := q.Put(ctx, m, 0); err != nil {
			p.fail(PhasePool, fmt.Errorf("pooling idle %s again: %w", rec.ID, err))
			return
		}
		r.log.InfoContext(ctx, "refresh: idle instance had no pool message; pooled again", "queue", url, "instance", rec.ID)
		p.update(func(rep *Report) { rep.Pool.Repooled = append(rep.Pool.Repooled, rec.ID) })
	})
}
