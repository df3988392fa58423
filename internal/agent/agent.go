// agent.go: the agent's main loop. It reads its record, decides what the record asks for (register for
// a run, release a run, terminate), does it, and waits for the next reason to look again: a notice, a
// deadline (threshold + grace), the runner stopping, or a retry.
package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// RunnerName is the name an instance's runner registers under. It is the same for every run, so
// config.sh --replace takes over a registration a crashed agent left behind.
func RunnerName(instanceID string) string { return "runnerpool-" + instanceID }

// Run runs the agent until its instance is terminated (it returns nil after its own successful
// TerminateInstances) or ctx is done (it stops the runner, leaves the registration for the next start to
// resume, and returns nil). It returns an error only for a configuration it cannot work with.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	id := Identity{InstanceID: cfg.InstanceID}
	if id.InstanceID == "" {
		id, err = readIdentityRetrying(ctx, cfg.IMDS, time.Second, 60)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	log := cfg.Logger.With("instance", id.InstanceID)
	log.Info("agent: starting", "type", id.InstanceType, "zone", id.AvailabilityZone, "notice", cfg.Notice)
	rn, err := cfg.NewRunner(id.InstanceID)
	if err != nil {
		return fmt.Errorf("agent: runner driver: %w", err)
	}
	notice, err := NewNotice(cfg.Notice, cfg.IMDS, cfg.NoticeInterval, cfg.FallbackInterval, log)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("agent: state directory: %w", err)
	}
	key, err := signingKey(cfg.StateDir)
	if err != nil {
		return err
	}
	a := &agent{
		cfg: cfg, id: id.InstanceID, log: log, runner: rn, notice: notice,
		boot: cfg.Now(), wake: make(chan struct{}, 1), key: key, spot: make(chan string, 1),
	}
	if cfg.Cache != nil {
		a.cache = a.startCache(ctx)
	}
	a.run(ctx)
	return nil
}

