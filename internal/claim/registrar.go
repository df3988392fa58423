// Package claim turns candidates into runners for a run. The Registrar issues the per-claim
// registration credential, waits for the agent's registration signal and heartbeat, and discards
// instances that fail those checks; it serves both the claim workers (reused instances) and the
// provision orchestrator (freshly created ones). The Claimer runs the parallel claim workers of one
// provision request over the resource pool.
//
// registrar.go: the consumer interfaces, options, and the Registrar.
package claim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
)

// Store is the part of *store.Store claim uses.
type Store interface {
	Get(ctx context.Context, id string) (store.Instance, error)
	Claim(ctx context.Context, id, runID string, threshold time.Time, from ...store.State) (store.Instance, error)
	ClaimPooledAt(ctx context.Context, id, runID string, pooledAt, threshold time.Time, from ...store.State) (store.Instance, error)
	Transition(ctx context.Context, id string, c store.Change) (store.Instance, error)
	Expire(ctx context.Context, id, runID, reason string) (store.Instance, error)
	ExpireNoRun(ctx context.Context, id, reason string) (store.Instance, error)
	MarkPooled(ctx context.Context, id string) (store.Instance, error)
	PutCredential(ctx context.Context, id string, c store.Credential) error
	TakeCredential(ctx context.Context, id string, kind store.CredentialKind, runID string) (store.Credential, error)
	LastSignal(ctx context.Context, id string) (store.SignalRecord, error)
	// Attribute decides whether a report may be believed, pinning the agent's key at its first
	// self-signed one (store/attribution.go).
	Attribute(ctx context.Context, in store.Instance, sig store.SignalRecord) (store.Instance, bool, error)
	LastAck(ctx context.Context, id string, kind store.CredentialKind) (store.Ack, error)
	Reports(ctx context.Context, kind store.CredentialKind, qs []store.ReportQuery) (map[string]store.Report, error)
}

