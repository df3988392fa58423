// The claim workers of one provision request: Count workers share one pickup manager; each turns
// candidates into a claimed, registered, healthy instance of the run, or ends empty when the pool is
// exhausted. Exclusive ownership rests on the store's conditional writes alone.
package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
)

// MaxCount bounds the runners of one request.
const MaxCount = 100

// PoolStates are the states of an instance a pool message may stand for, and so the states a claim
// of a pool candidate accepts: idle (released by a run) and ready (a hot warm-pool instance,
// announced in its runner class's pool when it finished warming up).
var PoolStates = []store.State{store.StateIdle, store.StateReady}

// Request is one provision request's selection.
type Request struct {
	RunID  string
	Scope  string   // "owner/repo" or "owner": what the runners register for
	Labels []string // runner labels, the run's unique label first; empty: just RunID
	Count  int      // runners wanted (1-MaxCount)
	Filter pool.Filter
	Queue  *pool.Queue
	// Pickup tunes the request's pickup manager (Now and Logger default to the Claimer's).
	Pickup pool.PickupOptions
	// Token is the run's shared registration token (Registrar.TokenFor on Scope); nil: ClaimN
	// makes one. A provision passes the one its created and started instances use as well, started
	// before selection so that no claim waits for GitHub.
	Token *TokenSource
	// SecondLook, when set, lists candidates through the table's idle index once the pool queue is
	// exhausted for the request: what an empty short poll (SQS samples a subset of its servers), a
	// message another request holds for the moment, or a lost message hid. They are claimed with the
	// same conditional write, which requires the control plane's pool mark: the index also lists an
	// instance a release made idle but has not verified yet (DESIGN rule 3: not in the pool), and
	// that claim fails. Their messages stay in the queue, stale, for the next pickup or refresh to
	// drop.
	SecondLook func(ctx context.Context) ([]pool.Message, error)
}

// Claimed is an instance claimed for the run. It stays in state claimed: the caller moves it to
// running (Promote) or back to the pool (Unclaim).
type Claimed struct {
	Instance store.Instance // the record as claimed
	Message  pool.Message   // the pool message it came from (Unclaim puts it back)
	Waited   time.Duration  // from the claim write to verified registration
	// Verifying is the part of Waited spent in WaitRegistered: the agent's share (noticing the
	// claim, registering at GitHub) plus the polling granularity.
	Verifying time.Duration
	// Verified: registration and heartbeat passed. Always true when ClaimN returns no error; false
	// for an instance claimed when ClaimN's context ended before it was verified.
	Verified bool
	// Scope is the GitHub scope the claim registers its runner in (the claim request's): Unclaim
	// removes the runner from there. A hot warm-pool instance's record names its pool's owner while
	// its runner registers for the run's repository. Empty: the record's scope.
	Scope string
	// NotIssued: the claim's registration credential was never written (the mint failed), so no
	// runner of the run can exist and Unclaim needs no deregistration.
	NotIssued bool
}

// regScope is the scope the claim's runner registers in, and is removed from.
func (cl Claimed) regScope() string {
	if cl.Scope != "" {
		return cl.Scope
	}
	return cl.Instance.Scope
}

// Discard is a claimed instance that failed its checks (or could not be handed back) and was
// discarded: expired, terminated, record terminated.
type Discard struct {
	InstanceID string
	Reason     string
	// Err is set when discarding itself failed part-way. The record was expired first, so refresh
	// (and the instance's own threshold check) finish the job.
	Err error
}

// Result is what ClaimN did. It is complete and accurate even when ClaimN returns an error.
type Result struct {
	Claimed   []Claimed
	Discarded []Discard
	Lost      int // candidates whose record was gone or not idle (another run won): dropped
	Stats     pool.PickupStats
	// SecondLook counts the candidates the second look listed (0 when it did not run or found
	// none) and Indexed the instances claimed through it.
	SecondLook, Indexed int
}

// Claimer runs claim workers.
type Claimer struct {
	st   Store
	reg  *Registrar
	opts Options
	log  *slog.Logger
}