// signingKey is the instance's signing key, made at its first boot and kept in the root-only state
// directory (0600 in a 0700 directory), so a stopped instance started again signs with the same
// key. The control plane pins its public half at the first self-signed report it reads, and the
// runner starts only once the agent reads it pinned (pin.go), so before any job ran; from then on
// the control plane believes only signals signed with it (store/attribution.go): a job that reached
// the instance role but not root cannot forge a registration or a release.
func signingKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, "signing.key")
	if b, err := os.ReadFile(path); err == nil && len(b) == ed25519.SeedSize {
		return ed25519.NewKeyFromSeed(b), nil
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("agent: signing key: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, key.Seed(), 0o600); err != nil {
		return nil, fmt.Errorf("agent: writing the signing key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("agent: writing the signing key: %w", err)
	}
	return key, nil
}

// agent is one agent's state. Only the main loop touches it.
type agent struct {
	cfg    Config
	id     string
	log    *slog.Logger
	runner runner.Runner
	notice Notice
	boot   time.Time
	wake   chan struct{}

	failed   bool        // the pre-runner script failed: wait for termination, do nothing else
	marker   marker      // which run the runner is configured for (persisted in StateDir)
	proc     *runnerProc // the running runner, nil when stopped
	restarts int         // consecutive unexpected runner exits (backoff)
	startAt  time.Time   // when to (re)start the runner
	// outdated is set once the runner exited because GitHub refused its version (a security release,
	// or 30 days behind): it is not restarted, and the instance is never pooled again.
	outdated string
	retryAt  time.Time       // when to re-read after a failed read
	deadline time.Time       // threshold + grace of the last record
	resumed  bool            // the restart checks ran
	regGiven map[string]bool // runs registration was abandoned for (signalled UD_REG_FAILED)
	// regReady is the run whose registration passed its checks (taint, installation, Docker) and
	// waits for its credential: the control plane writes it once GitHub mints the token, which a
	// GitHub outage or rate limit delays past CredentialWait. Later steps look again (credLate)
	// without repeating the checks.
	regReady string
	credLate int             // consecutive looks that found regReady's credential missing (back-off)
	relGiven map[string]bool // runs release was abandoned for (signalled UD_REMOVE_REG_FAILED)
	pinSince time.Time       // when the registered runner began waiting for the key's pin (pin.go)
	pinLooks int             // reads of the record since pinSince (back-off)
	last     store.SignalRecord
	key      ed25519.PrivateKey // the instance's signing key (signingKey)

	taintReason string      // why this instance serves no further run (see taint)
	spot        chan string // the spot interruption notice, from watchSpot
	spotNotice  string      // the notice once handled: no further run, never pooled again

	cache *runCache // the runner cache's server (cache.go); nil when off or not started
}

// runnerProc is a runner's Run in its goroutine.
type runnerProc struct {
	run    string
	cancel context.CancelFunc
	done   chan error
}

// marker is the agent's note of the runner's configuration: written before registering (so a crash
// mid-registration still leads to a removal) and removed once the runner is deregistered.
type marker struct {
	RunID      string `json:"run_id,omitempty"`
	Registered bool   `json:"registered,omitempty"` // Register succeeded
	// Deregistered: the runner of RunID is removed (or never registered); its release's clean-up
	// and confirmation remain. The run id a restarted agent confirms comes from here, its own
	// root-only file, never from the table, whose agent partition a job can write.
	Deregistered bool `json:"deregistered,omitempty"`
	// Spent: the runner of RunID ran its just-in-time registration and exited (runner.ErrSpent). It
	// is not started again, after an agent restart either: the control plane ends the instance, or
	// releases it for another run.
	Spent bool `json:"spent,omitempty"`
}

func (a *agent) markerPath() string { return filepath.Join(a.cfg.StateDir, "runner.json") }

// taintPath marks an instance whose release failed: it never registers again (the file survives an
// agent restart; the instance is expired by the control plane and terminates itself).
func (a *agent) taintPath() string { return filepath.Join(a.cfg.StateDir, "tainted") }

func (a *agent) taint(reason string) {
	if err := os.WriteFile(a.taintPath(), []byte(lastBytes(reason, 1024)), 0o600); err != nil {
		a.log.Error("agent: recording the failed release", "err", err)
	}
	a.taintReason = reason
}

// tainted is why the instance must not serve another run ("" when it may).
func (a *agent) tainted() string {
	if a.taintReason != "" {
		return a.taintReason
	}
	if b, err := os.ReadFile(a.taintPath()); err == nil {
		a.taintReason = string(b)
		if a.taintReason == "" {
			a.taintReason = "unknown"
		}
	}
	return a.taintReason
}

func (a *agent) loadMarker() error {
	b, err := os.ReadFile(a.markerPath())
	if errors.Is(err, os.ErrNotExist) {
		a.marker = marker{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", a.markerPath(), err)
	}
	if err := json.Unmarshal(b, &a.marker); err != nil {
		// Writes go through a rename, so this is corruption. Forgetting the marker is safe: without it
		// no release is confirmed, the control plane's release times out and the instance is never
		// pooled.
		a.log.Warn("agent: unreadable runner marker, ignoring it", "err", err)
		a.marker = marker{}
	}
	return nil
}

func (a *agent) saveMarker(m marker) error {
	if m.RunID == "" {
		if err := os.Remove(a.markerPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing runner marker: %w", err)
		}
		a.marker = m
		return nil
	}
	b, _ := json.Marshal(m)
	tmp := a.markerPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing runner marker: %w", err)
	}
	if err := os.Rename(tmp, a.markerPath()); err != nil {
		return fmt.Errorf("writing runner marker: %w", err)
	}
	a.marker = m
	return nil
}

// maxCredentialLook caps the back-off between looks for a late registration credential.
const maxCredentialLook = 5 * time.Second

func (a *agent) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.regGiven, a.relGiven = map[string]bool{}, map[string]bool{}
	defer a.stopRunner()

	go a.heartbeat(ctx)
	go a.watchSpot(ctx)
	go func() {
		for a.notice.Wait(ctx) == nil {
			select {
			case a.wake <- struct{}{}:
			default: // a wake is pending already
			}
		}
	}()

	if err := a.loadMarker(); err != nil {
		a.log.Error("agent: state directory unusable", "err", err)
	}
	if !a.bootSignal(ctx) {
		return
	}

	for ctx.Err() == nil {
		if exit := a.step(ctx); exit {
			return
		}
		a.waitEvent(ctx)
	}
}