// EC2 is the part of the EC2 client claim uses; *ec2.Client satisfies it.
type EC2 interface {
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	CreateTags(ctx context.Context, in *ec2.CreateTagsInput, opts ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
}

// GitHub is the part of the reconciler's GitHub access claim uses; *ghaccess.Client satisfies it.
type GitHub interface {
	RegistrationToken(ctx context.Context, scope string) (ghaccess.RunnerToken, error)
	RemoveToken(ctx context.Context, scope string) (ghaccess.RunnerToken, error)
	ListRunners(ctx context.Context, scope string) ([]ghaccess.Runner, error)
}

// The ways a claimed instance fails its checks. Each makes the instance non-viable: it is
// discarded (expired, terminated) and never handed to a run.
var (
	// ErrRegistrationTimeout: no registration signal for the run within the wait.
	ErrRegistrationTimeout = errors.New("registration timed out")
	// ErrRegistrationFailed: the agent reported that registering (or its pre-runner script) failed.
	ErrRegistrationFailed = errors.New("registration failed")
	// ErrRunnerVersionRefused (with ErrRegistrationFailed): the agent reported that GitHub refused
	// the runner's version. The report is the agent's claim: it names the cause, it decides nothing
	// more than any other failed registration.
	ErrRunnerVersionRefused = errors.New("GitHub refused the runner's version (see runnerversion.Floor and the current release)")
	// ErrStaleHeartbeat: the instance's heartbeat is missing or older than HeartbeatMaxAge. No
	// longer returned by the Registrar (liveness is ErrNoAck's business); kept for callers' checks.
	ErrStaleHeartbeat = errors.New("stale heartbeat")
	// ErrNoAck: the agent of a claimed instance did not acknowledge the claim (its acknowledgement
	// item naming the run) within AckWait: it is not alive, or not listening.
	ErrNoAck = errors.New("claim not acknowledged")
)

// CheckFailed reports whether err says the instance failed a check (rather than the control plane
// failing to check it).
func CheckFailed(err error) bool {
	return errors.Is(err, ErrRegistrationTimeout) || errors.Is(err, ErrRegistrationFailed) || errors.Is(err, ErrStaleHeartbeat) ||
		errors.Is(err, ErrNoAck)
}

// Options tunes the Registrar and the Claimer. Zero values take the defaults.
type Options struct {
	ClaimTimeout time.Duration // threshold of the claimed state; default 5 min
	// HeartbeatMaxAge is no longer read: a claimed instance proves it is alive by acknowledging
	// the claim (AckWait), which no clock skew can fake or stall.
	HeartbeatMaxAge time.Duration
	// AckWait bounds how long the agent of a claimed (running, pooled) instance has to acknowledge
	// the claim before it is judged dead and discarded; default 5 s, at most half the wait.
	AckWait          time.Duration
	RegistrationWait time.Duration // wait for a reused instance's registration; default 10 s
	PollInterval     time.Duration // signal polling; default 250 ms
	// ClaimPollInterval is the first read of a claimed running instance's reports (WaitClaimed):
	// its agent acknowledges and registers within a second or two, and every poll interval is
	// waited out by the job that asked for the runner. Later reads back off by half up to
	// PollInterval, batched with every other wait of the replica (watch.go); default 50 ms
	// (reads at 50, 100, 175, 287, 456, 706 ms, then every 250 ms: about ten for a 2 s
	// registration), and start over from it when the registration is expected (expect.go).
	ClaimPollInterval time.Duration
	// StartWait bounds how long a stopped instance EC2 will not start yet (still stopping) is tried
	// again before it is given up; default 60 s.
	StartWait time.Duration
	// HandBack releases a claimed instance whose agent acknowledged the run's registration
	// credential (so a runner of the run may have registered and run a job), when the run does not
	// keep it: the release's own steps (release.Releaser.HandBack) decide whether it may be pooled
	// and under which scope, and return nil once it is. Nil: such instances are discarded.
	HandBack func(ctx context.Context, runID, scope string, rec store.Instance, idleUntil time.Time) error
	Now      func() time.Time
	Logger   *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.ClaimTimeout, 5*time.Minute)
	def(&o.AckWait, 5*time.Second)
	def(&o.RegistrationWait, 10*time.Second)
	def(&o.PollInterval, 250*time.Millisecond)
	def(&o.ClaimPollInterval, 50*time.Millisecond)
	def(&o.StartWait, 60*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// detachedTimeout bounds the clean-up calls that must finish even when the caller's context is
// cancelled (discarding, returning a candidate): a cancelled request must not leave an instance
// half-handled.
const detachedTimeout = 30 * time.Second

func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), detachedTimeout)
}

// Registrar issues registration credentials, verifies registrations and discards failures.
type Registrar struct {
	st    Store
	watch *watcher // the shared poller of the waits
	gh    GitHub
	ec2   EC2
	opts  Options
	log   *slog.Logger
	// claimed learns how long claimed running instances take to register (expect.go).
	claimed regTimes
	// pinned holds, per pending registration (instance and run), the agent key its record had when
	// the credential was issued ("" when none was pinned yet): the key its signal must be signed by.
	pinned sync.Map
}

func pendingKey(instanceID, runID string) string { return instanceID + "\x00" + runID }

// NewRegistrar returns a Registrar.
func NewRegistrar(st Store, gh GitHub, ec2 EC2, opts Options) *Registrar {
	opts = opts.withDefaults()
	return &Registrar{st: st, watch: newWatcher(st, opts.Logger), gh: gh, ec2: ec2, opts: opts, log: opts.Logger}
}

// Issue gives the instance a registration credential for the run: a fresh registration token for
// scope, written to the instance's own credential item, then a wake-up tag so the agent reads it
// now rather than on its fallback timer. The record must belong to runID. labels are the runner's
// labels, the run's unique label first; empty means just runID.
func (r *Registrar) Issue(ctx context.Context, instanceID, runID, scope string, labels []string) error {
	in, err := r.st.Get(ctx, instanceID)
	if err != nil {
		return fmt.Errorf("issuing registration for %s: %w", instanceID, err)
	}
	if in.RunID != runID || runID == "" {
		return fmt.Errorf("issuing registration for %s: record belongs to run %q, not %q: %w", instanceID, in.RunID, runID, store.ErrConflict)
	}
	return r.IssueFor(ctx, in, scope, labels)
}

