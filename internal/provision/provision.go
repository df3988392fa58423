// Package provision is the provision orchestrator (seed 000): a workflow run asks for N runners;
// selection claims what it can from the run's pool (package claim: idle instances and hot warm-pool
// ones), stopped warm-pool instances of the runner class are claimed and started next (seed 002, when
// Options.Starter is set), creation launches the rest with one instant fleet (package fleet) and
// writes their records straight away, fleet validation waits for every started and created instance
// to register, and post-provision either promotes everything to running or undoes it: selected
// instances go back to the pool and started and created ones are terminated (unsuccessful), or, on
// an error nobody planned for, everything is terminated (dump).
//
// A provision is idempotent per run: the run record (repository id, run id, attempt) is created
// first, and asking again returns what the first provision did, never a second set of runners. One
// exception: a provision rolled back because its request ended before it finished (the caller went
// away, or the replica shut down) did not fail on its merits and left nothing behind; its record says
// StatusRolledBack, and the next request of the same run attempt takes it over and provisions again.
//
// The records of a provision belong to its run key (store.RunKey), not to the bare GitHub run id:
// a re-run attempt has the same GitHub run id and must not share records with the first attempt.
// Release and status therefore look records up by Result.RunKey. The runners' GitHub label is the
// run id and the attempt (Result.Label, Request.Label: "<run id>-<attempt>"), so jobs use
// `runs-on: ${{ github.run_id }}-${{ github.run_attempt }}` or the provision's answer; a re-run's
// jobs never land on runners an earlier attempt still holds, and the earlier attempt's release
// ends only that attempt's runners (its own run key).
package provision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launch"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// EC2API is the part of the EC2 client provision uses directly: terminating an instance whose
// record could not be written (everything else goes through fleet and claim).
type EC2API interface {
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// Run statuses, as stored on the run record.
const (
	StatusProvisioning = "provisioning"
	StatusSucceeded    = "succeeded"
	StatusFailed       = "failed"
	// StatusRolledBack: the provision was undone because its request ended (its caller went away,
	// or the replica shut down) before it finished. Nothing of it is left running for the run, so a
	// repeated request of the same run attempt provisions again rather than returning this result.
	StatusRolledBack = "rolled-back"
)

// Sources of a runner: reused from the pool (an idle instance, or a hot warm-pool one), started (a
// stopped warm-pool instance), or created by the request's fleet.
const (
	SourceReused  = "reused"
	SourceStarted = "started"
	SourceCreated = "created"
)

// Undo actions.
const (
	ActionReturned   = "returned-to-pool"
	ActionTerminated = "terminated"
	// ActionExpired: discarded, but EC2 answered NotFound for an instance it may not show yet
	// (claim.ErrNotTerminatedYet); the record is expired and refresh terminates the instance.
	ActionExpired = "expired"
)

// RunnerLabel is the label every runnerpool runner carries besides its run's label.
const RunnerLabel = "runnerpool"

var (
	// ErrFailed: the provision ran and did not get the runners; Result says why and what was undone.
	ErrFailed = errors.New("provision failed")
	// ErrInProgress: another provision of the same run is still running after InProgressWait.
	ErrInProgress = errors.New("provision still in progress")
)

// Runner is one runner of a successful provision.
type Runner struct {
	InstanceID   string `json:"instanceId"`
	InstanceType string `json:"instanceType"`
	UsageClass   string `json:"usageClass"`
	Zone         string `json:"zone,omitempty"`
	Source       string `json:"source"` // SourceReused, SourceStarted, SourceCreated or SourceAdopted
}

// Undone is an instance a provision gave back or terminated.
type Undone struct {
	InstanceID string `json:"instanceId"`
	Action     string `json:"action"` // ActionReturned, ActionTerminated or ActionExpired
	Reason     string `json:"reason"`
	// Error is set when the undo itself failed part-way; the record was expired first (or the
	// instance terminated directly), so refresh finishes the job.
	Error string `json:"error,omitempty"`
}

// Timing is where a provision's time went (control plane plus the waits it contains).
type Timing struct {
	Select   time.Duration `json:"select"`
	Start    time.Duration `json:"start"` // claiming and starting stopped warm instances
	Create   time.Duration `json:"create"`
	Validate time.Duration `json:"validate"`
	Post     time.Duration `json:"post"`
	Total    time.Duration `json:"total"`
}

// Result is what a provision did. It is stored on the run record and returned again for repeated
// requests of the same run.
type Result struct {
	RunKey  string   `json:"runKey"` // the records' owner: release and status use it
	Label   string   `json:"label"`  // the runners' unique label: "<run id>-<attempt>" (Request.Label)
	Status  string   `json:"status"` // StatusSucceeded or StatusFailed
	Runners []Runner `json:"runners,omitempty"`
	Undone  []Undone `json:"undone,omitempty"`
	Error   string   `json:"error,omitempty"`
	// Outcome says which path a failure took: "unsuccessful" (selected returned, created
	// terminated), "dump" (everything terminated) or OutcomeTakenOver (its replica stopped before it
	// finished; takeover.go).
	Outcome string `json:"outcome,omitempty"`
	// Retryable is set on a provision rolled back because its request ended (StatusRolledBack on
	// the run record): the same run attempt may ask again.
	Retryable bool `json:"retryable,omitempty"`
	// Labels are every GitHub label the runners register with: Label, RunnerLabel, then the runner
	// class's labels.
	Labels []string `json:"labels,omitempty"`
	Timing Timing   `json:"timing"`
	// StartedAt is when the run's record was created (its first request): the history entry's
	// start, known without reading the record again. Zero in results stored before it existed.
	StartedAt time.Time `json:"startedAt,omitzero"`
}

// Options tune a Provisioner.
type Options struct {
	// PollInterval is how often a repeated request re-reads the run record (default 250 ms).
	PollInterval time.Duration
	// RollbackTimeout bounds undoing a provision after its context ended (default 3 min: longer than
	// a hand-back's wait for the agent's deregistration (claim.Options.HandBack, a release), so the
	// discard after that wait still runs on a live context).
	RollbackTimeout time.Duration
	// Concurrency bounds parallel record writes, registrations and undos (default 16).
	Concurrency int
	// Pickup tunes the pickup manager of each selection (package pool's defaults when zero).
	Pickup pool.PickupOptions
	// NoSecondLook turns off selection's second look through the table's idle index once the pool
	// queue is exhausted (for measuring what the queue alone serves).
	NoSecondLook bool
	// Starter, when set, adds the stopped branch of selection: what the pool (idle and hot
	// instances) cannot give is taken from stopped warm-pool instances of the runner class, which
	// are claimed and started (StartInstances in batches of 50), before creation launches the rest.
	// Nil: reuse, then creation.
	Starter *claim.Starter
	// Capacity, when set, reserves the instances a provision creates against the instance caps
	// before its fleet is launched (*quota.Caps); a refusal fails the provision as unsuccessful and
	// retryable, with whatever it claimed back in the pool.
	Capacity Capacity
	Now      func() time.Time
	Logger   *slog.Logger
}

// Capacity reserves instances against the instance caps; *quota.Caps satisfies it. id is the
// fleet's client token: a retried reservation of the same fleet counts once.
type Capacity interface {
	Reserve(ctx context.Context, id, runnerClass string, n int) error
	Settle(ctx context.Context, id, runnerClass string, instances []string) error
	Release(ctx context.Context, id, runnerClass string) error
}

// Provisioner provisions runners. It is safe for concurrent use, and several Provisioners (one
// per reconciler replica) may serve the same table and queues.
type Provisioner struct {
	st      *store.Store
	claimer *claim.Claimer
	reg     *claim.Registrar
	launch  *launch.Launcher
	cfg     Config
	cfgErr  error
	opts    Options
	log     *slog.Logger
}

// New returns a Provisioner. A configuration error is reported by every Provision call.
func New(st *store.Store, claimer *claim.Claimer, reg *claim.Registrar, fl *fleet.Fleet, ec2 EC2API, cfg Config, opts Options) *Provisioner {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.RollbackTimeout <= 0 {
		opts.RollbackTimeout = 3 * time.Minute
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 16
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Provisioner{
		st: st, claimer: claimer, reg: reg,
		launch: launch.New(launch.Config{
			Fleet: fl, Store: st, EC2: ec2, Capacity: opts.Capacity,
			Timeout: opts.RollbackTimeout, Concurrency: opts.Concurrency, Logger: opts.Logger,
		}),
		cfg: cfg.withDefaults(), cfgErr: cfg.Validate(), opts: opts, log: opts.Logger,
	}
}

// Config is the provisioner's configuration, defaults applied.
func (p *Provisioner) Config() Config { return p.cfg }

// Provision gets req.Count runners for the run, or none. On success the Result lists the runners
// and the error is nil. When the provision ran and failed, the Result says what was undone and the
// error wraps ErrFailed (and the cause, for errors.As, when this call ran it). An invalid request
// is ErrInvalid with nothing written. A repeated request of the same run returns the first one's
// Result (waiting, bounded, while it is still running).
func (p *Provisioner) Provision(ctx context.Context, req Request) (Result, error) {
	if p.cfgErr != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, p.cfgErr)
	}
	if err := req.Validate(p.cfg); err != nil {
		return Result{}, err
	}
	key := store.RunKey(req.RepositoryID, req.RunID, req.Attempt)
	body, err := json.Marshal(req)
	if err != nil {
		return Result{}, fmt.Errorf("encoding request of run %s: %w", key, err)
	}
	rec := store.Run{
		Key: key, RepositoryID: req.RepositoryID, Repository: req.Repository, RunID: req.RunID,
		Attempt: req.Attempt, Event: req.Event, Ref: req.Ref, BaseRef: req.BaseRef, Status: StatusProvisioning, Request: body,
	}
	if req.ServesRerun {
		rec.ServedAttempt = req.Attempt
	}
	run, created, err := p.st.CreateRun(ctx, rec)
	if err != nil {
		return Result{}, fmt.Errorf("recording run %s: %w", key, err)
	}
	if !created && p.abandoned(run) {
		// Its replica stopped (or hangs) before it stored a result: finished here, then served below.
		if run, err = p.takeOver(ctx, run); err != nil {
			return Result{}, err
		}
	}
	if !created && run.Status == StatusRolledBack {
		run, created, err = p.retake(ctx, run, body)
		if err != nil {
			return Result{}, err
		}
	}
	if !created {
		return p.existing(ctx, run)
	}

	log := p.log.With("run", key)
	if run.Version > 1 {
		log = log.With("try_version", run.Version)
		log.Info("provisioning again: the run's last provision was rolled back")
	}
	res, cause := p.provision(ctx, req, key, fleetToken(run), log)
	// The record keeps milliseconds: the same start as a later read of it gives.
	res.RunKey, res.Label, res.StartedAt = key, req.Label(), run.CreatedAt.Truncate(time.Millisecond)
	if serr := p.storeResult(ctx, run, res); serr != nil {
		// The instances are in their final states; only the answer to a repeated request is lost
		// (it will report the provision as still in progress).
		log.Error("provision result not stored", "err", serr)
		if cause == nil {
			return res, serr
		}
	}
	if cause != nil {
		return res, fmt.Errorf("%w: run %s: %w", ErrFailed, key, cause)
	}
	return res, nil
}