// bootSignal reads the last signal: none means first boot, so the pre-runner script runs. It reports false
// when ctx ended first.
func (a *agent) bootSignal(ctx context.Context) bool {
	for {
		last, err := a.cfg.Store.LastSignal(ctx, a.id)
		switch {
		case err == nil:
			a.last = last
			a.failed = last.Signal == store.SignalPreRunnerFailed
			if a.failed {
				a.log.Warn("agent: the pre-runner script failed earlier; waiting for termination")
			}
			return true
		case errors.Is(err, store.ErrNotFound):
			a.preRunner(ctx)
			return ctx.Err() == nil
		}
		if ctx.Err() != nil {
			return false
		}
		a.log.Warn("agent: reading last signal", "err", err)
		if !sleep(ctx, time.Second) {
			return false
		}
	}
}

func (a *agent) preRunner(ctx context.Context) {
	sig := store.SignalRecord{Signal: store.SignalPreRunnerOK}
	if err := a.grant(ctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		a.log.Error("agent: the class's job access was not granted", "err", err)
		a.failed = true
		a.signal(ctx, store.SignalRecord{Signal: store.SignalPreRunnerFailed, Detail: lastBytes(err.Error(), 1024)})
		return
	}
	if a.cfg.PreRunnerScript != "" {
		a.log.Info("agent: running the pre-runner script", "path", a.cfg.PreRunnerScript)
		tail, err := runPreRunner(ctx, a.cfg.PreRunnerScript, a.cfg.PreRunnerTimeout)
		if ctx.Err() != nil {
			return // stopped meanwhile: the next start runs it again
		}
		if err != nil {
			a.log.Error("agent: the pre-runner script failed", "err", err, "output", tail)
			a.failed = true
			sig = store.SignalRecord{Signal: store.SignalPreRunnerFailed, Detail: lastBytes(err.Error()+": "+tail, 1024)}
		} else {
			a.log.Info("agent: the pre-runner script succeeded", "output", lastBytes(tail, 1024))
		}
	}
	a.signal(ctx, sig)
}

// grant decides and applies what the class's job access hands the runner user (posture.go).
func (a *agent) grant(ctx context.Context) error {
	g, err := GrantFor(a.cfg.JobAccess, a.cfg.RunnerUser)
	if err != nil {
		return fmt.Errorf("job access: %w", err)
	}
	if err := a.cfg.Host.Apply(ctx, a.cfg.RunnerUser, g); err != nil {
		return fmt.Errorf("job access %s: %w", g.JobAccess, err)
	}
	a.log.Info("agent: job access granted", "grant", g.String())
	return nil
}

// signal writes a signal, retrying until it is written or ctx ends: the control plane waits for it.
func (a *agent) signal(ctx context.Context, sig store.SignalRecord) {
	sig.Sign(a.id, a.key, a.cfg.Now())
	for {
		err := a.cfg.Store.PutSignal(ctx, a.id, sig)
		if err == nil {
			a.last = sig
			a.log.Info("agent: signalled", "signal", sig.Signal, "run", sig.RunID, "detail", sig.Detail)
			return
		}
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("agent: writing signal", "signal", sig.Signal, "err", err)
		if !sleep(ctx, a.cfg.RetryInterval) {
			return
		}
	}
}

