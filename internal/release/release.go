// Package release returns a run's instances to the resource pool (seed 004): running -> idle with
// the run id cleared, a wait for the agent to confirm that its runner is deregistered and its
// workspace clean, then the pool message. An instance the agent does not confirm is expired instead,
// never pooled: refresh and the instance itself terminate it.
//
// Every step that hands an instance over is a conditional write, so a release is idempotent and two
// releases of one run racing each other produce exactly one pool message per instance.
package release

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
	"golang.org/x/sync/errgroup"
)

// GitHub is the part of the reconciler's GitHub access a release uses: a remove token for the
// run's scope, which the agent needs to run `config.sh remove` (no long-lived credential ever
// reaches an instance), and the scope's runner list, to check the agent's word that its runner is
// gone before the instance is pooled. *ghaccess.Client satisfies it.
type GitHub interface {
	RemoveToken(ctx context.Context, scope string) (ghaccess.RunnerToken, error)
	ListRunners(ctx context.Context, scope string) ([]ghaccess.Runner, error)
}

// runnerName is the name the agent registers an instance's runner under (agent.RunnerName).
func runnerName(instanceID string) string { return "runnerpool-" + instanceID }

// EC2API is the part of the EC2 client a release uses: the wake tag (package wake).
type EC2API interface {
	wake.Tagger
}

// Defaults of Options.
const (
	DefaultSignalWait   = 120 * time.Second
	DefaultPollInterval = 250 * time.Millisecond
	DefaultConcurrency  = 16
)

// ErrInvalid marks a release request with a bad run id or idle time. Nothing was read or written.
var ErrInvalid = errors.New("invalid release request")

// Options configure a Releaser. Zero values take the defaults.
type Options struct {
	// SignalWait bounds the wait for the agent's deregistration signal (default 120 s, seed 004's
	// WORKER_RELEASE_TIMEOUT); past it the instance is expired.
	SignalWait time.Duration
	// PollInterval is how often the signal item is read while waiting (default 250 ms).
	PollInterval time.Duration
	// Concurrency bounds how many instances of a run are released at once (default 16).
	Concurrency int
	// Now is the clock of the idle threshold (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// OnSpotInterruption is told of every instance whose release found EC2 reclaiming it (a spot
	// interruption the agent signed); the reconciler counts runnerpool_spot_interruptions_total.
	OnSpotInterruption func(instanceID string)
	// OnReleased, when set, is told the detail of every release signal signed by the instance's
	// pinned agent key (the agent's report of the run: its cache server's counters, cache.Report).
	OnReleased func(instanceID, detail string)
	// Reuse is a runner class's reuse rule (declared.ReuseAny, ReuseSameRepository, ReuseNever; ""
	// is ReuseAny), from the control plane's configuration. An error keeps the instance out of the
	// pool. Nil: every class is ReuseAny (tests and the bench, whose classes declare nothing).
	Reuse func(runnerClass string) (string, error)
	// JobAccess is a runner class's job_access in the control plane's configuration (ok false:
	// unknown). With the instance record's own (the class's at launch), it says whether the
	// instance keeps what a job left (declared.KeepsAcrossRuns), and so whether its pool scope
	// carries the run's trust level (pool.RunScope). Nil: the record's alone.
	JobAccess func(runnerClass string) (string, bool)
	// RunnerDue says why an instance's runner must not serve another run ("" when it may): older
	// than the current release by more than the operator's lag (runnerversion.Due). Such an
	// instance is retired at its hand-back, never pooled; never during a job. Nil: none is.
	RunnerDue func(rec store.Instance) string
}

// Releaser releases runs.
type Releaser struct {
	st       *store.Store
	resolver pool.Resolver
	gh       GitHub
	ec2      EC2API
	opts     Options
	log      *slog.Logger
}

