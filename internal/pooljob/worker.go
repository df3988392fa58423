// The pool worker (seed 002, "Pool Queue Processing"): it receives pool jobs from the job queue in
// batches of up to 10 (long poll), groups them by pool and serves each group at once: hot instances
// first (ready, claimed conditionally for the job, so two replicas never pick the same one), then
// stopped ones (claimed, then started with one StartInstances per 50), and what the pool cannot
// serve overflows to a cold start (one CreateFleet per group). Each instance then gets a
// just-in-time runner bound to its job: the runner carries the job's labels, and its registration
// credential is written to the instance's own item. A job message is deleted only once its job is
// served (or known to be served, or ended); a start or launch failure makes it visible again after
// a short delay, and a job whose pool no longer exists has its run cancelled with an explanation.
package pooljob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launch"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// GitHub is the part of the reconciler's GitHub access the worker uses; *ghaccess.Client satisfies it.
type GitHub interface {
	GenerateJITConfig(ctx context.Context, scope, name string, labels []string, runnerGroupID int64) (ghaccess.JITConfig, error)
	CancelRun(ctx context.Context, repo string, runID int64) error
	ListRunners(ctx context.Context, scope string) ([]ghaccess.Runner, error)
	RunnerGetter
	RerunFailedJobs(ctx context.Context, repo string, runID int64) error
}

// ScaleSetRunners mints the just-in-time runners of scale set jobs (Job.ScaleSet): the reconciler's
// scale set listeners satisfy it.
type ScaleSetRunners interface {
	GenerateJITConfig(ctx context.Context, scaleSetScope string, scaleSetID int64, name string) (ghaccess.JITConfig, error)
}

// Pools finds a pool's spec by name; *Catalog satisfies it.
type Pools interface {
	Lookup(ctx context.Context, name string) (warmpool.PoolSpec, bool, error)
}

// Discarder ends an instance that failed (expire, terminate, record terminated), and waits for the
// registration of a cold-started one, pinning its agent's key at the first self-signed report it
// reads (store.Attribute); *claim.Registrar satisfies it.
type Discarder interface {
	Discard(ctx context.Context, instanceID, runID, reason string) error
	WaitRegistered(ctx context.Context, instanceID, runID string, wait time.Duration) error
}

// WorkerConfig configures a Worker. Zero durations take the defaults.
type WorkerConfig struct {
	Store     warmpool.Store
	EC2       warmpool.EC2API
	Fleet     warmpool.Launcher
	Starter   *claim.Starter
	Discarder Discarder
	GitHub    GitHub
	Jobs      *JobQueue
	Pools     Pools
	// ScaleSets mints the runners of scale set jobs; without it such jobs are not served (their
	// instances are discarded and the jobs retried).
	ScaleSets ScaleSetRunners
	// DeploymentID is tagged on cold-started instances (required).
	DeploymentID string
	// Recycle, when set, returns the instance of a completed job to the resource pool instead of
	// terminating it, for pools that allow it (PoolSpec.Recycle) and instances whose scope is the
	// job's repository: typically (*release.Releaser).Release wrapped to drop its report. It runs in
	// the background (it waits for the agent's deregistration).
	Recycle func(ctx context.Context, runID string, idleTime time.Duration) error
	// Rerun, when set, serves the jobs of re-runs (Job.Rerun): provision.ServeRerun through the
	// step path's provisioner. An error makes the job visible again after RetryDelay. Nil: such
	// jobs are dropped.
	Rerun func(ctx context.Context, j warmpool.Job) error
	// Capacity, when set, reserves cold-started instances against the instance caps (*quota.Caps):
	// jobs a cap has no room for are not served now and tried again after RetryDelay.
	Capacity warmpool.Capacity

	// WaitTime is the job queue's long poll (default 20 s, at most 20 s).
	WaitTime time.Duration
	// Lease is how long a received job is held: its message's visibility timeout and the ledger's
	// serving lease (default 60 s). A batch must be served within it.
	Lease time.Duration
	// RetryDelay is how long a job that could not be served now waits before it is tried again
	// (default 5 s).
	RetryDelay time.Duration
	// ClaimTimeout is the claimed deadline of a hot or stopped instance picked for a job: its
	// agent must register before it (default 10 min).
	ClaimTimeout time.Duration
	// CreatedTimeout is the deadline of a cold-started instance's registration (default 10 min).
	CreatedTimeout time.Duration
	// MaxJobAge: a job queued longer ago than this is abandoned (GitHub cancels jobs queued for 24 h;
	// default 24 h).
	MaxJobAge time.Duration
	Now       func() time.Time
	Logger    *slog.Logger
}