// NewClaimer returns a Claimer.
func NewClaimer(st Store, reg *Registrar, opts Options) *Claimer {
	opts = opts.withDefaults()
	return &Claimer{st: st, reg: reg, opts: opts, log: opts.Logger}
}

func (req Request) validate() error {
	switch {
	case req.RunID == "":
		return errors.New("claiming: run id is empty")
	case req.Scope == "":
		return errors.New("claiming: scope is empty")
	case req.Count < 1 || req.Count > MaxCount:
		return fmt.Errorf("claiming: count %d is not between 1 and %d", req.Count, MaxCount)
	case req.Queue == nil:
		return errors.New("claiming: no pool queue")
	}
	return nil
}

// ClaimN claims up to req.Count instances for req.RunID from the pool, in parallel. Fewer than
// Count with a nil error means the pool was exhausted: creation makes up the difference.
//
// When ctx ends, or a worker meets an error the pool, the store or GitHub cause (not the
// instance), ClaimN returns that error together with everything claimed so far, verified or not:
// no instance is left claimed for the run without being in the Result. The caller rolls back.
func (c *Claimer) ClaimN(ctx context.Context, req Request) (Result, error) {
	if err := req.validate(); err != nil {
		return Result{}, err
	}
	popts := req.Pickup
	if popts.Now == nil {
		popts.Now = c.opts.Now
	}
	if popts.Logger == nil {
		popts.Logger = c.log
	}
	p := pool.NewPickup(req.Queue, req.Filter, popts)
	if req.Token == nil {
		req.Token = c.reg.TokenFor(req.Scope) // minted at the first claim, then shared
	}
	log := c.log.With("run", req.RunID, "queue", req.Queue.URL())

	col := &collector{owned: map[string]ownership{}, dead: map[string]int64{}, second: req.SecondLook}
	var wg sync.WaitGroup
	for range req.Count {
		wg.Go(func() { c.work(ctx, req, p, col, log) })
	}
	wg.Wait()
	col.deletes.Wait()

	// Matches received but never handed out go back to the pool.
	dctx, cancel := detached(ctx)
	defer cancel()
	if err := p.Close(dctx); err != nil {
		col.fail(fmt.Errorf("returning unused candidates: %w", err))
	}
	res := col.res
	res.Stats = p.Stats()
	res.SecondLook = col.looked
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("claiming for run %s: %w", req.RunID, err)
	}
	if len(col.errs) > 0 {
		return res, fmt.Errorf("claiming for run %s: %w", req.RunID, errors.Join(col.errs...))
	}
	return res, nil
}

// collector gathers the workers' results.
type collector struct {
	mu    sync.Mutex
	res   Result
	errs  []error
	owned map[string]ownership // instance ids a worker of this request handles or handled
	// dead are the instances of owned found dead (claimed by another run, gone, pooled again), with
	// the pooling the message that found it so announced: a message of another pooling is news.
	dead map[string]int64
	// deletes are the claimed candidates' message deletes, off the claim notice's path.
	deletes sync.WaitGroup

	second     func(ctx context.Context) ([]pool.Message, error)
	secondOnce sync.Once
	secondErr  error
	cands      []pool.Message // the second look's candidates not yet tried
	looked     int
	lostRun    int // second-look claims lost in a row since the last listing
	relists    int // listings after the first
}

// The second look lists its candidates once, when the queue has nothing more for the request. In
// a burst, the other requests' pickups claim many of those records meanwhile: after relistAfter
// claims lost in a row the candidates are listed again (at most maxRelists times), so that a late
// request tries what is still idle rather than losing a conditional write per request ahead of it.
const (
	relistAfter = 3
	maxRelists  = 2
)

// nextIndexed returns a candidate of the second look (listing it on first use), or false when
// there is none left.
func (col *collector) nextIndexed(ctx context.Context) (pool.Message, bool, error) {
	if col.second == nil {
		return pool.Message{}, false, nil
	}
	col.secondOnce.Do(func() { col.list(ctx) })
	relist := false
	col.lock(func() {
		if relist = col.secondErr == nil && col.lostRun >= relistAfter && col.relists < maxRelists; relist {
			col.relists++
			col.lostRun = 0
		}
	})
	if relist {
		col.list(ctx)
	}
	var m pool.Message
	var ok bool
	var err error
	col.lock(func() {
		err = col.secondErr
		for err == nil && len(col.cands) > 0 && !ok {
			m, col.cands = col.cands[0], col.cands[1:]
			ok = col.takeable(m)
		}
	})
	return m, ok, err
}