// IssueFor is Issue for a record the caller just wrote (the claim, or the create of a fresh
// instance): it skips the read and wakes the agent.
func (r *Registrar) IssueFor(ctx context.Context, in store.Instance, scope string, labels []string) error {
	_, err := r.issueWith(ctx, in, labels, func(ctx context.Context) (ghaccess.RunnerToken, error) {
		return r.gh.RegistrationToken(ctx, scope)
	})
	return err
}

// TokenFor returns a registration token source for scope that mints once, on first use, and hands
// every later caller the same token: a registration token registers any number of runners of its
// scope for an hour, so the instances of one provision share one (one GitHub request per
// provision, not per runner). Start mints at once, so the token is ready by the time a claim
// lands. A failed mint is not kept: the next caller tries again.
func (r *Registrar) TokenFor(scope string) *TokenSource {
	return &TokenSource{mint: func(ctx context.Context) (ghaccess.RunnerToken, error) { return r.gh.RegistrationToken(ctx, scope) }}
}

// TokenSource is a shared registration token of one scope (Registrar.TokenFor). At most one mint
// is in flight at a time: every caller that arrives while it runs waits for it and hears its outcome.
type TokenSource struct {
	mint func(context.Context) (ghaccess.RunnerToken, error)

	mu      sync.Mutex
	pending *mintFlight // the mint in flight; nil when none is
	tok     ghaccess.RunnerToken
	ok      bool
}

// mintFlight is one mint: done is closed once tok and err are set.
type mintFlight struct {
	done chan struct{}
	tok  ghaccess.RunnerToken
	err  error
}

// Start mints in the background (detached from ctx's cancellation, bounded by a minute).
func (ts *TokenSource) Start(ctx context.Context) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.startLocked(ctx)
}

// startLocked starts a mint unless the token is there or a mint is in flight, and returns the
// flight to wait for (nil when the token is there). ts.mu is held.
func (ts *TokenSource) startLocked(ctx context.Context) *mintFlight {
	if ts.ok || ts.pending != nil {
		return ts.pending
	}
	f := &mintFlight{done: make(chan struct{})}
	ts.pending = f
	go ts.run(context.WithoutCancel(ctx), f)
	return f
}

func (ts *TokenSource) run(ctx context.Context, f *mintFlight) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	f.tok, f.err = ts.mint(ctx)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if f.err == nil {
		ts.tok, ts.ok = f.tok, true
	}
	ts.pending = nil
	close(f.done)
}

// Token returns the shared token: at once when it is there, else the outcome of the mint in
// flight, starting one when none is (none started yet, or the last one failed).
func (ts *TokenSource) Token(ctx context.Context) (ghaccess.RunnerToken, error) {
	ts.mu.Lock()
	if ts.ok {
		tok := ts.tok
		ts.mu.Unlock()
		return tok, nil
	}
	f := ts.startLocked(ctx)
	ts.mu.Unlock()
	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		return ghaccess.RunnerToken{}, ctx.Err()
	}
}

// ErrNotIssued marks an Issue that failed before any credential was written (GitHub did not mint
// the registration token): the agent cannot have registered for the run.
var ErrNotIssued = errors.New("registration credential not issued")

// IssueWith is IssueFor with the token taken from a shared source.
func (r *Registrar) IssueWith(ctx context.Context, in store.Instance, labels []string, ts *TokenSource) error {
	_, err := r.issueWith(ctx, in, labels, ts.Token)
	return err
}

// issueClaim is IssueWith for a claim; noticed is false when the claim notice was not delivered, so
// the agent may notice the claim only on its fallback timer.
func (r *Registrar) issueClaim(ctx context.Context, in store.Instance, labels []string, ts *TokenSource) (noticed bool, err error) {
	return r.issueWith(ctx, in, labels, ts.Token)
}