// Worker serves pool jobs. Several workers (one or more per replica) may share a queue and a table.
type Worker struct {
	cfg    WorkerConfig
	log    *slog.Logger
	ledger *ledger
	term   *warmpool.Terminator
	launch *launch.Launcher
	bg     sync.WaitGroup // recycles in flight
}

// NewWorker returns a Worker.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	switch {
	case cfg.Store == nil || cfg.EC2 == nil || cfg.Fleet == nil || cfg.Starter == nil || cfg.Discarder == nil ||
		cfg.GitHub == nil || cfg.Jobs == nil || cfg.Pools == nil:
		return nil, errors.New("pool worker: store, EC2, fleet, starter, discarder, GitHub, job queue and pools are required")
	case cfg.DeploymentID == "":
		return nil, errors.New("pool worker: deployment id is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.WaitTime, 20*time.Second)
	def(&cfg.Lease, 60*time.Second)
	def(&cfg.RetryDelay, 5*time.Second)
	def(&cfg.ClaimTimeout, 10*time.Minute)
	def(&cfg.CreatedTimeout, 10*time.Minute)
	def(&cfg.MaxJobAge, 24*time.Hour)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Worker{
		cfg: cfg, log: cfg.Logger,
		ledger: &ledger{st: ledgerStore{cfg.Store}, lease: cfg.Lease, now: cfg.Now},
		term:   warmpool.NewTerminator(cfg.Store, cfg.EC2, cfg.Logger),
		launch: launch.New(launch.Config{Fleet: cfg.Fleet, Store: cfg.Store, EC2: cfg.EC2, Capacity: cfg.Capacity, Timeout: 2 * time.Minute, Logger: cfg.Logger}),
	}, nil
}

// Run serves batches until ctx ends, then waits for background recycles. Errors of a batch are
// logged, and the next batch follows (after a short pause when the queue itself failed).
func (w *Worker) Run(ctx context.Context) error { return w.Serve(ctx, ctx) }

// Serve is Run with a graceful stop, for a service that drains on shutdown: once stop ends no batch
// is received any more (a long poll in progress is abandoned), and the batch in progress finishes
// under work; cancelling work cuts it short, and its jobs are handed back to the queue. Serve
// returns when the batch in progress and the background recycles are done.
func (w *Worker) Serve(stop, work context.Context) error {
	defer w.bg.Wait()
	stopped := func() bool { return stop.Err() != nil || work.Err() != nil }
	for !stopped() {
		rep, err := w.once(stop, work)
		switch {
		case err != nil && !stopped():
			w.log.Error("pool worker batch failed", "err", err)
			if rep.Received == 0 {
				select {
				case <-stop.Done():
				case <-work.Done():
				case <-time.After(w.cfg.RetryDelay):
				}
			}
		case rep.Received > 0:
			w.log.Info("pool jobs handled", "received", rep.Received, "served", len(rep.Served), "requeued", len(rep.Requeued),
				"cancelled", len(rep.Cancelled), "completed", len(rep.Completed), "dropped", rep.Dropped)
		}
	}
	return nil
}

// Wait waits for the background recycles started by completed jobs.
func (w *Worker) Wait() { w.bg.Wait() }

// Served is a job served, and by which instance.
type Served struct {
	JobID      int64
	Pool       string
	InstanceID string
	Source     string // SourceHot, SourceStarted or SourceCreated
}