// list runs the second look and makes its candidates the ones left to try.
func (col *collector) list(ctx context.Context) {
	cands, err := col.second(ctx)
	col.lock(func() {
		col.cands, col.secondErr = cands, err
		col.looked += len(cands)
	})
}

// indexedOutcome counts a second-look claim lost or won, for relisting.
func (col *collector) indexedOutcome(lost bool) {
	col.lock(func() {
		if lost {
			col.lostRun++
		} else {
			col.lostRun = 0
		}
	})
}

func (col *collector) lock(f func()) {
	col.mu.Lock()
	defer col.mu.Unlock()
	f()
}

func (col *collector) fail(err error) { col.lock(func() { col.errs = append(col.errs, err) }) }

// ownership is where a worker of the request stands with an instance.
type ownership int

const (
	// handling: a worker owns the instance and has not settled it yet.
	handling ownership = iota + 1
	// settled: the instance was claimed by this request (kept or discarded) or found dead; any
	// further message of it is stale.
	settled
)

// own reserves an instance for one worker of the request. Two messages of one instance (a
// re-delivery, a duplicate release) must not make two workers both believe they hold it. When the
// instance is taken, own reports how far its worker got. An instance found dead is taken again
// by a message of another pooling: it was released or handed back since, and that message may be
// its only one.
func (col *collector) own(m pool.Message) (ok bool, prev ownership) {
	id := m.InstanceID
	col.lock(func() {
		prev = col.owned[id]
		if col.takeable(m) {
			prev = 0
			col.owned[id], ok = handling, true
			delete(col.dead, id)
		}
	})
	return ok, prev
}

// takeable reports whether a worker may take m's instance (col.mu is held): this request has not
// touched it, or found it dead in another pooling than the one m announces. A stale message of
// an earlier pooling (left in the queue by a claim through the second look) is found dead; the
// second look's listing of the same instance, pooled again since, is news, and may be the only
// way this request reaches it.
func (col *collector) takeable(m pool.Message) bool {
	prev := col.owned[m.InstanceID]
	if at, dead := col.dead[m.InstanceID]; prev == settled && dead && at != pooling(m) {
		return true
	}
	return prev == 0
}

// pooling is the pooling a message announces (Unix ms; 0: none named).
func pooling(m pool.Message) int64 {
	if m.PooledAt.IsZero() {
		return 0
	}
	return m.PooledAt.UnixMilli()
}

// settle records that the instance's message is no longer needed: claimed by this request.
func (col *collector) settle(id string) { col.lock(func() { col.owned[id] = settled }) }

// settleDead records that m's instance was found dead: any other message of that pooling is stale.
func (col *collector) settleDead(m pool.Message) {
	col.lock(func() {
		col.owned[m.InstanceID] = settled
		col.dead[m.InstanceID] = pooling(m)
	})
}

// work is one claim worker: candidates until one is claimed and verified, the pool is exhausted,
// or an error ends it.
func (c *Claimer) work(ctx context.Context, req Request, p *pool.Pickup, col *collector, log *slog.Logger) {
	for {
		m, err := p.Next(ctx)
		indexed := false
		if errors.Is(err, pool.ErrExhausted) {
			// The queue has nothing more for this request: look through the table's idle index.
			var ok bool
			if m, ok, err = col.nextIndexed(ctx); err == nil && !ok {
				return
			}
			indexed = true
		}
		if err != nil {
			if ctx.Err() == nil {
				col.fail(err)
			}
			return
		}
		done, err := c.try(ctx, req, p, m, indexed, col, log.With("instance", m.InstanceID))
		if err != nil {
			if ctx.Err() == nil {
				col.fail(err)
			}
			return
		}
		if done {
			return
		}
	}
}