func (r *Registrar) issueWith(ctx context.Context, in store.Instance, labels []string, token func(context.Context) (ghaccess.RunnerToken, error)) (noticed bool, _ error) {
	if in.RunID == "" {
		return false, fmt.Errorf("issuing registration for %s: record has no run: %w", in.ID, store.ErrInvalid)
	}
	if len(labels) == 0 {
		labels = []string{in.RunID}
	}
	tok, err := token(ctx)
	if err != nil {
		return false, fmt.Errorf("issuing registration for %s: %w: %w", in.ID, ErrNotIssued, err)
	}
	if tok.Token == "" || tok.URL == "" {
		return false, fmt.Errorf("issuing registration for %s: GitHub returned no token or URL", in.ID)
	}
	if err := r.st.PutCredential(ctx, in.ID, store.Credential{
		Kind: store.CredentialRegistration, RunID: in.RunID, URL: tok.URL, Token: tok.Token,
		Labels: labels, ExpiresAt: tok.ExpiresAt,
	}); err != nil {
		return false, fmt.Errorf("issuing registration for %s: %w", in.ID, err)
	}
	r.pinned.Store(pendingKey(in.ID, in.RunID), in.AgentKey)
	if err := wake.Notify(ctx, r.ec2, in.ID); err != nil {
		// Not fatal: the agent re-reads its record on its fallback timer.
		r.log.Warn("claim notice not delivered", "instance", in.ID, "run", in.RunID, "err", err)
		return false, nil
	}
	return true, nil
}

// WaitRegistered waits up to wait (RegistrationWait when 0) for the agent's UD_REG_OK signal for
// runID. It fails fast on UD_REG_FAILED or UD_FAILED for the run. The errors are
// ErrRegistrationTimeout, ErrRegistrationFailed (wrapped), or ctx's error. Transient read errors
// are retried on the next poll. It is the check of a freshly created or started instance, whose
// agent is still booting; a claimed running instance is checked with WaitClaimed.
func (r *Registrar) WaitRegistered(ctx context.Context, instanceID, runID string, wait time.Duration) error {
	return r.wait(ctx, instanceID, runID, wait, 0, r.opts.PollInterval, nil)
}

// WaitClaimed is WaitRegistered for an instance that was running (pooled, hot) when it was claimed:
// its agent must also acknowledge the claim within AckWait (at most half the wait), or it is judged
// dead (ErrNoAck) without waiting for the registration timeout. Liveness is judged by the
// acknowledgement naming this run (a value the control plane chose), never by comparing an
// instance's timestamps with the control plane's clock, so a skewed instance clock cannot stall the
// pool, and a run id of an earlier claim does not count. Its first read comes after
// ClaimPollInterval, the later ones back off up to PollInterval, and start over from
// ClaimPollInterval when the registration is expected, as learned from the claims verified before
// (expect.go).
func (r *Registrar) WaitClaimed(ctx context.Context, instanceID, runID string, wait time.Duration) error {
	if wait <= 0 {
		wait = r.opts.RegistrationWait
	}
	return r.wait(ctx, instanceID, runID, wait, min(r.opts.AckWait, wait/2), min(r.opts.ClaimPollInterval, r.opts.PollInterval), &r.claimed)
}

// wait reads the instance's reports through the shared poller, first after first, then backing off
// up to PollInterval, until the registration for runID, a failure, the acknowledgement's absence
// after ackWithin (0: not checked), the wait's end or ctx's. learn, when set, shapes the schedule
// with the registration time it expects, and learns from this one when it is verified.
func (r *Registrar) wait(ctx context.Context, instanceID, runID string, wait, ackWithin, first time.Duration, learn *regTimes) error {
	if wait <= 0 {
		wait = r.opts.RegistrationWait
	}
	var expect time.Duration
	if learn != nil {
		expect = learn.expect()
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var ackDue <-chan time.Time
	if ackWithin > 0 {
		t := time.NewTimer(ackWithin)
		defer t.Stop()
		ackDue = t.C
	}
	subscribed := time.Now()
	sub := r.watch.subscribe(instanceID, first, r.opts.PollInterval, expect)
	defer r.watch.unsubscribe(sub)
	defer r.pinned.Delete(pendingKey(instanceID, runID))

	var lastErr error
	var missed time.Duration // the last read that did not end the wait, from the subscription
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if lastErr != nil {
				return fmt.Errorf("instance %s, run %s: %w after %s (last read failed: %w)", instanceID, runID, ErrRegistrationTimeout, wait, lastErr)
			}
			return fmt.Errorf("instance %s, run %s: %w after %s", instanceID, runID, ErrRegistrationTimeout, wait)
		case <-ackDue:
			sub.withAck.Store(true)
		case o := <-sub.reported:
			done, err := r.judge(ctx, instanceID, runID, o, ackWithin, &lastErr)
			if done {
				if err == nil && learn != nil {
					learn.add(missed)
				}
				return err
			}
			if o.SignalErr == nil || errors.Is(o.SignalErr, store.ErrNotFound) {
				missed = max(missed, o.readAt.Sub(subscribed)) // read, and no registration yet
			}
			if o.acked && o.AckErr == nil && o.Ack.RunID == runID {
				sub.withAck.Store(false) // alive: wait for the registration
			}
		}
	}
}

