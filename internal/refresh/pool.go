// Phase 5: the pool check. A pool message must stand for an idle instance the control plane marked
// pooled (DESIGN rule 3); one whose record is gone, no longer idle, not marked, past its threshold,
// malformed or a duplicate is dead and is deleted, so pickups stop paying for it. And every
// poolable instance (idle, or ready in a warm pool with a queue, marked pooled) has exactly one
// live message: its announcement.
//
// The check never hides the pool from provisions. SQS cannot be read without taking messages, so
// the walk receives a batch (held for VisibilityTimeout at most), judges each message against its
// record, deletes the dead ones and makes the batch's live ones visible again at once
// (ChangeMessageVisibility 0), before it receives the next: a live message is away for the
// milliseconds its batch is judged, not for the walk, and a pickup meanwhile finds the rest. A
// message received again is not judged again; the walk ends after receives that bring nothing new.
// A live message is never deleted unless another live message of the same pooling is kept: when
// its record cannot be read it is kept, and if making it visible fails it reappears by itself when
// the visibility timeout ends.
//
// Every queue is walked every pass. The queue's message count is never taken as proof of
// anything: a stale message (left by a claim through the idle index) and a missing one cancel
// out in a count, and so do a duplicate and a missing one.
//
// Duplicates (two live messages of one pooling) are resolved the same way by every walker: the
// message of the latest pooling is kept, and among those of one pooling the lowest message id. Two
// walks that overlap, each holding one copy while the other sees the other, therefore delete the
// same copy, never both. A kept message that a lower-id copy supersedes later in the walk is
// deleted when it comes round again (or by the next walk).
//
// Nothing is lost on a crash: an instance whose message is gone (a crash between its pool mark and
// its message, a failed send, a scope queue deleted while another replica sent to it, a message
// taken by hand) is pooled again. A walk does not see a message another reader holds (a pickup
// deciding about it, a crashed replica's receive until its visibility timeout ends), so one walk
// that misses a message proves nothing: the instance is pooled again only when two complete walks,
// further apart than the longest visibility timeout of any reader (LongestVisibility), both missed
// it. The first miss is recorded in the table (store.MissedSince), so the two walks may be of
// different replicas. Before it decides that a message is missing, a walk also confirms with a long
// poll (a short poll samples a subset of SQS's servers and may miss the last messages of a queue);
// the instance is pooled again only if a consistent read shows it still poolable and unchanged.
// No grace is counted on the record: a release or unclaim still putting its message is seen by the
// second walk, and the time a message may stay hidden is the readers' visibility timeout, not
// anything the record shows.

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

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// maxReceivesPerQueue bounds one queue's check (10 messages per receive): a pool larger than that is
// checked in part, the rest in later passes.
const maxReceivesPerQueue = 1000