// try handles one candidate. done reports that this worker holds its instance or must stop.
// indexed says the candidate came from the second look (no message of it is held).
func (c *Claimer) try(ctx context.Context, req Request, p *pool.Pickup, m pool.Message, indexed bool, col *collector, log *slog.Logger) (done bool, err error) {
	if ok, prev := col.own(m); !ok {
		switch {
		case indexed:
		case prev == settled:
			// This request claimed the instance, or found it dead in the pooling this message
			// announces: the message is stale. Handing it back would bring it round to this request
			// again and again (nobody else may need it).
			p.Drop(ctx, m, "second message of an instance this request settled")
		default:
			// Another worker is still deciding; its message decides. This one goes back, counted
			// towards local exhaustion so it cannot come round forever.
			log.Debug("second message for an instance this request is handling: handed back")
			p.Skip(ctx, m)
		}
		return false, nil
	}
	start := c.opts.Now()
	// The message is a hint: the claim also requires the control plane's own pool mark, the very
	// one the message announces, so a stale message (of an instance idle again but not yet
	// verified clean, or of an earlier pooling of one pooled again) never hands it over.
	in, err := c.st.ClaimPooledAt(ctx, m.InstanceID, req.RunID, m.PooledAt, start.Add(c.opts.ClaimTimeout), PoolStates...)
	if err != nil {
		in, err = c.resolveClaim(ctx, req, p, m, indexed, err, log)
		if err != nil {
			return true, err
		}
		if in.ID == "" {
			col.lock(func() { col.res.Lost++ })
			col.settleDead(m)
			if indexed {
				col.indexedOutcome(true)
			}
			return false, nil
		}
	}
	if indexed {
		col.indexedOutcome(false)
	}
	// The record is the run's now: the message has done its job, and any other message of the
	// instance is stale.
	col.settle(m.InstanceID)
	// The delete runs beside the registration: the agent's notice need not wait for SQS.
	col.deletes.Go(func() { p.Claimed(ctx, m) })
	if indexed {
		col.lock(func() { col.res.Indexed++ })
	}

	return c.verify(ctx, req, in, m, start, col, log)
}