// judge decides on one observation: done with nil (registered; the credential is withdrawn) or
// with the failure, or not done (lastErr keeps a failed read for the timeout's message). A failed
// read of the acknowledgement is tried again: liveness is not judged on a read error.
func (r *Registrar) judge(ctx context.Context, instanceID, runID string, o observation, ackWithin time.Duration, lastErr *error) (bool, error) {
	switch sig, err := o.Signal, o.SignalErr; {
	case err == nil:
		*lastErr = nil
		// Every report is judged, whatever it says: the first self-signed one pins the agent's key
		// (its boot report, written before any registration, when the wait sees it first).
		aerr := r.attributed(ctx, instanceID, runID, sig)
		if sig.RunID == runID && sig.Signal == store.SignalRegistered {
			// Anything holding the instance role can write the signal: it counts only when signed
			// by the key pinned for the instance's agent, which starts its runner only once it
			// reads that key pinned (agent/pin.go). A forged one, or an unsigned one while no key
			// is pinned, waits out the registration wait, and the instance is discarded before
			// the run is answered.
			if err := aerr; err != nil {
				*lastErr = err
				return false, nil
			}
			r.withdraw(ctx, instanceID, runID)
			return true, nil
		}
		if failed(sig, runID) {
			if sig.Signal == store.SignalRegistrationFailed && strings.HasPrefix(sig.Detail, runnerversion.RefusedDetail) {
				return true, fmt.Errorf("instance %s, run %s: %w: %w: agent sent %s %s", instanceID, runID, ErrRegistrationFailed, ErrRunnerVersionRefused, sig.Signal, sig.Detail)
			}
			return true, fmt.Errorf("instance %s, run %s: %w: agent sent %s %s", instanceID, runID, ErrRegistrationFailed, sig.Signal, sig.Detail)
		}
	case errors.Is(err, store.ErrNotFound):
		*lastErr = nil
	default:
		*lastErr = err
	}
	if !o.acked {
		return false, nil
	}
	if ack, err := o.Ack, o.AckErr; (err == nil && ack.RunID != runID) || errors.Is(err, store.ErrNotFound) {
		return true, fmt.Errorf("instance %s, run %s: %w within %s", instanceID, runID, ErrNoAck, ackWithin)
	}
	return false, nil
}

// attributed checks that a report of the instance is its agent's (store/attribution.go): signed by
// the key pinned in its record, or, when none is pinned yet, by the key it names, which is pinned
// now (Store.Attribute: the first self-signed report the control plane sees, whatever it reports).
// An unsigned report is not: no key attributes it, and the agent would not start its runner.
func (r *Registrar) attributed(ctx context.Context, instanceID, runID string, sig store.SignalRecord) error {
	rec := store.Instance{ID: instanceID}
	if v, ok := r.pinned.Load(pendingKey(instanceID, runID)); ok {
		rec.AgentKey = v.(string)
	} else if cur, err := r.st.Get(ctx, instanceID); err == nil {
		rec = cur
	} else {
		return fmt.Errorf("report of %s: reading its pinned key: %w", instanceID, err)
	}
	rec, believed, err := r.st.Attribute(ctx, rec, sig)
	if err != nil {
		return fmt.Errorf("report of %s: %w", instanceID, err)
	}
	r.pinned.Store(pendingKey(instanceID, runID), rec.AgentKey)
	switch {
	case !believed:
		return fmt.Errorf("%s report of %s is not signed by its agent's key", sig.Signal, instanceID)
	case rec.AgentKey == "":
		return fmt.Errorf("%s report of %s is unsigned and no key is pinned", sig.Signal, instanceID)
	}
	return nil
}