// GroupReport is what one pool group of a batch did.
type GroupReport struct {
	Pool                  string
	Jobs                  int
	Hot, Started, Created int
	// StartCalls counts StartInstances calls: at most ceil(Started/50) when EC2 accepts the batch.
	StartCalls int
	Err        error
}

// BatchReport is what one batch did.
type BatchReport struct {
	Received  int
	Served    []Served
	Requeued  []int64 // jobs made visible again after RetryDelay
	Cancelled []int64 // runs cancelled: unknown pool
	Completed []int64 // completed jobs whose instances were ended
	Dropped   int     // messages of jobs already served or ended, or undecodable
	Groups    []GroupReport
}

// outcomes collects what happens to each message of a batch.
type outcomes struct {
	mu     sync.Mutex
	rep    BatchReport
	del    []message
	retry  []message
	errors []error
	leases *leases // the batch's leases, renewed while it is served
}

func (o *outcomes) lock(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f()
}

// Once receives and handles one batch.
func (w *Worker) Once(ctx context.Context) (BatchReport, error) { return w.once(ctx, ctx) }

// once receives a batch while neither stop nor ctx has ended, and handles it under ctx.
func (w *Worker) once(stop, ctx context.Context) (BatchReport, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(stop, cancel)()
	msgs, err := w.cfg.Jobs.receive(rctx, 10, w.cfg.WaitTime, w.cfg.Lease)
	cancel()
	if err != nil {
		return BatchReport{}, err
	}
	o := &outcomes{rep: BatchReport{Received: len(msgs)}, leases: w.keepLeases(ctx, msgs)}
	groups := map[string][]message{}
	seen := map[string]bool{} // action and job: a duplicate within the batch is dropped
	var wg sync.WaitGroup
	for _, m := range msgs {
		if m.err != nil {
			w.log.Warn("undecodable pool job message dropped", "message_id", m.id, "err", m.err)
			o.rep.Dropped++
			o.del = append(o.del, m)
			continue
		}
		key := fmt.Sprintf("%s/%d", m.job.Action, m.job.JobID)
		if seen[key] {
			o.rep.Dropped++
			o.del = append(o.del, m)
			continue
		}
		seen[key] = true
		if m.job.Action == warmpool.ActionCompleted {
			wg.Go(func() { w.handleCompleted(ctx, m, o) })
			continue
		}
		if m.job.Rerun {
			wg.Go(func() { w.serveRerun(ctx, m, o) })
			continue
		}
		groups[m.job.Pool] = append(groups[m.job.Pool], m)
	}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		wg.Go(func() { w.serveGroup(ctx, name, groups[name], o) })
	}
	wg.Wait()
	o.leases.end() // before the messages are settled: a renewal must not undo a retry's delay
	slices.SortFunc(o.rep.Groups, func(a, b GroupReport) int { return strings.Compare(a.Pool, b.Pool) })

	// Settle the messages even if ctx ended: a served job's message must not come back as new.
	dctx, cancel := warmpool.Detached(ctx)
	defer cancel()
	if err := w.cfg.Jobs.deleteMessages(dctx, o.del); err != nil {
		o.errors = append(o.errors, err)
	}
	if err := w.cfg.Jobs.retryLater(dctx, o.retry, w.cfg.RetryDelay); err != nil {
		o.errors = append(o.errors, err)
	}
	return o.rep, errors.Join(o.errors...)
}

// release hands jobs back: their ledger entry returns to queued and their message comes back after
// RetryDelay.
func (w *Worker) release(ctx context.Context, jobs []*held, why error, o *outcomes) {
	dctx, cancel := warmpool.Detached(ctx)
	defer cancel()
	warmpool.Each(len(jobs), func(i int) {
		h := jobs[i]
		if _, err := w.ledger.set(dctx, h.run, warmpool.JobQueued, warmpool.JobResult{At: w.cfg.Now(), Reason: why.Error()}); err != nil {
			w.log.Warn("pool job not handed back in the ledger (its lease ends it)", "job", h.msg.job.JobID, "err", err)
		}
	})
	o.lock(func() {
		for _, h := range jobs {
			o.retry = append(o.retry, h.msg)
			o.rep.Requeued = append(o.rep.Requeued, h.msg.job.JobID)
		}
	})
}