// verify hands a claimed instance its registration and waits for its agent to acknowledge the
// claim: verified, it is the request's; an instance that failed its checks is discarded; one the
// notice did not reach goes back to the pool. done reports that this worker holds the instance or
// must stop.
func (c *Claimer) verify(ctx context.Context, req Request, in store.Instance, m pool.Message, start time.Time, col *collector, log *slog.Logger) (done bool, err error) {
	// The instance is claimed for the run: from here it must end up in the Result.
	noticed, err := c.reg.issueClaim(ctx, in, req.Labels, req.Token)
	if err != nil {
		cl := Claimed{Instance: in, Message: m, Scope: req.Scope, NotIssued: errors.Is(err, ErrNotIssued)}
		if ctx.Err() != nil {
			col.lock(func() { col.res.Claimed = append(col.res.Claimed, cl) })
			return true, ctx.Err()
		}
		// GitHub or the store failed, not the instance: hand it back to the pool.
		c.handBack(ctx, req, cl, "registration not issued: "+err.Error(), col, log)
		return true, err
	}
	issued := c.opts.Now()
	werr := c.reg.WaitClaimed(ctx, in.ID, req.RunID, c.opts.RegistrationWait)
	now := c.opts.Now()
	cl := Claimed{Instance: in, Message: m, Waited: now.Sub(start), Verifying: now.Sub(issued), Scope: req.Scope}
	switch {
	case werr == nil:
		cl.Verified = true
		col.lock(func() { col.res.Claimed = append(col.res.Claimed, cl) })
		log.Debug("instance claimed", "waited", cl.Waited)
		return true, nil
	case ctx.Err() != nil:
		col.lock(func() { col.res.Claimed = append(col.res.Claimed, cl) })
		return true, ctx.Err()
	case !noticed && errors.Is(werr, ErrNoAck):
		// The claim notice failed (EC2 throttling, say): silence proves nothing about the instance,
		// whose agent may not have looked yet. Back to the pool, never to the terminator; Unclaim
		// decides from the agent's acknowledgement whether it must deregister first.
		c.handBack(ctx, req, cl, "claim notice not delivered and not acknowledged in time: "+werr.Error(), col, log)
		return false, nil
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	derr := c.reg.Discard(dctx, in.ID, req.RunID, werr.Error())
	log.Warn("claimed instance failed its checks: discarded", "reason", werr, "discard_err", derr)
	col.lock(func() {
		col.res.Discarded = append(col.res.Discarded, Discard{InstanceID: in.ID, Reason: werr.Error(), Err: derr})
	})
	return false, nil
}

// resolveClaim decides what a failed claim write means. It returns the record when the instance is
// in fact ours, a zero record when the candidate is dead (dropped), or an error that ends the worker.
func (c *Claimer) resolveClaim(ctx context.Context, req Request, p *pool.Pickup, m pool.Message, indexed bool, claimErr error, log *slog.Logger) (store.Instance, error) {
	var ce *store.ConflictError
	switch {
	case errors.Is(claimErr, store.ErrNotFound):
		p.Drop(ctx, m, "no record")
		return store.Instance{}, nil
	case errors.As(claimErr, &ce) && (ce.Current != store.StateClaimed || ce.RunID != req.RunID):
		log.Debug("candidate not idle (lost race or stale message)", "state", ce.Current, "owner", ce.RunID)
		p.Drop(ctx, m, fmt.Sprintf("record %s for run %q", ce.Current, ce.RunID))
		return store.Instance{}, nil
	}
	// Either the SDK retried a claim write whose first attempt did land (the conflict shows our own
	// run), or the outcome is unknown (throttling, network, cancellation): the record says which.
	dctx, cancel := detached(ctx)
	defer cancel()
	in, err := c.st.Get(dctx, m.InstanceID)
	switch {
	case err == nil && in.State == store.StateClaimed && in.RunID == req.RunID:
		return in, nil
	case errors.Is(err, store.ErrNotFound), err == nil && (!slices.Contains(PoolStates, in.State) || in.RunID != ""):
		p.Drop(dctx, m, fmt.Sprintf("not idle after a failed claim: %s for run %q", in.State, in.RunID))
		return store.Instance{}, nil
	}
	// Still idle, or unreadable: the candidate goes back to the pool. (If an unreadable record was in
	// fact claimed by us, the message is dropped by whoever takes it next, and the claim threshold
	// ends the instance: it is never run twice.) A candidate of the second look still has its message
	// in the queue: nothing to hand back.
	if !indexed {
		if rerr := p.Return(dctx, m); rerr != nil {
			log.Error("candidate not returned to the pool", "err", rerr)
		}
	}
	if ctx.Err() != nil {
		return store.Instance{}, ctx.Err()
	}
	return store.Instance{}, fmt.Errorf("claiming %s: %w", m.InstanceID, claimErr)
}

// handBack returns a claimed, unverified instance to the pool after a failure that was not its
// own; when that fails it is discarded, so it is never left claimed and unreported.
func (c *Claimer) handBack(ctx context.Context, req Request, cl Claimed, reason string, col *collector, log *slog.Logger) {
	dctx, cancel := detached(ctx)
	defer cancel()
	in, m := cl.Instance, cl.Message
	uerr := c.Unclaim(dctx, cl, m.Threshold, req.Queue)
	if uerr == nil {
		// Back in the pool with a fresh message, which other requests need: this request's
		// workers hand it back rather than drop it as stale.
		col.lock(func() { col.owned[in.ID] = handling })
		return
	}
	derr := c.reg.Discard(dctx, in.ID, req.RunID, reason)
	log.Warn("claimed instance could not go back to the pool: discarded", "unclaim_err", uerr, "discard_err", derr)
	col.lock(func() {
		col.res.Discarded = append(col.res.Discarded, Discard{InstanceID: in.ID, Reason: reason, Err: derr})
	})
}

// Promote moves a verified claimed instance to running for its run, with the run's deadline.
func (c *Claimer) Promote(ctx context.Context, cl Claimed, threshold time.Time) (store.Instance, error) {
	if cl.Instance.RunID == "" || threshold.IsZero() {
		return store.Instance{}, fmt.Errorf("promoting %s: run id and threshold are required: %w", cl.Instance.ID, store.ErrInvalid)
	}
	in, err := c.st.Transition(ctx, cl.Instance.ID, store.Change{
		From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: cl.Instance.RunID,
		Threshold: threshold, Reason: "registered for run " + cl.Instance.RunID,
	})
	if err != nil {
		return store.Instance{}, fmt.Errorf("promoting %s: %w", cl.Instance.ID, err)
	}
	return in, nil
}

// Unclaim gives back a claimed instance of cl's run that the run does not keep. An instance whose
// agent never acknowledged the run's registration credential (or had none written) has no runner of
// the run: it goes straight back to the pool as it came, claimed -> idle (run id cleared, idle
// threshold set; the record must still belong to the run), its message put back and the agent
// woken. One whose agent acknowledged it may have registered a runner that ran a job: its hand-back
// is a release (Options.HandBack), with the release's scope, reuse rule, signature and GitHub
// checks, or it is discarded. idleThreshold zero keeps the message's original idle deadline.
// Retrying after a partial failure is safe: a record already idle has its message put back again
// (a duplicate message is harmless: the second claim of it loses and drops it; a missing one would
// waste the instance).
//
// Unclaims of several instances at once (a rollback) share their GitHub checks when ctx comes from
// ShareListings: one runner listing per scope for all of them.
func (c *Claimer) Unclaim(ctx context.Context, cl Claimed, idleThreshold time.Time, q *pool.Queue) error {
	ctx, listing := ghaccess.Participate(ctx)
	defer listing.Leave()
	id, runID := cl.Instance.ID, cl.Instance.RunID
	if runID == "" || q == nil {
		return fmt.Errorf("unclaiming %s: run id and queue are required: %w", id, store.ErrInvalid)
	}
	msg := cl.Message
	if msg.InstanceID == "" {
		msg = MessageOf(cl.Instance)
	}
	if idleThreshold.IsZero() {
		idleThreshold = msg.Threshold
	}
	if !idleThreshold.After(c.opts.Now()) {
		return fmt.Errorf("unclaiming %s: idle threshold %s is not in the future: %w", id, idleThreshold.Format(time.RFC3339), store.ErrInvalid)
	}
	msg.Threshold = idleThreshold
	if err := msg.Validate(); err != nil {
		return fmt.Errorf("unclaiming %s: %w", id, err)
	}

	// Withdraw the registration credential, then decide from the agent's acknowledgement for the
	// run whether it may have registered: the agent acknowledges in its own partition before it
	// reads the credential, so without an acknowledgement for this run no runner of the run exists
	// and the instance can go straight back. A credential found missing proves nothing (a mint that
	// failed before it was written, its TTL, a retry of this Unclaim), so it never decides.
	_, err := c.st.TakeCredential(ctx, id, store.CredentialRegistration, runID)
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("unclaiming %s: withdrawing the registration credential: %w", id, err)
	}
	if c.acknowledged(ctx, cl) {
		return c.release(ctx, cl, idleThreshold)
	}
	listing.Leave() // no GitHub check to share
	empty, reason := "", "returned to the pool by run "+runID
	in, err := c.st.Transition(ctx, id, store.Change{
		From: []store.State{store.StateClaimed}, To: store.StateIdle, RunID: runID, SetRunID: &empty,
		Threshold: idleThreshold, Reason: reason,
	})
	if err != nil {
		var ce *store.ConflictError
		if !errors.As(err, &ce) || ce.Current != store.StateIdle || ce.RunID != "" {
			return fmt.Errorf("unclaiming %s: %w", id, err)
		}
		// Idle already: a retry of this very Unclaim (only the message may be missing), or not ours.
		cur, gerr := c.st.Get(ctx, id)
		if gerr != nil {
			return fmt.Errorf("unclaiming %s: %w", id, gerr)
		}
		if cur.State != store.StateIdle || cur.RunID != "" || cur.Reason != reason {
			return fmt.Errorf("unclaiming %s: %w", id, err)
		}
		in = store.Instance{}
	}
	if in.ID != "" {
		if err := wake.Notify(ctx, c.reg.ec2, id); err != nil {
			c.log.Warn("release notice not delivered", "instance", id, "err", err)
		}
	}
	// The control plane's own mark that the hand-back holds (the agent never took the claim's
	// credential): what the second look and refresh act on.
	marked, err := c.st.MarkPooled(ctx, id)
	if err != nil {
		return c.notPooled(ctx, id, runID, fmt.Errorf("instance idle but not marked pooled: %w", err))
	}
	msg.PooledAt = marked.PooledAt // this pooling's: an earlier message of the instance is stale now
	if err := q.Put(ctx, msg, 0); err != nil {
		return c.notPooled(ctx, id, runID, fmt.Errorf("instance idle but its pool message not sent: %w", err))
	}
	return nil
}