func (a *agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if err := a.cfg.Store.PutHeartbeat(ctx, a.id); err != nil && ctx.Err() == nil {
			a.log.Warn("agent: writing heartbeat", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// read reads the record; found is false when there is none.
func (a *agent) read(ctx context.Context) (rec store.Instance, found bool, err error) {
	rec, err = a.cfg.Store.Get(ctx, a.id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if a.cfg.OnRecord != nil {
		a.cfg.OnRecord(rec)
	}
	return rec, true, nil
}

// step reads the record and does what it asks; it reports true when the agent is done (terminated).
func (a *agent) step(ctx context.Context) bool {
	select {
	case doc := <-a.spot:
		a.spotInterrupted(ctx, doc)
	default:
	}
	rec, found, err := a.read(ctx)
	if err != nil {
		return a.unreadable(ctx, err)
	}
	a.retryAt = time.Time{}
	now := a.cfg.Now()
	if !found {
		return a.unrecorded(ctx, now)
	}
	switch {
	case !rec.State.Live(), rec.State == store.StateTerminating:
		return a.terminate(ctx, "record is "+string(rec.State))
	case !rec.Threshold.IsZero() && !now.Before(rec.Threshold.Add(a.cfg.Grace)):
		return a.terminate(ctx, fmt.Sprintf("threshold %s of state %s passed %s ago (grace %s)",
			rec.Threshold.Format(time.RFC3339), rec.State, now.Sub(rec.Threshold).Round(time.Second), a.cfg.Grace))
	}
	a.deadline = time.Time{}
	if !rec.Threshold.IsZero() {
		a.deadline = rec.Threshold.Add(a.cfg.Grace)
	}
	if a.failed {
		return false
	}
	if !a.resumed {
		a.resumed = true
		a.resume(ctx, rec)
	}

	switch rec.State {
	case store.StateCreated, store.StateClaimed, store.StateRunning:
		a.serveRun(ctx, rec)
	case store.StateIdle, store.StateReady:
		a.regReady, a.credLate = "", 0 // handed back: a later claim checks again
		a.pinSince, a.pinLooks = time.Time{}, 0
		if rec.RunID == "" && a.marker.RunID != "" && !a.relGiven[a.marker.RunID] {
			a.release(ctx, a.marker.RunID)
		}
		if a.proc == nil {
			a.cache.handedBack() // back in the pool: the disk keeps what the last jobs read from S3
		}
	}
	return false
}

// unreadable handles a record the agent could not read (err); it reports true when the agent is
// done (terminated).
func (a *agent) unreadable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	a.log.Warn("agent: reading record", "err", err)
	// Every threshold is enforced twice (DESIGN rule 4): a record the agent cannot read does not
	// suspend the deadline it last read, plus its grace.
	if !a.deadline.IsZero() && !a.cfg.Now().Before(a.deadline) {
		return a.terminate(ctx, fmt.Sprintf("record unreadable (%v) and the last deadline read, %s with grace, passed",
			err, a.deadline.Format(time.RFC3339)))
	}
	a.retryAt = a.cfg.Now().Add(a.cfg.RetryInterval * 4)
	return false
}

// unrecorded handles a record not (or not yet) written; it reports true when the agent is done
// (terminated: no record within the orphan grace after boot).
func (a *agent) unrecorded(ctx context.Context, now time.Time) bool {
	a.deadline = a.boot.Add(a.cfg.OrphanGrace)
	if !now.Before(a.deadline) {
		return a.terminate(ctx, fmt.Sprintf("no record in the state table %s after boot", a.cfg.OrphanGrace))
	}
	// The control plane writes the record right after the launch returns: look again soon rather
	// than at the next fallback read (only until the record shows or the orphan grace ends).
	a.retryAt = now.Add(a.cfg.RetryInterval * 4)
	return false
}

// serveRun does what a record created, claimed or running for a run asks: register the run's
// runner, keep it running, or first finish the release of an earlier run.
func (a *agent) serveRun(ctx context.Context, rec store.Instance) {
	if rec.RunID == "" {
		a.log.Warn("agent: record has no run id", "state", rec.State)
		return
	}
	if a.tainted() != "" && rec.RunID != a.marker.RunID {
		// A failed release: no new run, and the claim hears why at once (register refuses).
		if !a.regGiven[rec.RunID] {
			a.register(ctx, rec)
		}
		return
	}
	if a.marker.RunID != "" && a.marker.RunID != rec.RunID && !a.relGiven[a.marker.RunID] {
		// Released and claimed again between two reads: finish the old run first.
		a.release(ctx, a.marker.RunID)
	}
	if a.marker.RunID == rec.RunID && a.marker.Registered {
		if !a.regGiven[rec.RunID] {
			a.ensureRunning(ctx, rec)
		}
		return
	}
	if !a.regGiven[rec.RunID] && (a.marker.RunID == "" || a.marker.RunID == rec.RunID) {
		a.register(ctx, rec)
	}
}

// resume runs once, at the first record read after start, and finishes what a crashed agent left:
// a runner that was configured for the run of the record is simply run again (as after a reboot, the
// real runner keeps its registration); a release the last signal does not confirm is done again.
func (a *agent) resume(ctx context.Context, rec store.Instance) {
	switch {
	case a.marker.Deregistered:
		// Deregistered but the release was not confirmed: clean again and confirm the run of the
		// agent's own marker, so the control plane can pool the instance.
		a.log.Info("agent: resuming an unconfirmed release", "run", a.marker.RunID, "last_signal", a.last.Signal)
		a.finishRelease(ctx, a.marker.RunID)
	case a.marker.RunID != "":
		a.log.Info("agent: resuming", "state", rec.State, "record_run", rec.RunID, "runner_run", a.marker.RunID,
			"registered", a.marker.Registered, "last_signal", a.last.Signal)
		if a.marker.RunID == rec.RunID && a.marker.Registered &&
			!(a.last.Signal == store.SignalRegistered && a.last.RunID == rec.RunID) {
			// Registered but crashed before the signal: the runner is ours, say so.
			a.signal(ctx, store.SignalRecord{Signal: store.SignalRegistered, RunID: rec.RunID})
		}
	}
}

// register takes the registration credential of rec's run, registers the runner and starts it
// once its key is pinned (pin.go).
func (a *agent) register(ctx context.Context, rec store.Instance) {
	runID := rec.RunID
	log := a.log.With("run", runID)
	if a.regReady == runID {
		a.registerWith(ctx, rec, log)
		return
	}
	if reason := a.tainted(); reason != "" {
		// A release that could not deregister or clean up leaves whatever the last job left: this
		// instance serves no other run, whatever the record (or a forged signal that pooled it) says.
		log.Error("agent: refusing to register: an earlier release failed", "reason", reason)
		a.giveUpRegistration(ctx, runID, "an earlier release failed, the instance is not reused: "+reason)
		return
	}
	if err := a.checkRunner(ctx, true); err != nil { // integrity.go
		if ctx.Err() != nil {
			return
		}
		log.Error("agent: runner installation not fit to register", "err", err)
		a.giveUpRegistration(ctx, runID, err.Error())
		return
	}
	if d := a.cfg.RootlessDocker; d != nil {
		// The job's Docker daemon answers before its runner is registered: started after the
		// check above killed every process of the runner user, so it is the agent's own.
		if err := d.Start(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("agent: the runner user's docker daemon does not start", "err", err)
			a.giveUpRegistration(ctx, runID, err.Error())
			return
		}
	}
	a.regReady, a.credLate = runID, 0
	a.registerWith(ctx, rec, log)
}

// registerWith takes the registration credential of rec's run (its checks passed) and registers. A
// credential not written yet, for a run the agent never registered for, is late, not missing: the
// control plane writes it once GitHub mints the token, so the agent looks again at a later step
// (back-off up to maxCredentialLook) for as long as its record is claimed or created for the run.
// The control plane's registration wait, and the record's threshold, bound the wait; failing the
// run after CredentialWait instead turned every GitHub outage longer than it into provisions
// failed and healthy instances terminated.
func (a *agent) registerWith(ctx context.Context, rec store.Instance, log *slog.Logger) {
	runID := rec.RunID
	wait := a.cfg.CredentialWait
	if a.credLate > 0 {
		wait = 0 // a later look: one read, then back to the step loop (spot notices, deadlines)
	}
	cred, err := a.takeCredentialWithin(ctx, store.CredentialRegistration, runID, wait)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		reregistering := a.last.Signal == store.SignalRegistered && a.last.RunID == runID
		if errors.Is(err, store.ErrNotFound) && !reregistering {
			a.credLate++
			next := min(a.cfg.RetryInterval<<min(a.credLate, 6), maxCredentialLook)
			if a.credLate == 1 {
				log.Warn("agent: registration credential not written yet; looking again while the record names the run", "next", next)
			}
			a.retryAt = a.cfg.Now().Add(next)
			return
		}
		// Already registered for the run once (a runner whose registration is gone): the credential
		// was used and withdrawn, and no new one comes.
		a.regReady, a.credLate = "", 0
		log.Error("agent: no registration credential", "err", err)
		a.giveUpRegistration(ctx, runID, "no registration credential: "+err.Error())
		return
	}
	a.regReady, a.credLate = "", 0
	if err := a.saveMarker(marker{RunID: runID}); err != nil {
		a.giveUpRegistration(ctx, runID, err.Error())
		return
	}
	if err := a.runner.Register(ctx, cred, RunnerName(a.id)); err != nil {
		if ctx.Err() != nil {
			return
		}
		log.Error("agent: registering runner", "err", err)
		detail := "registering runner: " + err.Error()
		if errors.Is(err, runner.ErrVersionRefused) {
			detail = runnerversion.RefusedDetail + ": " + err.Error()
		}
		a.giveUpRegistration(ctx, runID, detail)
		return
	}
	if err := a.saveMarker(marker{RunID: runID, Registered: true}); err != nil {
		log.Error("agent: runner registered but not recorded", "err", err)
	}
	a.restarts = 0
	// The signed report goes first, and the runner starts only once the record pins the agent's
	// key (pin.go): no job can run on the instance before the control plane pinned the key of the
	// agent's own reports, not one a job wrote in their place. A key pinned already (a warm
	// instance's, at its warm-up) starts it now; otherwise the step loop looks again.
	a.signal(ctx, store.SignalRecord{Signal: store.SignalRegistered, RunID: runID})
	if ctx.Err() != nil {
		return // not reported: the next start resumes (the marker says registered)
	}
	if rec.AgentKey == "" {
		a.retryAt = a.cfg.Now() // the report may have been pinned by now: read the record at once
		return
	}
	a.ensureRunning(ctx, rec)
}

func (a *agent) giveUpRegistration(ctx context.Context, runID, detail string) {
	a.regGiven[runID] = true
	a.signal(ctx, store.SignalRecord{Signal: store.SignalRegistrationFailed, RunID: runID, Detail: lastBytes(detail, 1024)})
}

// takeCredential reads a credential from the instance's control-plane item, waiting up to
// CredentialWait for the control plane to write it (it writes it before the claim or release it
// belongs to, but a retried claim may be a moment behind). The acknowledgement goes first: a control
// plane that withdraws the credential and then finds no acknowledgement for the run knows the agent
// never read it. The agent cannot delete the credential; the control plane withdraws it once the
// agent reported on the run.
func (a *agent) takeCredential(ctx context.Context, kind store.CredentialKind, runID string) (store.Credential, error) {
	return a.takeCredentialWithin(ctx, kind, runID, a.cfg.CredentialWait)
}

// takeCredentialWithin is takeCredential waiting up to wait (0: one look).
func (a *agent) takeCredentialWithin(ctx context.Context, kind store.CredentialKind, runID string, wait time.Duration) (store.Credential, error) {
	deadline := time.Now().Add(wait)
	for {
		if err := a.cfg.Store.PutAck(ctx, a.id, store.Ack{Kind: kind, RunID: runID}); err == nil {
			break
		} else if ctx.Err() != nil || time.Now().After(deadline) {
			return store.Credential{}, fmt.Errorf("acknowledging the %s credential for run %s: %w", kind, runID, err)
		}
		if !sleep(ctx, a.cfg.RetryInterval) {
			return store.Credential{}, ctx.Err()
		}
	}
	for {
		cred, err := a.cfg.Store.ReadCredential(ctx, a.id, kind, runID)
		if err == nil {
			return cred, nil
		}
		// Not there yet, or still the one of an earlier run: wait for the new one.
		retry := errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrThrottled)
		if !retry || time.Now().After(deadline) {
			return store.Credential{}, fmt.Errorf("%s credential for run %s: %w", kind, runID, err)
		}
		if !sleep(ctx, a.cfg.RetryInterval) {
			return store.Credential{}, ctx.Err()
		}
	}
}

// ensureRunning starts the runner for rec's run when it is not running, its restart time has come
// and rec pins the agent's key (pin.go).
func (a *agent) ensureRunning(ctx context.Context, rec store.Instance) {
	if a.proc != nil || a.outdated != "" || a.marker.Spent || a.cfg.Now().Before(a.startAt) || !a.keyPinned(ctx, rec) {
		return
	}
	a.startRunner(rec.RunID)
}

func (a *agent) startRunner(runID string) {
	rctx, cancel := context.WithCancel(context.Background())
	p := &runnerProc{run: runID, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- a.runner.Run(rctx) }()
	a.proc = p
	a.cache.serving(runID)
	a.log.Info("agent: runner started", "run", runID)
}

// stopRunner stops the runner and waits (bounded) for it.
func (a *agent) stopRunner() {
	p := a.proc
	if p == nil {
		return
	}
	a.proc = nil
	a.cache.serving("")
	p.cancel()
	select {
	case err := <-p.done:
		if err != nil {
			a.log.Warn("agent: runner stopped with an error", "run", p.run, "err", err)
		}
	case <-time.After(a.cfg.StopTimeout):
		a.log.Error("agent: runner did not stop in time", "run", p.run, "timeout", a.cfg.StopTimeout)
	}
}

// runnerExited handles a runner that stopped by itself: it is restarted with backoff while the record
// still wants it; a runner with no registration left is registered again (which needs a fresh
// credential: without one the agent signals UD_REG_FAILED and the control plane replaces the instance).
// A just-in-time runner that exited is spent (runnerSpent).
func (a *agent) runnerExited(ctx context.Context, p *runnerProc, err error) {
	a.proc = nil
	p.cancel()
	a.log.Warn("agent: runner exited", "run", p.run, "err", err)
	if errors.Is(err, runner.ErrVersionRefused) {
		a.runnerOutdated(ctx, p.run, err)
		return
	}
	if errors.Is(err, runner.ErrSpent) {
		a.runnerSpent(p.run)
		return
	}
	if errors.Is(err, runner.ErrNotRegistered) {
		_ = a.saveMarker(marker{RunID: p.run})
		return
	}
	a.restarts++
	backoff := min(time.Second<<min(a.restarts-1, 5), 30*time.Second)
	a.startAt = a.cfg.Now().Add(backoff)
}

// runnerSpent keeps a spent just-in-time runner from starting again. No other runner comes for the
// run: the credential was its one registration, and a restart would only try a session GitHub
// refuses, again and again. The agent signals nothing (whatever it says is a claim: the control plane
// learns that the job is done from GitHub, JobCompleted or the runner gone from its listing) and waits
// for its record: terminating or expired (the agent ends the instance itself past the threshold plus
// grace, as for every state), or released for another run (the release finds no runner to remove).
func (a *agent) runnerSpent(runID string) {
	a.log.Info("agent: the runner's just-in-time registration is spent; not restarted, waiting for the record to end or release the instance", "run", runID)
	a.restarts, a.startAt = 0, time.Time{}
	a.cache.serving("") // no job runs any more
	m := a.marker
	m.Spent = true
	if err := a.saveMarker(m); err != nil {
		a.marker.Spent = true // kept for this process at least
		a.log.Warn("agent: spent runner not recorded; a restarted agent tries it once more", "run", runID, "err", err)
	}
}

// release stops and deregisters the runner of runID, cleans up and confirms with
// UD_REMOVE_REG_REMOVE_RUN, or signals UD_REMOVE_REG_FAILED (the control plane then never pools it).
func (a *agent) release(ctx context.Context, runID string) {
	log := a.log.With("run", runID)
	if a.marker.Deregistered && a.marker.RunID == runID {
		a.finishRelease(ctx, runID) // removed already: clean up and confirm
		return
	}
	log.Info("agent: releasing")
	a.stopRunner()
	// No removal token for a modified installation's config.sh (integrity.go).
	if err := a.checkRunner(ctx, false); err != nil {
		if ctx.Err() == nil {
			a.giveUpRelease(ctx, runID, err.Error())
		}
		return
	}
	cred, err := a.takeCredential(ctx, store.CredentialRemoval, runID)
	switch {
	case ctx.Err() != nil:
		return
	case err == nil:
		if err := a.runner.Remove(ctx, cred); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.giveUpRelease(ctx, runID, "removing runner: "+err.Error())
			return
		}
	case a.marker.Registered:
		a.giveUpRelease(ctx, runID, "no removal credential: "+err.Error())
		return
	default:
		// Registration never succeeded: nothing to remove at GitHub.
		log.Info("agent: runner was never registered; nothing to deregister")
	}
	if err := a.saveMarker(marker{RunID: runID, Deregistered: true}); err != nil {
		a.giveUpRelease(ctx, runID, err.Error())
		return
	}
	a.finishRelease(ctx, runID)
}