// New returns a Releaser.
func New(st *store.Store, resolver pool.Resolver, gh GitHub, ec2 EC2API, opts Options) *Releaser {
	if opts.SignalWait <= 0 {
		opts.SignalWait = DefaultSignalWait
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Releaser{st: st, resolver: resolver, gh: gh, ec2: ec2, opts: opts, log: opts.Logger}
}

// maxRunIDLen bounds a run id; GitHub's are decimal numbers far shorter.
const maxRunIDLen = 128

// Release returns the running instances of runID to the pool, each with an idle threshold of now
// plus idleTime. It returns when every instance has an outcome. The error is non-nil for a bad
// request, when the run's instances cannot be listed, or when a control-plane call failed for some
// instance (Report.Err); the report is complete in the last case. A release of a run with nothing
// running (a repeated release) is not an error: its Message is NothingToRelease.
func (r *Releaser) Release(ctx context.Context, runID string, idleTime time.Duration) (Report, error) {
	if runID == "" || len(runID) > maxRunIDLen || strings.ContainsFunc(runID, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return Report{}, fmt.Errorf("run id %q: want 1-%d printable characters without spaces: %w", runID, maxRunIDLen, ErrInvalid)
	}
	if idleTime <= 0 {
		return Report{}, fmt.Errorf("idle time %v: must be positive: %w", idleTime, ErrInvalid)
	}
	rep := Report{RunID: runID}
	recs, err := r.st.ByRun(ctx, runID)
	if err != nil {
		return rep, fmt.Errorf("releasing run %s: listing its instances: %w", runID, err)
	}
	slices.SortFunc(recs, func(a, b store.Instance) int { return strings.Compare(a.ID, b.ID) })

	rep.Instances = make([]InstanceResult, len(recs))
	idleUntil := r.opts.Now().Add(idleTime)
	tokens := &tokenCache{gh: r.gh, entries: map[string]*tokenEntry{}}
	// The instances that start together share their GitHub listings: their participants join
	// before any of them can ask.
	shared := ghaccess.ShareListings(ctx, r.gh, min(len(recs), r.opts.Concurrency))
	// Every instance is released whatever happens to the others: each records its own result.
	var g errgroup.Group
	g.SetLimit(r.opts.Concurrency)
	for i, rec := range recs {
		g.Go(func() error {
			// This instance's context: it carries its listing participant.
			ctx, p := ghaccess.Participate(shared)
			defer p.Leave() // a pre-joined participant leaves even when cancelled, so no batch waits on it
			if err := ctx.Err(); err != nil {
				rep.Instances[i] = InstanceResult{ID: rec.ID, State: rec.State, Outcome: Failed,
					Reason: "not started, release cancelled; left as it was", Err: fmt.Errorf("releasing %s: %w", rec.ID, err)}
				return nil
			}
			if rec.State != store.StateRunning {
				// The run index is read eventually consistently: confirm before calling the state
				// unexpected (a claimed record may have just become running).
				cur, err := r.st.Get(ctx, rec.ID)
				if err != nil || cur.State != store.StateRunning || cur.RunID != runID {
					rep.Instances[i] = unexpected(rec, cur, err, runID)
					return nil
				}
				rec = cur
			}
			rep.Instances[i] = r.releaseOne(ctx, runID, handover{from: store.StateRunning, idleUntil: idleUntil}, rec, tokens)
			return nil
		})
	}
	_ = g.Wait()

	for _, res := range rep.Instances {
		r.log.InfoContext(ctx, "release", "run", runID, "instance", res.ID, "found", res.State, "outcome", res.Outcome, "reason", res.Reason)
	}
	rep.summarise()
	if err := rep.Err(); err != nil {
		return rep, fmt.Errorf("releasing run %s: %w", runID, err)
	}
	return rep, nil
}

// unexpected classifies a record the run index lists that is not running, given the consistent
// read cur (or its error). Idle records never carry a run id (the release that made them idle
// cleared it), and terminated ones leave the run index, so what is found here is a release racing
// its provision (created, claimed), an instance being terminated, or a record that moved on since
// the index was written.
func unexpected(listed, cur store.Instance, err error, runID string) InstanceResult {
	res := InstanceResult{ID: listed.ID, State: listed.State, Outcome: SkippedUnexpectedState}
	switch {
	case errors.Is(err, store.ErrNotFound):
		res.Reason = "the record is gone"
		return res
	case err != nil:
		res.Outcome, res.Err = Failed, fmt.Errorf("releasing %s: re-reading the record: %w", listed.ID, err)
		res.Reason = fmt.Sprintf("listed as %s; re-reading it failed: left untouched", listed.State)
		return res
	}
	res.State = cur.State
	switch {
	case cur.RunID != runID && cur.State.Live() && cur.State != store.StateTerminating:
		res.Outcome, res.Reason = AlreadyReleased, fmt.Sprintf("no longer of run %s: now %s", runID, cur.State)
	case cur.State == store.StateCreated || cur.State == store.StateClaimed:
		res.Reason = fmt.Sprintf("still %s for run %s: the release raced the provision; left untouched (its threshold bounds it)", cur.State, runID)
	case cur.State == store.StateTerminating || cur.State == store.StateTerminated:
		res.Reason = fmt.Sprintf("%s: not released", cur.State)
	default:
		res.Reason = fmt.Sprintf("unexpected state %s with run %s: left untouched", cur.State, runID)
	}
	return res
}

// handover is where a release takes an instance from (running for a release, claimed for a
// hand-back) and the idle threshold it gets.
type handover struct {
	from      store.State
	idleUntil time.Time
}

// releasedBy is the reason of a record a release of runID made idle.
func releasedBy(runID string) string { return "released by run " + runID }

// HandBack releases one instance that runID claimed and does not keep: a rolled-back provision's,
// whose agent acknowledged the registration credential, so a runner of the run may have registered
// and run a job. It is a release of that instance, from claimed instead of running: the same steps
// (releaseOne), so the scope narrowed to the run's repository, the runner class's reuse rule, the
// pinned key's signature and the GitHub listing where a release needs one all apply. scope is the
// claim's (the run's repository), taken when the run has no run record. The instance is pooled
// with idleUntil as its idle threshold, or left expired for refresh (and itself) to terminate.
// The error is nil once it is pooled; it wraps store.ErrConflict when the record is no longer the
// run's claim (another writer moved it; it is left as that writer left it).
func (r *Releaser) HandBack(ctx context.Context, runID, scope string, rec store.Instance, idleUntil time.Time) error {
	// The record now: the claim's verification may have pinned the agent's key since it was read.
	cur, err := r.st.Get(ctx, rec.ID)
	switch {
	case err != nil:
		return fmt.Errorf("handing back %s: %w", rec.ID, err)
	case cur.State == store.StateIdle && cur.RunID == "" && cur.Reason == releasedBy(runID) && !cur.PooledAt.IsZero():
		return nil // pooled by an earlier call for the run: a retry
	case cur.State != store.StateClaimed || cur.RunID != runID:
		return fmt.Errorf("handing back %s: now %s for run %q, not claimed by run %s: %w", rec.ID, cur.State, cur.RunID, runID, store.ErrConflict)
	}
	if scope != "" {
		cur.Scope = scope
	}
	tokens := &tokenCache{gh: r.gh, entries: map[string]*tokenEntry{}}
	res := r.releaseOne(ctx, runID, handover{from: store.StateClaimed, idleUntil: idleUntil}, cur, tokens)
	r.log.InfoContext(ctx, "hand-back", "run", runID, "instance", res.ID, "outcome", res.Outcome, "reason", res.Reason)
	switch res.Outcome {
	case Pooled:
		return nil
	case AlreadyReleased, SkippedUnexpectedState:
		return fmt.Errorf("handing back %s: %s: %w", rec.ID, res.Reason, store.ErrConflict)
	}
	if res.Err != nil {
		return fmt.Errorf("handing back %s: %s: %w", rec.ID, res.Reason, res.Err)
	}
	return fmt.Errorf("handing back %s: not pooled: %s", rec.ID, res.Reason)
}

// releaseOne takes one running (or, handed back, claimed) instance through the release. It never
// leaves the instance in a state nobody will act on: before the transition a failure leaves it as
// it was (a retried release, or its threshold, deals with it); after the transition it ends pooled
// or expired.
func (r *Releaser) releaseOne(ctx context.Context, runID string, h handover, rec store.Instance, tokens *tokenCache) InstanceResult {
	id := rec.ID
	res := InstanceResult{ID: id, State: rec.State}
	t, end, ended := r.prepareRelease(ctx, runID, h, rec, tokens, res)
	if ended {
		return end
	}
	rec.Scope = t.scope
	idle, end, ended := r.releaseToIdle(ctx, runID, h, rec, res)
	if ended {
		return end
	}
	res.State = store.StateIdle

	if err := wake.Notify(ctx, r.ec2, id); err != nil {
		r.log.WarnContext(ctx, "release: wake notify failed; the agent notices on its fallback timer", "instance", id, "error", err)
	}

	sig, err := r.waitSignal(ctx, id, runID, t.baseline)
	r.withdrawRemoval(ctx, id, runID)
	if reason, cause := r.signalRefusal(rec, sig, err); reason != "" {
		return r.expire(ctx, res, "", reason, cause)
	}
	if reason := r.handoverRefusal(ctx, rec, sig, t.gh); reason != "" {
		return r.expire(ctx, res, "", reason, nil)
	}
	return r.poolReleased(ctx, res, t, idle)
}

// releaseTarget is what the release prepared before the transition: where the instance is pooled
// and for whom, and the signal item it must see change.
type releaseTarget struct {
	scope    string // the run's scope, which the pooled instance may serve next
	gh       string // the GitHub scope its runner is removed from
	q        *pool.Queue
	msg      pool.Message
	baseline store.SignalRecord
}

// failed is the result of a release step that failed; left says where that left the instance.
func failed(res InstanceResult, err error, left string) InstanceResult {
	res.Outcome, res.Err = Failed, fmt.Errorf("releasing %s: %w", res.ID, err)
	res.Reason = err.Error() + "; " + left
	return res
}

// prepareRelease does everything before the transition: the scope and pool the instance is
// released to, the removal token, the signal baseline and the removal credential. ended is true
// with the instance's result when the release ends here (failed, left as it was, or expired).
func (r *Releaser) prepareRelease(ctx context.Context, runID string, h handover, rec store.Instance, tokens *tokenCache, res InstanceResult) (t releaseTarget, end InstanceResult, ended bool) {
	id := rec.ID
	left := "left " + string(h.from) + " for the run"
	// The scope the pooled instance may serve next is the control plane's own record of the run:
	// the repository the provision was authenticated for, at the run's trust level when the class
	// keeps images. Its runner is removed from that repository (gh).
	scope, err := r.runScope(ctx, runID, rec)
	t.scope, t.gh = scope, pool.GitHubScope(scope)
	if err != nil && !errors.Is(err, errScope) {
		return t, failed(res, err, left), true
	}
	// An instance that can never be pooled (no queue for its class, a record the pool message
	// cannot describe, no scope to deregister from) is expired right away, still for its run.
	if err == nil {
		rec.Scope = scope
		t.q, t.msg, err = r.poolTarget(rec)
	}
	if err != nil {
		return t, r.expire(ctx, res, runID, "cannot be pooled: "+err.Error(), fmt.Errorf("releasing %s: %w", id, err)), true
	}

	tok, err := tokens.get(ctx, t.gh)
	if err != nil {
		return t, failed(res, fmt.Errorf("remove token for %s: %w", t.gh, err), left), true
	}
	// The signal item before the transition: only a signal written after it counts, so a stale
	// release signal of an earlier attempt of the same run is never taken for this one.
	baseline, err := r.st.LastSignal(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return t, failed(res, err, left), true
	}
	t.baseline = baseline
	if err == nil && rec.SpotReclaimed(baseline) {
		// EC2 announced the reclaim before the release: its agent serves no further run and the
		// instance may be gone already, so nothing is waited for. Never pooled.
		r.spotInterruption(id)
		return t, r.expire(ctx, res, runID, SpotReason(id, baseline.Detail), nil), true
	}
	// The credential goes first: the agent acts as soon as it sees the record idle.
	err = r.st.PutCredential(ctx, id, store.Credential{
		Kind: store.CredentialRemoval, RunID: runID, URL: tok.URL, Token: tok.Token, ExpiresAt: tok.ExpiresAt,
	})
	if err != nil {
		return t, failed(res, err, left), true
	}
	return t, res, false
}

// releaseToIdle moves the record from h.from to idle for the run, with its idle threshold and the
// run's scope. ended is true with the instance's result when it did not (another writer moved it,
// or the write failed).
func (r *Releaser) releaseToIdle(ctx context.Context, runID string, h handover, rec store.Instance, res InstanceResult) (idle store.Instance, end InstanceResult, ended bool) {
	empty := ""
	idle, err := r.st.Transition(ctx, rec.ID, store.Change{
		From: []store.State{h.from}, To: store.StateIdle, RunID: runID, SetRunID: &empty,
		Threshold: h.idleUntil, Reason: releasedBy(runID), SetScope: rec.Scope, RunnerClass: rec.RunnerClass,
	})
	var ce *store.ConflictError
	switch {
	case errors.As(err, &ce):
		res.State = ce.Current
		if ce.Current == store.StateTerminating || ce.Current == store.StateTerminated {
			res.Outcome, res.Reason = SkippedUnexpectedState, fmt.Sprintf("%s since it was listed: not released", ce.Current)
			return idle, res, true
		}
		res.Outcome = AlreadyReleased
		res.Reason = fmt.Sprintf("another release won: now %s", ce.Current)
		if ce.RunID != "" {
			res.Reason += " for run " + ce.RunID
		}
		return idle, res, true
	case errors.Is(err, store.ErrNotFound):
		res.Outcome, res.Reason = SkippedUnexpectedState, "the record is gone"
		return idle, res, true
	case err != nil:
		// The write may or may not have happened (a timeout after DynamoDB applied it). If it did,
		// the record is idle and unpooled, and its idle threshold bounds it.
		return idle, failed(res, fmt.Errorf("running -> idle: %w", err), "possibly idle but not pooled until its idle threshold passes"), true
	}
	return idle, res, false
}

// withdrawRemoval withdraws the removal credential. The agent can only read its credential: the
// control plane withdraws it once the agent reported (or did not in time), so it is single use
// whatever the agent does.
func (r *Releaser) withdrawRemoval(ctx context.Context, id, runID string) {
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer wcancel()
	if _, werr := r.st.TakeCredential(wctx, id, store.CredentialRemoval, runID); werr != nil &&
		!errors.Is(werr, store.ErrNotFound) && !errors.Is(werr, store.ErrConflict) {
		r.log.WarnContext(ctx, "release: removal credential not withdrawn; its TTL removes it", "instance", id, "error", werr)
	}
}

// signalRefusal says why the deregistration signal (or its absence, or the error waiting for it)
// expires the instance, with the error to report beside it; "" when the agent reported released.
func (r *Releaser) signalRefusal(rec store.Instance, sig *store.SignalRecord, err error) (reason string, cause error) {
	switch {
	case err != nil:
		return "waiting for the deregistration signal: " + err.Error(), fmt.Errorf("releasing %s: %w", rec.ID, err)
	case sig == nil:
		return fmt.Sprintf("no deregistration signal within %v", r.opts.SignalWait), nil
	case sig.Signal == store.SignalReleaseFailed && rec.SpotReclaimed(*sig):
		// The agent's own word (signed): EC2 reclaims the instance, it is never pooled again.
		r.spotInterruption(rec.ID)
		return SpotReason(rec.ID, sig.Detail), nil
	case sig.Signal == store.SignalReleaseFailed:
		reason := "the agent could not deregister or clean up"
		if sig.Detail != "" {
			reason += ": " + sig.Detail
		}
		return reason, nil
	}
	return "", nil
}

// handoverRefusal checks a "released" signal before the instance is handed on: whose word it is,
// the class's reuse rule and, where the signal alone cannot be trusted, GitHub's. It says why the
// instance is expired instead ("" when it may be pooled).
func (r *Releaser) handoverRefusal(ctx context.Context, rec store.Instance, sig *store.SignalRecord, gh string) string {
	id := rec.ID
	// The signal must be the agent's, not merely in its partition: a job holding the instance role
	// can read the removal credential, deregister the runner itself and write "released" before the
	// agent cleaned up. Once the agent's key is pinned (its first registration), only a signal
	// signed by it pools the instance (store/attribution.go).
	signed := rec.AgentKey != "" && sig.SignedBy(id, rec.AgentKey)
	if signed && r.opts.OnReleased != nil {
		r.opts.OnReleased(id, sig.Detail)
	}
	if rec.AgentKey != "" && !signed {
		ghaccess.LeaveShared(ctx)
		return "the release signal is not signed by the instance's agent"
	}
	// The class may forbid the hand-over whatever the agent says: a root job can forge every report.
	refused, acrossRepositories := r.reuseRefused(rec.RunnerClass, rec.Scope)
	if refused == "" && r.opts.RunnerDue != nil {
		refused = r.opts.RunnerDue(rec)
	}
	if refused != "" {
		ghaccess.LeaveShared(ctx)
		return "deregistered, not pooled: " + refused
	}
	// An unsigned signal is the word of anything on the instance, and a class that is not reused
	// across repositories may run root jobs, which can read the agent's key: then GitHub must
	// confirm the runner is gone before the pool hands the instance on. A signature by the pinned
	// key of an instance whose jobs never had root (declared.CheckPosture) is the agent's own word
	// that config.sh remove succeeded, and refresh's runner phase checks it after the fact at one
	// listing per scope and pass (refresh/runners.go): the release spends no GitHub call.
	if signed && acrossRepositories {
		ghaccess.LeaveShared(ctx)
	} else if err := r.checkDeregistered(ctx, id, gh); err != nil {
		return "the release signal does not hold: " + err.Error()
	}
	return ""
}

// poolReleased hands the verified instance to the pool: its pool mark, then its pool message.
func (r *Releaser) poolReleased(ctx context.Context, res InstanceResult, t releaseTarget, idle store.Instance) InstanceResult {
	id := res.ID
	// The pool is the hand-over to the next run: mark the record pooled, on condition that it is
	// still idle, ours to pool and within its threshold. The mark is the control plane's own record
	// that the hand-back was verified; selection's second look and refresh act on it alone.
	marked, err := r.st.MarkPooled(ctx, id)
	if err != nil {
		var ce *store.ConflictError
		switch {
		case errors.As(err, &ce) && ce.Current == store.StateIdle && ce.RunID == "":
			res.Outcome, res.Reason = Expired, "deregistered, but its threshold passed before it was pooled: not pooled, refresh terminates it"
		case errors.As(err, &ce):
			res.State, res.Outcome = ce.Current, SkippedUnexpectedState
			res.Reason = fmt.Sprintf("deregistered, but the record moved to %s before it was pooled: not pooled", ce.Current)
		default:
			return r.expire(ctx, res, "", "the pool mark was not written: "+err.Error(), fmt.Errorf("releasing %s: %w", id, err))
		}
		return res
	}
	// The message announces this pooling (its mark): a message the instance's earlier pooling left
	// behind (a claim through the second look cannot delete it) is stale from now on, and no claim
	// or refresh takes it for this one.
	q, msg := t.q, t.msg
	msg.Threshold, msg.PooledAt = idle.Threshold, marked.PooledAt
	if err := q.Put(ctx, msg, 0); err != nil {
		// A send whose answer was lost after SQS applied it fails here while its message is in the
		// queue: expiring the instance would end a healthy one a pickup may be claiming. It is
		// marked pooled and clean, so the second look finds it, and refresh announces it again if
		// two walks find no message (refresh/pool.go); its idle threshold bounds it either way.
		r.log.WarnContext(ctx, "release: pool message not confirmed sent; the instance stays pooled, refresh announces it again if it is missing",
			"instance", id, "queue", q.URL(), "error", err)
		res.Outcome, res.Reason = Pooled, "deregistered by the agent, marked pooled; its message to "+q.URL()+" was not confirmed sent ("+err.Error()+"): refresh announces it again if it is missing"
		return res
	}
	res.Outcome, res.Reason = Pooled, "deregistered by the agent, in pool "+q.URL()
	return res
}

// reuseRefused says why the runner class's reuse rule keeps the instance, released by a run of
// scope, out of the pool ("" when it may be pooled), and whether the class reuses instances across
// repositories (its rule is any-repository or unset; false without a Reuse function). The pool
// hands an instance only to runs its scope covers (pool.ScopeCovers), so an instance pooled with a
// repository's scope serves that repository alone; a restricted class needs exactly that, never an
// owner's scope, which covers every repository of the owner.
func (r *Releaser) reuseRefused(runnerClass, scope string) (refused string, acrossRepositories bool) {
	if r.opts.Reuse == nil {
		return "", false
	}
	reuse, err := r.opts.Reuse(runnerClass)
	switch {
	case err != nil:
		return fmt.Sprintf("runner class %q: its reuse rule is unknown: %v", runnerClass, err), false
	case reuse == declared.ReuseNever:
		return fmt.Sprintf("runner class %q does not reuse instances (reuse = %q)", runnerClass, declared.ReuseNever), false
	case reuse == declared.ReuseSameRepository && !strings.Contains(scope, "/"):
		return fmt.Sprintf("runner class %q reuses instances for the same repository only, and the run's scope %q is not a repository", runnerClass, scope), false
	case reuse != "" && reuse != declared.ReuseAny && reuse != declared.ReuseSameRepository:
		return fmt.Sprintf("runner class %q: unknown reuse rule %q", runnerClass, reuse), false
	}
	return "", reuse != declared.ReuseSameRepository
}

// errScope marks a run whose scope the control plane cannot vouch for: the instance is expired.
var errScope = errors.New("no trusted scope")

// runScope is the pool scope of runID from the control plane's records: the repository of the run
// record the provision created from the caller's verified OIDC token, at the trust level of the
// run's event (pool.RunScope) when the instance keeps what a job left (keepsAcrossRuns). A run
// record without an event (written before it was kept) is untrusted. A run without a run record
// (a warm-pool job's, recycled only when its event is trusted: warmpool.Job.Trusted) falls back to
// the instance record's scope, which only the control plane writes too. An instance record whose
// repository does not cover the run's is not released to it.
func (r *Releaser) runScope(ctx context.Context, runID string, rec store.Instance) (string, error) {
	run, err := r.st.GetRun(ctx, runID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if rec.Scope == "" {
			return "", fmt.Errorf("%w: no run record and the instance record has no GitHub scope", errScope)
		}
		return rec.Scope, nil
	case err != nil:
		return "", fmt.Errorf("reading the run record: %w", err)
	case run.Repository == "":
		return "", fmt.Errorf("%w: the run record names no repository", errScope)
	case rec.Scope != "" && !pool.ScopeCovers(pool.GitHubScope(rec.Scope), run.Repository):
		return "", fmt.Errorf("%w: the instance's scope %q does not cover the run's repository %q", errScope, rec.Scope, run.Repository)
	}
	return pool.RunScope(run.Repository, run.Event, r.keepsAcrossRuns(rec)), nil
}

// keepsAcrossRuns says whether the instance keeps what a job left into its next run: its record's
// job access (its class's at launch) or its class's now says so (declared.KeepsAcrossRuns). The
// provision claims with its class's (runnerclass.Resolved.JobAccess), the same configuration; an
// instance whose record and class disagree is retired by refresh (a posture change).
func (r *Releaser) keepsAcrossRuns(rec store.Instance) bool {
	if declared.KeepsAcrossRuns(rec.JobAccess) {
		return true
	}
	if r.opts.JobAccess == nil {
		return false
	}
	access, ok := r.opts.JobAccess(rec.RunnerClass)
	return ok && declared.KeepsAcrossRuns(access)
}

// checkDeregistered confirms with GitHub that the instance's runner is no longer registered in
// scope, from the listing the instance's release batch shares (ghaccess.ShareListings).
func (r *Releaser) checkDeregistered(ctx context.Context, id, scope string) error {
	runners, err := ghaccess.ListRunnersShared(ctx, r.gh, scope)
	if err != nil {
		return fmt.Errorf("listing the runners of %s: %w", scope, err)
	}
	for _, rn := range runners {
		if rn.Name == runnerName(id) {
			return fmt.Errorf("runner %s (id %d) is still registered in %s", rn.Name, rn.ID, scope)
		}
	}
	return nil
}

// poolTarget resolves the instance's pool queue and builds its message (threshold set later).
func (r *Releaser) poolTarget(rec store.Instance) (*pool.Queue, pool.Message, error) {
	msg := pool.Message{
		InstanceID: rec.ID, UsageClass: rec.UsageClass, InstanceType: rec.InstanceType, CPU: rec.CPU,
		MemoryMiB: rec.MemoryMiB, ResourceClass: rec.ResourceClass, RunnerClass: rec.RunnerClass,
		Scope: rec.Scope, Zone: rec.Zone, Threshold: r.opts.Now(),
	}
	if err := msg.Validate(); err != nil {
		return nil, pool.Message{}, err
	}
	q, err := r.resolver.Queue(rec.RunnerClass)
	if err != nil {
		return nil, pool.Message{}, err
	}
	return q, msg, nil
}

// expire moves the record's threshold to now so refresh (and the instance) terminate it; with
// runID set the record must still belong to that run. cause is the control-plane error, if any.
// It runs even when ctx is done: an instance made idle must not be left unpooled and unexpired.
func (r *Releaser) expire(ctx context.Context, res InstanceResult, runID, reason string, cause error) InstanceResult {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := r.st.Expire(ectx, res.ID, runID, "release: "+reason)
	if err != nil {
		res.Outcome = Failed
		res.Reason = reason + "; expiring it failed too: " + err.Error()
		res.Err = errors.Join(cause, fmt.Errorf("expiring %s: %w", res.ID, err))
		if res.State == store.StateIdle {
			res.Reason += " (idle, not pooled: its idle threshold bounds it)"
		}
		return res
	}
	res.Outcome, res.Reason, res.Err = Expired, reason+"; expired, refresh terminates it", cause
	return res
}

// waitSignal polls the instance's signal item until the agent reports on the release of runID: the
// record of that signal, nil when SignalWait passed without one, or ctx's error. Read errors while
// polling are retried until the deadline (a throttled read must not expire a healthy instance).
func (r *Releaser) waitSignal(ctx context.Context, id, runID string, baseline store.SignalRecord) (*store.SignalRecord, error) {
	deadline := time.NewTimer(r.opts.SignalWait)
	defer deadline.Stop()
	tick := time.NewTicker(r.opts.PollInterval)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			if lastErr != nil {
				r.log.WarnContext(ctx, "release: reading the signal failed until the deadline", "instance", id, "error", lastErr)
			}
			return nil, nil
		case <-tick.C:
		}
		sig, err := r.st.LastSignal(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			lastErr = err
			continue
		}
		if sameSignal(sig, baseline) || sig.RunID != runID {
			continue
		}
		if sig.Signal == store.SignalReleased || sig.Signal == store.SignalReleaseFailed {
			return &sig, nil
		}
	}
}

func sameSignal(a, b store.SignalRecord) bool {
	return a.Signal == b.Signal && a.RunID == b.RunID && a.At.Equal(b.At) && a.Detail == b.Detail
}

// tokenCache fetches one remove token per scope per release: every instance of a run usually
// shares one scope, and a remove token is valid for an hour.
type tokenCache struct {
	gh      GitHub
	mu      sync.Mutex
	entries map[string]*tokenEntry
}

type tokenEntry struct {
	once sync.Once
	tok  ghaccess.RunnerToken
	err  error
}

func (c *tokenCache) get(ctx context.Context, scope string) (ghaccess.RunnerToken, error) {
	c.mu.Lock()
	e, ok := c.entries[scope]
	if !ok {
		e = &tokenEntry{}
		c.entries[scope] = e
	}
	c.mu.Unlock()
	e.once.Do(func() {
		e.tok, e.err = c.gh.RemoveToken(ctx, scope)
		if e.err == nil && e.tok.Token == "" {
			e.err = errors.New("github returned an empty remove token")
		}
	})
	return e.tok, e.err
}
