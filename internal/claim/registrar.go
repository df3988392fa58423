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
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
)

// Store is the part of *store.Store claim uses.
type Store interface {
	Get(ctx context.Context, id string) (store.Instance, error)
	Claim(ctx context.Context, id, runID string, threshold time.Time, from ...store.State) (store.Instance, error)
	Transition(ctx context.Context, id string, c store.Change) (store.Instance, error)
	Expire(ctx context.Context, id, runID, reason string) (store.Instance, error)
	PutCredential(ctx context.Context, id string, c store.Credential) error
	TakeCredential(ctx context.Context, id string, kind store.CredentialKind, runID string) (store.Credential, error)
	LastSignal(ctx context.Context, id string) (store.SignalRecord, error)
	LastAck(ctx context.Context, id string, kind store.CredentialKind) (store.Ack, error)
	Heartbeat(ctx context.Context, id string) (time.Time, error)
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
}

// The ways a claimed instance fails its checks. Each makes the instance non-viable: it is
// discarded (expired, terminated) and never handed to a run.
var (
	// ErrRegistrationTimeout: no registration signal for the run within the wait.
	ErrRegistrationTimeout = errors.New("registration timed out")
	// ErrRegistrationFailed: the agent reported that registering (or its pre-runner script) failed.
	ErrRegistrationFailed = errors.New("registration failed")
	// ErrStaleHeartbeat: the instance's heartbeat is missing or older than HeartbeatMaxAge.
	ErrStaleHeartbeat = errors.New("stale heartbeat")
)

// CheckFailed reports whether err says the instance failed a check (rather than the control plane
// failing to check it).
func CheckFailed(err error) bool {
	return errors.Is(err, ErrRegistrationTimeout) || errors.Is(err, ErrRegistrationFailed) || errors.Is(err, ErrStaleHeartbeat)
}

// Options tunes the Registrar and the Claimer. Zero values take the defaults.
type Options struct {
	ClaimTimeout     time.Duration // threshold of the claimed state; default 5 min
	HeartbeatMaxAge  time.Duration // oldest acceptable heartbeat; default 15 s
	RegistrationWait time.Duration // wait for a reused instance's registration; default 10 s
	PollInterval     time.Duration // signal polling; default 250 ms
	ReleaseWait      time.Duration // wait for the agent's deregistration when unclaiming; default 120 s
	// StartWait bounds how long a stopped instance EC2 will not start yet (still stopping) is tried
	// again before it is given up; default 60 s.
	StartWait time.Duration
	Now       func() time.Time
	Logger    *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.ClaimTimeout, 5*time.Minute)
	def(&o.HeartbeatMaxAge, 15*time.Second)
	def(&o.RegistrationWait, 10*time.Second)
	def(&o.PollInterval, 250*time.Millisecond)
	def(&o.ReleaseWait, 120*time.Second)
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
	st   Store
	gh   GitHub
	ec2  EC2
	opts Options
	log  *slog.Logger
}