// acknowledged says whether the agent of cl may hold a runner of its run: it acknowledged the
// run's registration credential, or whether it did cannot be read (then the safe way is taken).
func (c *Claimer) acknowledged(ctx context.Context, cl Claimed) bool {
	if cl.NotIssued {
		return false // nothing to register with was ever written
	}
	ack, err := c.st.LastAck(ctx, cl.Instance.ID, store.CredentialRegistration)
	switch {
	case err == nil:
		return ack.RunID == cl.Instance.RunID
	case errors.Is(err, store.ErrNotFound):
		return false
	}
	return true
}

// release hands back an instance whose agent may hold a runner of the run: a release of it
// (Options.HandBack), or, when that does not pool it (or no HandBack is set), a discard. A record
// another writer moved on is left to it.
func (c *Claimer) release(ctx context.Context, cl Claimed, idleUntil time.Time) error {
	id, runID := cl.Instance.ID, cl.Instance.RunID
	err := fmt.Errorf("no release for hand-backs: %w", store.ErrInvalid)
	if c.opts.HandBack != nil {
		err = c.opts.HandBack(ctx, runID, cl.Scope, cl.Instance, idleUntil)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("unclaiming %s: %w", id, err)
	}
	// Never pooled: the instance is terminated now rather than left to its threshold.
	if derr := c.reg.Discard(ctx, id, "", "not released after run "+runID+": "+err.Error()); derr != nil {
		return errors.Join(err, derr)
	}
	return fmt.Errorf("unclaiming %s: discarded: %w", id, err)
}