func runsOf(jobs []*held) []string {
	out := make([]string, len(jobs))
	for i, h := range jobs {
		out[i] = h.msg.job.RunKey()
	}
	return out
}

// clearStale looks after what an earlier, interrupted attempt (its lease ran out) left for these
// jobs: an instance whose agent registered for the job serves it (the job is recorded as served by
// it and returned as adopted); any other instance claimed or launched for the job is discarded, and
// the job is served afresh.
func (w *Worker) clearStale(ctx context.Context, jobs []*held, log *slog.Logger) (adopted []*held) {
	var mu sync.Mutex
	warmpool.Each(len(jobs), func(i int) {
		h := jobs[i]
		if !h.takeover {
			return
		}
		run := h.msg.job.RunKey()
		recs, err := w.cfg.Store.ByRun(ctx, run)
		if err != nil {
			log.Warn("instances of an earlier attempt not looked for", "job", h.msg.job.JobID, "err", err)
			return
		}
		for _, in := range recs {
			if !in.State.Live() || in.State == store.StateTerminating {
				continue
			}
			sig, serr := w.cfg.Store.LastSignal(ctx, in.ID)
			believed := false
			if serr == nil {
				// The first self-signed report pins the agent's key (store/attribution.go).
				in, believed, serr = w.cfg.Store.Attribute(ctx, in, sig)
			}
			registered := in.State == store.StateRunning ||
				(serr == nil && sig.Signal == store.SignalRegistered && sig.RunID == run && believed && in.AgentKey != "")
			if registered && h.inst.ID == "" {
				if r, err := w.ledger.set(ctx, h.run, warmpool.JobServed, warmpool.JobResult{InstanceID: in.ID, Source: warmpool.SourceAdopted, At: w.cfg.Now()}); err == nil {
					h.run, h.inst, h.src = r, in, warmpool.SourceAdopted
					mu.Lock()
					adopted = append(adopted, h)
					mu.Unlock()
					log.Info("instance of an interrupted attempt adopted", "job", h.msg.job.JobID, "instance", in.ID)
					continue
				}
			}
			err := w.cfg.Discarder.Discard(ctx, in.ID, run, "left by an interrupted attempt to serve "+run)
			log.Info("instance of an interrupted attempt discarded", "job", h.msg.job.JobID, "instance", in.ID, "err", err)
		}
	})
	return adopted
}