// NewRegistrar returns a Registrar.
func NewRegistrar(st Store, gh GitHub, ec2 EC2, opts Options) *Registrar {
	opts = opts.withDefaults()
	return &Registrar{st: st, gh: gh, ec2: ec2, opts: opts, log: opts.Logger}
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
// instance): it skips the read and wakes the agent with the record's version.
func (r *Registrar) IssueFor(ctx context.Context, in store.Instance, scope string, labels []string) error {
	if in.RunID == "" {
		return fmt.Errorf("issuing registration for %s: record has no run: %w", in.ID, store.ErrInvalid)
	}
	if len(labels) == 0 {
		labels = []string{in.RunID}
	}
	tok, err := r.gh.RegistrationToken(ctx, scope)
	if err != nil {
		return fmt.Errorf("issuing registration for %s: %w", in.ID, err)
	}
	if tok.Token == "" || tok.URL == "" {
		return fmt.Errorf("issuing registration for %s: GitHub returned no token or URL for %q", in.ID, scope)
	}
	if err := r.st.PutCredential(ctx, in.ID, store.Credential{
		Kind: store.CredentialRegistration, RunID: in.RunID, URL: tok.URL, Token: tok.Token,
		Labels: labels, ExpiresAt: tok.ExpiresAt,
	}); err != nil {
		return fmt.Errorf("issuing registration for %s: %w", in.ID, err)
	}
	if err := wake.Notify(ctx, r.ec2, in.ID, in.Version); err != nil {
		// Not fatal: the agent re-reads its record on its fallback timer.
		r.log.Warn("claim notice not delivered", "instance", in.ID, "run", in.RunID, "err", err)
	}
	return nil
}

// WaitRegistered waits up to wait (RegistrationWait when 0) for the agent's UD_REG_OK signal for
// runID, then checks that the instance's heartbeat is at most HeartbeatMaxAge old. It fails fast
// on UD_REG_FAILED or UD_FAILED for the run, and on a heartbeat already stale when it starts (a
// dead agent cannot register, so there is no point waiting for it). The errors are
// ErrRegistrationTimeout, ErrRegistrationFailed, ErrStaleHeartbeat (wrapped), or ctx's error.
// Transient read errors are retried on the next poll.
func (r *Registrar) WaitRegistered(ctx context.Context, instanceID, runID string, wait time.Duration) error {
	if wait <= 0 {
		wait = r.opts.RegistrationWait
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(r.opts.PollInterval)
	defer tick.Stop()

	// One early heartbeat read: an instance that exists but stopped beating fails now rather than
	// after the full wait. A missing heartbeat is not judged yet (a fresh instance may still be
	// booting); the final check decides.
	hb, hbErr := r.st.Heartbeat(ctx, instanceID)
	switch {
	case hbErr == nil:
		if age := r.opts.Now().Sub(hb); age > r.opts.HeartbeatMaxAge {
			return fmt.Errorf("instance %s: %w: last heartbeat %s ago (max %s)", instanceID, ErrStaleHeartbeat, age.Round(time.Millisecond), r.opts.HeartbeatMaxAge)
		}
	case ctx.Err() != nil:
		return ctx.Err()
	}

	var lastErr error
	for {
		sig, err := r.st.LastSignal(ctx, instanceID)
		switch {
		case err == nil:
			lastErr = nil
			if sig.RunID == runID && sig.Signal == store.SignalRegistered {
				if err := r.checkHeartbeat(ctx, instanceID, hb, hbErr); err != nil {
					return err
				}
				r.withdraw(ctx, instanceID, runID)
				return nil
			}
			if failed(sig, runID) {
				return fmt.Errorf("instance %s, run %s: %w: agent sent %s %s", instanceID, runID, ErrRegistrationFailed, sig.Signal, sig.Detail)
			}
		case errors.Is(err, store.ErrNotFound):
			lastErr = nil
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if lastErr != nil {
				return fmt.Errorf("instance %s, run %s: %w after %s (last read failed: %w)", instanceID, runID, ErrRegistrationTimeout, wait, lastErr)
			}
			return fmt.Errorf("instance %s, run %s: %w after %s", instanceID, runID, ErrRegistrationTimeout, wait)
		case <-tick.C:
		}
	}
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
	case store.SignalRegistrationFailed:
		return sig.RunID == runID
	case store.SignalPreRunnerFailed:
		return sig.RunID == runID || sig.RunID == ""
	}
	return false
}

// checkHeartbeat passes when the heartbeat read earlier is still young enough, else reads it again.
func (r *Registrar) checkHeartbeat(ctx context.Context, instanceID string, hb time.Time, hbErr error) error {
	if hbErr == nil && r.opts.Now().Sub(hb) <= r.opts.HeartbeatMaxAge {
		return nil
	}
	hb, err := r.st.Heartbeat(ctx, instanceID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("instance %s: %w: no heartbeat", instanceID, ErrStaleHeartbeat)
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		// Liveness cannot be shown: the instance is not handed to a run on faith.
		return fmt.Errorf("instance %s: %w: %w", instanceID, ErrStaleHeartbeat, err)
	}
	if age := r.opts.Now().Sub(hb); age > r.opts.HeartbeatMaxAge {
		return fmt.Errorf("instance %s: %w: last heartbeat %s ago (max %s)", instanceID, ErrStaleHeartbeat, age.Round(time.Millisecond), r.opts.HeartbeatMaxAge)
	}
	return nil
}

// Discard is the failure path of an instance of runID (runID empty: whatever run): it expires the
// record first, so that whatever happens next refresh (and the instance itself) finish the job;
// then terminates the instance and marks the record terminated. It is idempotent, and it never
// touches an instance whose record belongs to another run.
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
	if _, err := r.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{instanceID}}); err != nil && !instanceGone(err) {
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

// instanceGone reports an EC2 error saying the instance does not exist (any more): EC2 forgets
// terminated instances about an hour after termination.
func instanceGone(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed":
		return true
	}
	return false
}