// storeResult writes the result to the run record, even when ctx ended.
func (p *Provisioner) storeResult(ctx context.Context, run store.Run, res Result) error {
	body, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encoding result of run %s: %w", run.Key, err)
	}
	run.Status, run.Result = res.Status, body
	if res.Retryable {
		run.Status = StatusRolledBack
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.RollbackTimeout)
	defer cancel()
	var last error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		if _, last = p.st.UpdateRun(dctx, run, run.Version); last == nil || errors.Is(last, store.ErrConflict) {
			break
		}
	}
	if last != nil {
		return fmt.Errorf("storing result of run %s: %w", run.Key, last)
	}
	return nil
}

// retake takes over the run record of a rolled-back provision for a new try: one conditional
// write on its version, so of several repeated requests exactly one provisions again and the others
// wait for it (created is false, with the record as it is now).
func (p *Provisioner) retake(ctx context.Context, run store.Run, body []byte) (_ store.Run, created bool, _ error) {
	next := run
	next.Status, next.Request, next.Result = StatusProvisioning, body, nil
	got, err := p.st.UpdateRun(ctx, next, run.Version)
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, store.ErrConflict) {
		return store.Run{}, false, fmt.Errorf("retrying run %s: %w", run.Key, err)
	}
	cur, err := p.st.GetRun(ctx, run.Key)
	if err != nil {
		return store.Run{}, false, fmt.Errorf("reading run %s: %w", run.Key, err)
	}
	return cur, false, nil
}