// withdraw deletes the run's registration credential once the agent reported its registration: the
// agent can only read its credential items, so single use is the control plane's job (a JIT config
// is single-use at GitHub as well). A failure only leaves the token until its TTL.
func (r *Registrar) withdraw(ctx context.Context, instanceID, runID string) {
	if _, err := r.st.TakeCredential(ctx, instanceID, store.CredentialRegistration, runID); err != nil &&
		!errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		r.log.Warn("registration credential not withdrawn", "instance", instanceID, "run", runID, "err", err)
	}
}

// failed reports whether a signal ends the wait for runID unsuccessfully. A UD_FAILED without a run
// id is the pre-runner script failing now: no earlier one can be the last signal of an instance
// that reached the pool or was just created.
func failed(sig store.SignalRecord, runID string) bool {
	switch sig.Signal {
	case store.SignalRegistrationFailed, store.SignalRunnerOutdated: // outdated: registered, given no job
		return sig.RunID == runID
	case store.SignalPreRunnerFailed:
		return sig.RunID == runID || sig.RunID == ""
	}
	return false
}

// ErrNotTerminatedYet: Discard expired the record, but TerminateInstances answered NotFound, which
// for an instance launched moments ago is EC2's eventual consistency, not proof it is gone: the
// instance may run until refresh terminates it and ends the record.
var ErrNotTerminatedYet = errors.New("not terminated yet: EC2 does not show the instance (record expired; refresh terminates it)")

// Discard is the failure path of an instance of runID (runID empty: whatever run): it expires the
// record first, so that whatever happens next refresh (and the instance itself) finish the job;
// then terminates the instance and marks the record terminated. It is idempotent, and it never
// touches an instance whose record belongs to another run. An error wrapping ErrNotTerminatedYet
// says the record is expired and the instance not terminated yet.
func (r *Registrar) Discard(ctx context.Context, instanceID, runID, reason string) error {
	if reason == "" {
		reason = "discarded"
	}
	if _, err := r.st.Expire(ctx, instanceID, runID, reason); err != nil {
		if ce := (*store.ConflictError)(nil); errors.As(err, &ce) && ce.Current == store.StateTerminated {
			return nil // discarded already
		}
		return fmt.Errorf("discarding %s: %w", instanceID, err)
	}
	if runID != "" {
		// Withdraw a credential the agent never took, so a late agent does not register.
		if _, err := r.st.TakeCredential(ctx, instanceID, store.CredentialRegistration, runID); err != nil &&
			!errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
			r.log.Warn("registration credential not withdrawn", "instance", instanceID, "run", runID, "err", err)
		}
	}
	switch _, err := r.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{instanceID}}); {
	case terminate.Gone(err):
		// No proof: EC2 may not show an instance launched moments ago. The record stays
		// expired; refresh terminates the instance and ends it (terminate.Result.Proven).
		return fmt.Errorf("discarding %s: %w: %w", instanceID, ErrNotTerminatedYet, err)
	case err != nil:
		return fmt.Errorf("discarding %s: terminating (record expired; refresh retries): %w", instanceID, err)
	}
	if _, err := r.st.Transition(ctx, instanceID, store.Change{
		From: store.LiveStates, To: store.StateTerminated, RunID: runID, Reason: reason,
	}); err != nil {
		if ce := (*store.ConflictError)(nil); errors.As(err, &ce) && ce.Current == store.StateTerminated {
			return nil
		}
		return fmt.Errorf("discarding %s: instance terminated, record not updated (refresh finishes it): %w", instanceID, err)
	}
	return nil
}