// notPooled ends a hand-back that cleared the record's run id but could not pool the instance: the
// caller's Discard of the run can no longer expire a record that names no run, so it is discarded
// here, on condition that it still names none (store.ExpireNoRun: a run that claimed it meanwhile
// keeps it). An idle record left behind would be out of the pool, or announced by no message,
// until refresh noticed.
func (c *Claimer) notPooled(ctx context.Context, id, runID string, cause error) error {
	reason := "returned by run " + runID + " but not pooled: " + cause.Error()
	if _, err := c.st.ExpireNoRun(ctx, id, reason); err != nil {
		if ce := (*store.ConflictError)(nil); !errors.As(err, &ce) || ce.Current != store.StateTerminated {
			return errors.Join(fmt.Errorf("unclaiming %s: %w", id, cause), fmt.Errorf("expiring %s: %w", id, err))
		}
	}
	// Expired: no claim can take it now, so whatever run the record names it is ours to end.
	if err := c.reg.Discard(ctx, id, "", reason); err != nil {
		return errors.Join(fmt.Errorf("unclaiming %s: %w", id, cause), err)
	}
	return fmt.Errorf("unclaiming %s: discarded: %w", id, cause)
}

// ShareListings returns ctx for the Unclaims of n instances at once (first: as many as start
// together), so that their GitHub checks share one runner listing per scope; each must be called
// with it (ghaccess.ShareListings).
func (c *Claimer) ShareListings(ctx context.Context, first int) context.Context {
	return ghaccess.ShareListings(ctx, c.reg.gh, first)
}

// MessageOf is the pool message of an instance record (Threshold and PooledAt: the record's).
func MessageOf(in store.Instance) pool.Message {
	return pool.Message{
		InstanceID: in.ID, UsageClass: in.UsageClass, InstanceType: in.InstanceType, CPU: in.CPU,
		MemoryMiB: in.MemoryMiB, ResourceClass: in.ResourceClass, RunnerClass: in.RunnerClass,
		Scope: in.Scope, Zone: in.Zone, Threshold: in.Threshold, PooledAt: in.PooledAt,
	}
}