// fleetToken is the CreateFleet client token of a try of the run: a try after a rollback must not
// get the first try's (terminated) fleet back from EC2's idempotency.
func fleetToken(run store.Run) string {
	if run.Version <= 1 {
		return clientToken(run.Key)
	}
	return clientToken(fmt.Sprintf("%s/%d", run.Key, run.Version))
}

// existing serves a repeated request: the stored result, once the first provision finished. A
// provision still running InProgressWait after it started is taken over before (takeover.go); one
// found so here lost that record to another takeover since, and is reported as ErrInProgress.
func (p *Provisioner) existing(ctx context.Context, run store.Run) (Result, error) {
	if p.abandoned(run) {
		return Result{}, p.inProgress(run)
	}
	wctx, cancel := context.WithDeadline(ctx, p.takeOverAt(run))
	defer cancel()
	run, err := p.awaitSettled(wctx, run)
	if errors.Is(err, ErrInProgress) && ctx.Err() != nil {
		return Result{}, fmt.Errorf("waiting for the provision of run %s: %w", run.Key, ctx.Err())
	}
	if err != nil {
		return Result{}, err
	}
	var res Result
	if err := json.Unmarshal(run.Result, &res); err != nil {
		return Result{}, fmt.Errorf("run %s: stored result: %w", run.Key, err)
	}
	if res.StartedAt.IsZero() {
		res.StartedAt = run.CreatedAt // stored before results carried it
	}
	if res.Status != StatusSucceeded {
		return res, fmt.Errorf("%w: run %s: %s", ErrFailed, run.Key, res.Error)
	}
	return res, nil
}

// clientToken makes the run's CreateFleet idempotent (at most 64 characters).
func clientToken(key string) string {
	sum := sha256.Sum256([]byte("runnerpool-fleet/" + key))
	return "rp-" + hex.EncodeToString(sum[:24])
}

// launchSpec is the runner class's launch spec with the tags that make every instance traceable
// to this deployment and run from the moment it exists.
func (p *Provisioner) launchSpec(rc runnerclass.Resolved, key string) fleet.LaunchSpec {
	return rc.Launch().Tagged(fleet.LaunchTags{
		Deployment: p.cfg.DeploymentID, RunnerClass: rc.Name, RunID: key, Name: "runnerpool-" + rc.Name,
	})
}