// finishRelease cleans up and confirms the release of runID.
func (a *agent) finishRelease(ctx context.Context, runID string) {
	if a.outdated != "" {
		// GitHub gives this runner no job: never pooled again (outdated.go).
		a.giveUpRelease(ctx, runID, a.outdated)
		return
	}
	if a.spotNotice != "" {
		// EC2 takes the instance back within two minutes: never pooled again.
		a.giveUpRelease(ctx, runID, store.SpotNoticePrefix+a.spotNotice)
		return
	}
	if err := a.cleanup(ctx); err != nil {
		if ctx.Err() != nil {
			return
		}
		a.giveUpRelease(ctx, runID, err.Error())
		return
	}
	a.signal(ctx, store.SignalRecord{Signal: store.SignalReleased, RunID: runID, Detail: a.cache.report()})
	if ctx.Err() == nil {
		a.clearReleased()
	}
}

// clearReleased forgets a release that is finished (confirmed, or given up).
func (a *agent) clearReleased() {
	if a.marker.Deregistered {
		if err := a.saveMarker(marker{}); err != nil {
			a.log.Warn("agent: finished release not recorded; a restart confirms it again", "err", err)
		}
	}
}

func (a *agent) giveUpRelease(ctx context.Context, runID, detail string) {
	a.log.Error("agent: release failed", "run", runID, "err", detail)
	a.relGiven[runID] = true
	a.taint("release of run " + runID + " failed: " + detail)
	a.clearReleased() // tainted: never confirmed, whatever a restart finds
	a.signal(ctx, store.SignalRecord{Signal: store.SignalReleaseFailed, RunID: runID, Detail: lastBytes(detail, 1024)})
}