func (r *Refresher) pool(ctx context.Context, p *pass) {
	r.retireOtherPostures(ctx, p)
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

// checkQueue walks q's queue at url (the class queue, or one of its scope queues). Its counts only
// say how many visible messages a whole walk must have seen, and whether an unexpected scope queue
// stayed empty long enough to be deleted.
func (r *Refresher) checkQueue(ctx context.Context, p *pass, q *pool.Queue, url string) {
	counts, err := r.counts(ctx, url)
	switch {
	case pool.IsQueueMissing(err):
		// A scope queue its pooled records expect, deleted or never created: nothing to walk, and
		// what lost its message is pooled again (which creates it). A missing queue is a complete
		// walk that saw nothing.
		r.repool(ctx, p, url, nil)
		return
	case err != nil:
		// Unknown: walk, as before the counts existed.
		r.log.WarnContext(ctx, "refresh: pool queue attributes not read; walking the queue", "queue", url, "error", err)
		counts.visible = -1
	case r.emptyFor(p, q, url, counts) >= r.opts.EmptyScopeQueueAge:
		r.deleteQueue(ctx, p, q, url)
		return
	}
	r.walk(ctx, p, q, url, counts.visible)
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

// retireOtherPostures expires every poolable record launched under another job access than its
// runner class has now (Options.JobAccess): a class changed from root to user must not hand out an
// instance whose user data gave jobs sudo (its drop-in, and whatever a root job left, stay on it).
// The walk then drops its message. A record that names no job access was written before launches
// recorded it (every launch records the class's, default spelled out): it may have been launched as
// root, so it is retired too, once, whatever its class says now (postureStale).
func (r *Refresher) retireOtherPostures(ctx context.Context, p *pass) {
	if r.opts.JobAccess == nil {
		return
	}
	var stale []store.Instance
	for _, rec := range p.live {
		now, ok := r.opts.JobAccess(rec.RunnerClass)
		if ok && poolable(rec, p.now) && postureStale(rec.JobAccess, now) {
			stale = append(stale, rec)
		}
	}
	forEach(r.opts.Concurrency, stale, func(rec store.Instance) {
		now, _ := r.opts.JobAccess(rec.RunnerClass)
		reason := fmt.Sprintf("launched with job access %q, its runner class's is %q now: never pooled again", rec.JobAccess, now)
		if rec.JobAccess == "" {
			reason = fmt.Sprintf("launched with an unrecorded job access (perhaps root), its runner class's is %q now: never pooled again", now)
		}
		if _, err := r.st.ExpireNoRun(ctx, rec.ID, reason); err != nil {
			if !errors.Is(err, store.ErrConflict) {
				p.fail(PhasePool, fmt.Errorf("expiring %s (%s): %w", rec.ID, reason, err))
			}
			return
		}
		r.log.InfoContext(ctx, "refresh: pooled instance of another posture expired", "instance", rec.ID, "reason", reason)
		p.update(func(rep *Report) { rep.Pool.OtherPosture = append(rep.Pool.OtherPosture, rec.ID) })
	})
	for _, rec := range stale {
		rec.Threshold = p.now // not poolable any more: its message is judged on a consistent read
		p.live[rec.ID] = rec
	}
}

// postureStale reports whether an instance launched under recorded (its record's job access) may
// not serve its runner class's posture now. An empty recorded is unknown, not the default: records
// written before launches recorded it include root ones, whose sudoers drop-in (and whatever a root
// job left) stays on the instance, and nothing tells them apart, so none serves again. Launches
// record the class's job access with its default spelled out (declared.NormalJobAccess).
func postureStale(recorded, now string) bool {
	return recorded == "" || declared.NormalJobAccess(recorded) != declared.NormalJobAccess(now)
}

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

// announcement is the live message kept for an instance: its id and the pooling it announces.
type announcement struct {
	id       string
	pooledAt int64 // Unix ms; 0: the message names none
}

// supersedes reports whether a is kept rather than b, two live messages of one instance: the
// later pooling's, and of one pooling the lowest message id. Every walker decides alike, so two
// overlapping walks delete the same copy of a duplicate, never both.
func (a announcement) supersedes(b announcement) bool {
	if a.pooledAt != b.pooledAt {
		return a.pooledAt > b.pooledAt
	}
	return a.id < b.id
}

// walkState is what one walk of a queue learnt so far.
type walkState struct {
	seen map[string]bool // message ids received and judged
	dead map[string]bool // of those, the ones judged dead or moved (a failed delete leaves them)
	// kept: the announcement kept for each instance with a live message; instanceOf: the instance
	// of every message judged live (a superseded one is deleted when it comes round again).
	kept       map[string]announcement
	instanceOf map[string]string
}

// walk judges every message of the queue, one batch at a time, and reports whether it read the
// whole queue (then it also pooled again what lost its message). visibleAtStart, when known (>= 0),
// is how many distinct messages a whole walk must have seen.
func (r *Refresher) walk(ctx context.Context, p *pass, q *pool.Queue, url string, visibleAtStart int) (complete bool) {
	vis := int32(min(max(math.Ceil(r.opts.VisibilityTimeout.Seconds()), 1), 43200))
	w := &walkState{seen: map[string]bool{}, dead: map[string]bool{}, kept: map[string]announcement{}, instanceOf: map[string]string{}}
	defer func() {
		p.update(func(rep *Report) { rep.Pool.Kept += len(w.kept) })
		if complete {
			r.repool(ctx, p, url, w.kept)
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
		fresh, again, superseded := w.sort(out.Messages)
		live := r.judgeBatch(ctx, p, q, url, fresh, w)
		r.release(ctx, url, append(again, live...))
		// Counted outside the report's lock: a failed delete reports its error under it.
		deleted := r.deleteMessages(ctx, p, url, superseded)
		p.update(func(rep *Report) {
			rep.Pool.Checked, rep.Pool.Dropped = rep.Pool.Checked+len(fresh), rep.Pool.Dropped+deleted
		})
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
		if wait == 0 && len(r.unpooled(p, url, w.kept)) > 0 {
			wait = 1
			continue
		}
		return visibleAtStart < 0 || len(w.seen) >= visibleAtStart
	}
	return false
}

// sort splits received messages into fresh ones (to judge), receipts of live ones judged before
// (visible again at once) and live ones judged before that a lower-id copy superseded since (to
// delete). Dead ones judged before are left alone: their delete failed, and they return.
func (w *walkState) sort(msgs []types.Message) (fresh []received, again []string, superseded []received) {
	for _, m := range msgs {
		id, receipt := aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle)
		switch inst, live := w.instanceOf[id]; {
		case !w.seen[id]:
			w.seen[id] = true
			fresh = append(fresh, received{id: id, receipt: receipt, body: aws.ToString(m.Body)})
		case w.dead[id]:
		case live && w.kept[inst].id != id:
			w.dead[id] = true
			superseded = append(superseded, received{id: id, receipt: receipt})
		default:
			again = append(again, receipt)
		}
	}
	return fresh, again, superseded
}

// judgeBatch judges fresh messages, deletes the dead ones and the duplicates, moves the live ones
// that belong in another of q's queues and returns the receipts of the live ones that stay.
func (r *Refresher) judgeBatch(ctx context.Context, p *pass, q *pool.Queue, url string, fresh []received, w *walkState) (live []string) {
	if len(fresh) == 0 {
		return nil
	}
	verdicts := r.judge(ctx, p, fresh)
	var drop, moved []received
	for i, m := range fresh {
		v := verdicts[i]
		if v.live && q.URLFor(v.msg.Scope) != url && r.move(ctx, q, url, v.msg) {
			w.dead[m.id] = true // gone from here: never released or judged again
			moved = append(moved, m)
			continue
		}
		if v.live {
			a := announcement{id: m.id, pooledAt: v.pooledAt}
			prev, ok := w.kept[v.instance]
			if !ok || a.supersedes(prev) {
				// Kept; a copy kept before is deleted when it comes round again.
				w.kept[v.instance] = a
				w.instanceOf[m.id] = v.instance
				live = append(live, m.receipt)
				continue
			}
			v.why = "duplicate message of " + v.instance + " (message " + prev.id + " is kept)"
		}
		r.log.InfoContext(ctx, "refresh: dropping pool message", "queue", url, "message", m.id, "reason", v.why)
		w.dead[m.id] = true
		drop = append(drop, m)
	}
	// Counted outside the report's lock: a failed delete reports its error under it.
	dropped, movedN := r.deleteMessages(ctx, p, url, drop), r.deleteMessages(ctx, p, url, moved)
	p.update(func(rep *Report) { rep.Pool.Dropped, rep.Pool.Moved = rep.Pool.Dropped+dropped, rep.Pool.Moved+movedN })
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

// unpooled lists the records the pass's listing shows poolable in this queue's runner class (idle,
// or ready in a warm pool) that have no live message among those the check kept.
func (r *Refresher) unpooled(p *pass, url string, kept map[string]announcement) []store.Instance {
	if r.resolver == nil {
		return nil
	}
	var out []store.Instance
	for _, rec := range r.pooledIn(p, url) {
		if _, ok := kept[rec.ID]; !ok {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b store.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// repool follows a complete walk: it pools again every poolable instance of this queue that has no
// message, once two complete walks further apart than LongestVisibility both missed it and a
// consistent read shows it still poolable and unchanged. It forgets the misses of
// instances whose message this walk saw.
func (r *Refresher) repool(ctx context.Context, p *pass, url string, kept map[string]announcement) {
	if ctx.Err() != nil || r.resolver == nil {
		return
	}
	r.forgetMisses(ctx, p, kept)
	cands := r.unpooled(p, url, kept)
	if len(cands) == 0 {
		return
	}
	forEach(r.opts.Concurrency, cands, func(listed store.Instance) {
		rec, err := r.st.Get(ctx, listed.ID)
		switch {
		case err != nil:
			if !errors.Is(err, store.ErrNotFound) {
				p.fail(PhasePool, fmt.Errorf("reading unpooled %s: %w", listed.ID, err))
			}
			return
		case rec.Version != listed.Version || !poolable(rec, p.now):
			return // changed since the listing: whoever changed it decides
		}
		if proven, err := r.missedTwice(ctx, rec, p.now); err != nil || !proven {
			if err != nil {
				p.fail(PhasePool, err)
			}
			p.update(func(rep *Report) { rep.Pool.Missed = append(rep.Pool.Missed, rec.ID) })
			return
		}
		if err := r.announce(ctx, rec); err != nil {
			p.fail(PhasePool, err)
			return
		}
		r.log.InfoContext(ctx, "refresh: pooled instance had no pool message in two walks; pooled again", "queue", url, "instance", rec.ID, "state", rec.State)
		p.update(func(rep *Report) { rep.Pool.Repooled = append(rep.Pool.Repooled, rec.ID) })
	})
}

// missedTwice records that a complete walk at now missed rec's message and reports whether an
// earlier complete walk, more than LongestVisibility before, missed it too (the message was then
// neither held by a reader at both walks nor sent late: it is gone). A miss older than
// MissWindow is of an earlier fault that a walk between must have seen resolved, and one recorded
// ahead of now by a replica whose clock runs ahead proves nothing: either starts afresh.
func (r *Refresher) missedTwice(ctx context.Context, rec store.Instance, now time.Time) (bool, error) {
	first, err := r.st.MissedSince(ctx, rec.ID, rec.PooledAt, now, r.opts.MissWindow)
	if err == nil && (now.Sub(first) > r.opts.MissWindow || first.Sub(now) > r.opts.LongestVisibility) {
		if err = r.st.ClearMissed(ctx, rec.ID, rec.PooledAt); err == nil {
			first, err = r.st.MissedSince(ctx, rec.ID, rec.PooledAt, now, r.opts.MissWindow)
		}
	}
	if err != nil {
		return false, fmt.Errorf("recording the missed message of %s: %w", rec.ID, err)
	}
	r.mu.Lock()
	if r.missed == nil {
		r.missed = map[string]time.Time{}
	}
	r.missed[rec.ID] = rec.PooledAt
	r.mu.Unlock()
	return now.Sub(first) > r.opts.LongestVisibility, nil
}

// forgetMisses clears the miss markers this refresher wrote for instances whose message was seen
// (a marker another replica wrote lapses after MissWindow).
func (r *Refresher) forgetMisses(ctx context.Context, p *pass, kept map[string]announcement) {
	r.mu.Lock()
	var clear []store.Instance
	for id, pooledAt := range r.missed {
		if _, ok := kept[id]; ok {
			clear = append(clear, store.Instance{ID: id, PooledAt: pooledAt})
			delete(r.missed, id)
		}
	}
	r.mu.Unlock()
	forEach(r.opts.Concurrency, clear, func(in store.Instance) {
		if err := r.st.ClearMissed(ctx, in.ID, in.PooledAt); err != nil {
			r.log.WarnContext(ctx, "refresh: miss marker not cleared; it lapses by itself", "instance", in.ID, "error", err)
		}
	})
}

// announce puts the pool message of a poolable record (its pooling's, so claims may act on it) and
// forgets its miss.
func (r *Refresher) announce(ctx context.Context, rec store.Instance) error {
	q, err := r.resolver.Queue(rec.RunnerClass)
	if err != nil {
		return fmt.Errorf("pooling %s again: %w", rec.ID, err)
	}
	m := pool.Message{
		InstanceID: rec.ID, UsageClass: rec.UsageClass, InstanceType: rec.InstanceType, CPU: rec.CPU,
		MemoryMiB: rec.MemoryMiB, ResourceClass: rec.ResourceClass, RunnerClass: rec.RunnerClass,
		Scope: rec.Scope, Zone: rec.Zone, Threshold: rec.Threshold, PooledAt: rec.PooledAt,
	}
	if err := q.Put(ctx, m, 0); err != nil {
		return fmt.Errorf("pooling %s again: %w", rec.ID, err)
	}
	if err := r.st.ClearMissed(ctx, rec.ID, rec.PooledAt); err != nil {
		r.log.WarnContext(ctx, "refresh: miss marker not cleared; it lapses by itself", "instance", rec.ID, "error", err)
	}
	r.mu.Lock()
	delete(r.missed, rec.ID)
	r.mu.Unlock()
	return nil
}