// coldStart launches one instance per job with one CreateFleet per fleet.MaxCount jobs (package
// launch) and writes their records (created, for the job). It returns the records in job order;
// jobs beyond them were not served.
func (w *Worker) coldStart(ctx context.Context, spec warmpool.PoolSpec, jobs []*held, now time.Time) ([]store.Instance, error) {
	shape := spec.Shape(w.cfg.DeploymentID)
	var out []store.Instance
	var errs []error
	for chunk := range slices.Chunk(jobs, fleet.MaxCount) {
		res, err := w.launch.Launch(ctx, launch.Order{
			Count: len(chunk), Shape: shape, RunnerClass: spec.RunnerClass(), Reservation: warmpool.ReservationID("cold/" + spec.Name),
			Record: func(i int, l fleet.Launched) store.Instance {
				j := chunk[i].msg.job
				return store.Instance{
					ID: l.ID, State: store.StateCreated, RunID: j.RunKey(), Threshold: now.Add(w.cfg.CreatedTimeout + max(spec.Class.BootExtra, 0)),
					UsageClass: l.UsageClass, InstanceType: l.InstanceType, CPU: spec.Class.CPU, MemoryMiB: spec.Class.MemoryMiB,
					ResourceClass: spec.ResourceClass, RunnerClass: spec.RunnerClass(), Pool: spec.Name, Scope: j.Repository, Zone: l.Zone, SpecHash: spec.SpecHash,
					RunnerVersion: spec.Class.RunnerVersion, JobAccess: spec.Class.JobAccess, Reason: "cold start for " + j.RunKey(),
				}
			},
		})
		for _, e := range res.Ended {
			w.log.Warn("cold-started instance terminated", "instance", e.InstanceID, "reason", e.Reason, "err", e.Err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cold start of %d: %w", len(chunk), err))
		}
		// Records are matched to jobs by their run id (a failed write leaves a gap).
		byRun := map[string]store.Instance{}
		for _, r := range res.Recorded {
			byRun[r.RunID] = r
		}
		for _, h := range chunk {
			r, ok := byRun[h.msg.job.RunKey()]
			if !ok {
				// Keep job order: a job without a record ends the served prefix.
				return out, errors.Join(append(errs, fmt.Errorf("no instance recorded for %s", h.msg.job.RunKey()))...)
			}
			out = append(out, r)
		}
		if err != nil {
			break
		}
	}
	return out, errors.Join(errs...)
}

// register gives each picked instance a just-in-time runner for its job (named after the instance,
// with the job's labels, in the job's repository), writes it as the instance's registration
// credential, wakes the agent of a running instance, and records the job as served. It returns the
// jobs whose instance could not be given a runner: the instance is discarded and the job retried.
func (w *Worker) register(ctx context.Context, picked []*held, log *slog.Logger) []*held {
	failed := make([]bool, len(picked))
	warmpool.Each(len(picked), func(i int) {
		h := picked[i]
		j := h.msg.job
		err := w.registerOne(ctx, h)
		if err == nil {
			return
		}
		failed[i] = true
		dctx, cancel := warmpool.Detached(ctx)
		defer cancel()
		derr := w.cfg.Discarder.Discard(dctx, h.inst.ID, j.RunKey(), "no runner registration: "+err.Error())
		log.Warn("pool job's instance not given a runner: discarded, job retried", "job", j.JobID, "instance", h.inst.ID, "err", err, "discard_err", derr)
	})
	var out []*held
	for i, f := range failed {
		if f {
			out = append(out, picked[i])
		}
	}
	return out
}

// watchPins waits in the background, under ctx, for the registration of each picked instance whose
// agent's key is not pinned yet (a cold start; a pooled one's was pinned at its warm-up): the wait
// pins the key at the first self-signed report it reads, within a poll. The agent starts its runner
// only once it sees its key pinned (agent/pin.go), which convergence alone would do only at its next
// pass. Promotion and failures stay convergence's (jobs).
func (w *Worker) watchPins(ctx context.Context, picked, failed []*held, log *slog.Logger) {
	for _, h := range picked {
		if h.inst.AgentKey != "" || slices.Contains(failed, h) {
			continue
		}
		id, run := h.inst.ID, h.msg.job.RunKey()
		wait := max(h.inst.Threshold.Sub(w.cfg.Now()), time.Second)
		go func() {
			if err := w.cfg.Discarder.WaitRegistered(ctx, id, run, wait); err != nil && ctx.Err() == nil {
				log.Info("cold-started pool job instance not seen registered; convergence judges it", "instance", id, "job", run, "err", err)
			}
		}()
	}
}

// jitConfig mints the job's runner: from its scale set, or in its repository with its labels.
func (w *Worker) jitConfig(ctx context.Context, j warmpool.Job, name string, labels []string) (ghaccess.JITConfig, error) {
	if j.ScaleSetID == 0 {
		return w.cfg.GitHub.GenerateJITConfig(ctx, j.Repository, name, labels, ghaccess.DefaultRunnerGroup)
	}
	if w.cfg.ScaleSets == nil {
		return ghaccess.JITConfig{}, fmt.Errorf("job %d of scale set %s: no scale set listener in this worker", j.JobID, j.ScaleSet)
	}
	return w.cfg.ScaleSets.GenerateJITConfig(ctx, j.ScaleSetScope, j.ScaleSetID, name)
}

func (w *Worker) registerOne(ctx context.Context, h *held) error {
	j := h.msg.job
	labels := jitLabels(j.Labels)
	if len(labels) == 0 {
		return fmt.Errorf("job %d has no custom label to bind a runner to", j.JobID)
	}
	cfg, err := w.jitConfig(ctx, j, warmpool.RunnerName(h.inst.ID), labels)
	if err != nil {
		return err
	}
	if err := w.cfg.Store.PutCredential(ctx, h.inst.ID, store.Credential{
		Kind: store.CredentialRegistration, RunID: j.RunKey(), Token: cfg.Encoded, JIT: true,
		Labels: labels, ExpiresAt: w.cfg.Now().Add(time.Hour),
	}); err != nil {
		return err
	}
	if h.src != warmpool.SourceCreated {
		// A hot instance's agent is waiting: wake it now rather than on its fallback timer.
		if err := wake.Notify(ctx, w.cfg.EC2, h.inst.ID); err != nil {
			w.log.Warn("claim notice not delivered", "instance", h.inst.ID, "job", j.JobID, "err", err)
		}
	}
	// The ledger is what says the job is served: if it cannot say so, the instance is given up (its
	// runner, never used, is removed by refresh's runner cleanup) and the job tried again.
	r, err := w.ledger.set(ctx, h.run, warmpool.JobServed, warmpool.JobResult{InstanceID: h.inst.ID, Source: h.src, At: w.cfg.Now(), RunnerID: cfg.RunnerID})
	if err != nil {
		return err
	}
	h.run = r
	return nil
}

// defaultLabels are the labels every self-hosted runner has without asking (GitHub adds them): a
// just-in-time configuration lists only custom labels.
var defaultLabels = []string{"self-hosted", "linux", "windows", "macos", "x64", "x86", "arm", "arm64"}

// jitLabels are a job's runs-on labels as custom runner labels: repeated and default ones dropped.
func jitLabels(labels []string) []string {
	return slices.DeleteFunc(uniqueFold(labels), func(l string) bool {
		return slices.ContainsFunc(defaultLabels, func(d string) bool { return strings.EqualFold(d, l) })
	})
}

// uniqueFold drops labels repeated case-insensitively (GitHub labels ignore case).
func uniqueFold(labels []string) []string {
	var out []string
	for _, l := range labels {
		if !slices.ContainsFunc(out, func(o string) bool { return strings.EqualFold(o, l) }) {
			out = append(out, l)
		}
	}
	return out
}

// cancelUnknown fails the jobs of a pool that does not exist (any more): GitHub has no API to fail
// one job, so the run is cancelled, with the reason logged and kept in the job's ledger entry.
func (w *Worker) cancelUnknown(ctx context.Context, poolName string, msgs []message, o *outcomes) {
	warmpool.Each(len(msgs), func(i int) {
		m := msgs[i]
		reason := fmt.Sprintf("job %d asks for warm pool %q, which is not configured: run cancelled", m.job.JobID, poolName)
		if err := w.cfg.GitHub.CancelRun(ctx, m.job.Repository, m.job.RunID); err != nil && !alreadyDone(err) {
			o.lock(func() {
				o.errors = append(o.errors, fmt.Errorf("cancelling run %d of %s: %w", m.job.RunID, m.job.Repository, err))
				o.retry = append(o.retry, m)
				o.rep.Requeued = append(o.rep.Requeued, m.job.JobID)
			})
			return
		}
		w.log.Warn("pool job for an unknown pool: run cancelled", "job", m.job.JobID, "run", m.job.RunID, "repository", m.job.Repository, "pool", poolName)
		if r, status, err := w.ledger.begin(ctx, m.job); err == nil && (status == beginServe || status == beginTakeover) {
			_, _ = w.ledger.set(ctx, r, warmpool.JobCancelled, warmpool.JobResult{At: w.cfg.Now(), Reason: reason})
		}
		o.lock(func() {
			o.del = append(o.del, m)
			o.rep.Cancelled = append(o.rep.Cancelled, m.job.JobID)
		})
	})
}

// alreadyDone reports GitHub's answer to cancelling a run that already finished: 409 Conflict.
func alreadyDone(err error) bool {
	var er *github.ErrorResponse
	return errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusConflict
}