// terminate terminates the agent's own instance. It reports true once EC2 accepted the call; on an
// error it retries at the next step.
func (a *agent) terminate(ctx context.Context, reason string) bool {
	a.log.Warn("agent: terminating own instance", "reason", reason)
	a.stopRunner()
	_, err := a.cfg.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{a.id}})
	if err != nil {
		if ctx.Err() == nil {
			a.log.Error("agent: TerminateInstances failed; retrying", "err", err)
			a.retryAt = a.cfg.Now().Add(5 * time.Second)
		}
		return false
	}
	a.log.Info("agent: instance terminating")
	return true
}

// waitEvent waits for the next reason to read the record again.
func (a *agent) waitEvent(ctx context.Context) {
	now := a.cfg.Now()
	next := time.Time{}
	for _, t := range []time.Time{a.deadline, a.retryAt, a.startIfWanted()} {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	var timer <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(max(next.Sub(now), time.Millisecond))
		defer t.Stop()
		timer = t.C
	}
	var done chan error
	if a.proc != nil {
		done = a.proc.done
	}
	select {
	case <-ctx.Done():
	case <-a.wake:
	case <-timer:
	case err := <-done:
		a.runnerExited(ctx, a.proc, err)
	}
}

// startIfWanted is the runner's restart time while it is configured but stopped.
func (a *agent) startIfWanted() time.Time {
	if a.proc == nil && a.marker.Registered && !a.marker.Spent && !a.startAt.IsZero() {
		return a.startAt
	}
	return time.Time{}
}
