// Package warmpool is the vocabulary warm pools share: what a pool is (PoolSpec, read from the
// configuration by ConfigTargets, cached by Catalog), what a pool job is (Job, its queue message and
// its ledger record, job.go), and the batched termination of pool records. Two packages act on it
// and never on each other:
//
//   - internal/poolsize sizes the pools: the Converger runs every 30 s under the reconciler's leader
//     lease, categorizes each pool's records, terminates the broken, stale and outdated ones, turns
//     warmed-up instances into hot (ready) or stopped ones, creates what is missing, terminates the
//     excess, and applies the autoscaler's decision to autoscaled pools.
//   - internal/pooljob dispatches pool jobs from webhooks and scale sets: the job queue and its
//     ledger, and the Worker that serves each job with a hot, stopped or cold instance and a
//     just-in-time runner, and ends the instance when the job completes.
//
// Both launch through package launch (PoolSpec.Shape is what a pool's instances are) and terminate
// through Terminator.
//
// A warm instance's life: created by the converger in state warming (with its pool, runner class and
// spec hash, and a warm-up deadline); its agent runs the pre-runner script and signals UD_OK; the
// converger makes it ready (hot: running, announced in its runner class's pool queue, for at most
// the dangling limit) or stopped (StopInstances, for at most MaxStoppedAge). A claim (a step-driven
// provision, or a pool job) detaches it from the pool: from then on it belongs to its run.
package warmpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launch"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"golang.org/x/sync/errgroup"
)

// PoolSpec is one warm pool as it should be at one moment: its schedule target and the runner
// class its instances are.
type PoolSpec struct {
	Name string
	// Class is the pool's runner class, resolved: its launch template version (Class.Launch: where
	// instances are launched; the converger adds the deployment, runner class, pool and spec hash
	// tags), instance types, CPU and memory, pool queue (hot instances are announced there so
	// step-driven provisions can claim them too; nil: hot instances serve pool jobs only), idle time
	// (how long a hot instance waits for a job before it is replaced; Options.DanglingAfter when
	// zero), max runtime (the running deadline of an instance serving a pool job; default 6 h), job
	// access and runner version (recorded on every instance created).
	Class runnerclass.Resolved
	// Schedule names the schedule in force (for reports); Hot and Stopped are its counts.
	Schedule     string
	Hot, Stopped int
	// SpecHash is the hash of runner class, image and pool config (config.SpecHash). An instance
	// tagged with another hash is outdated and replaced at once.
	SpecHash string
	// ResourceClass is the resource class (a named size of step-driven provisions) the pool's
	// instances are (ResourceClassOf): their records and pool messages carry it, so a provision
	// naming it can take a warm instance. Empty: none; only provisions by cpu and memory fit.
	ResourceClass string
	// Scope is the repository or owner warm instances may serve (the record's scope and the pool
	// message's). A pool message without a scope never matches a scoped provision, so hot instances
	// without one serve pool jobs only.
	Scope string
	// Recycle lets an instance whose job completed go back to the pool for the same repository
	// instead of being terminated (only instances whose scope is that repository).
	Recycle bool
	// Autoscale, when set, sizes the pool to its queue-time goal within Hot and Stopped, then its
	// maxima (applied when the converger has Options.Autoscale).
	Autoscale *AutoscaleSpec
	// Err, when set, says the pool's configuration exists but cannot be used (for example a spec
	// written by a newer provider): its instances are left exactly as they are.
	Err error
}

// AutoscaleSpec is a pool's autoscale block (config.Autoscale) and the zone of its schedules.
type AutoscaleSpec struct {
	Goal, GoalP99      time.Duration
	MinHot, MinStopped int
	Budget             float64
	Loc                *time.Location
}

// RunnerClass is the name of the pool's runner class.
func (s PoolSpec) RunnerClass() string { return s.Class.Name }

// DanglingAfter is how long a hot instance of the pool waits for a job (0: the converger's default).
func (s PoolSpec) DanglingAfter() time.Duration { return s.Class.IdleTime.Std() }

// launch is the pool's launch spec with the tags of a warm instance of this deployment, for
// convergence and cold starts alike: the spec hash tag is what a rollout compares.
func (s PoolSpec) launch(deployment string) fleet.LaunchSpec {
	return s.Class.Launch().Tagged(fleet.LaunchTags{
		Deployment: deployment, RunnerClass: s.Class.Name, Pool: s.Name, SpecHash: s.SpecHash,
		Name: "runnerpool-pool-" + s.Name,
	})
}

// Shape is what the pool's instances are, for package launch: the converger's warm instances and
// a pool job's cold starts alike. Warm instances are on-demand: a
// stopped one must be stoppable, and EC2 refuses to stop a one-time spot instance; a pool job's
// cold start is on-demand too, like the pool it overflows.
func (s PoolSpec) Shape(deployment string) launch.Shape {
	return launch.Shape{
		UsageClass: fleet.OnDemand, InstanceTypes: s.Class.InstanceTypes, MinCPU: s.Class.CPU, MinMemoryMiB: s.Class.MemoryMiB,
		Spec: s.launch(deployment),
	}
}

// Targets returns the pools in force at now. A pool missing from the answer whose instances are
// still in the table was removed from the configuration: the converger scales it to zero.
type Targets func(ctx context.Context, now time.Time) ([]PoolSpec, error)

// Store is the part of *store.Store warmpool uses.
type Store interface {
	Create(ctx context.Context, in store.Instance) (store.Instance, error)
	Get(ctx context.Context, id string) (store.Instance, error)
	Transition(ctx context.Context, id string, c store.Change) (store.Instance, error)
	Claim(ctx context.Context, id, runID string, threshold time.Time, from ...store.State) (store.Instance, error)
	ByPool(ctx context.Context, pool string) ([]store.Instance, error)
	// ByPoolBrief and ByStateBrief list brief records (store/brief.go): convergence's reads.
	ByPoolBrief(ctx context.Context, pool string, prices bool) ([]store.Instance, error)
	ByStateBrief(ctx context.Context, state store.State, expiredAt time.Time) ([]store.Instance, error)
	ByRun(ctx context.Context, runID string) ([]store.Instance, error)
	LastSignal(ctx context.Context, id string) (store.SignalRecord, error)
	// Attribute decides whether a report may be believed, pinning the agent's key at its first
	// self-signed one (store/attribution.go).
	Attribute(ctx context.Context, in store.Instance, sig store.SignalRecord) (store.Instance, bool, error)
	PutCredential(ctx context.Context, id string, c store.Credential) error
	CreateRun(ctx context.Context, r store.Run) (store.Run, bool, error)
	GetRun(ctx context.Context, key string) (store.Run, error)
	UpdateRun(ctx context.Context, r store.Run, expectVersion int64) (store.Run, error)
	RenewRun(ctx context.Context, key string, version int64) error
	MarkOnce(ctx context.Context, key string, ttl time.Duration) (first bool, _ error)
}

// EC2API is the part of the EC2 client warmpool uses; *ec2.Client satisfies it.
type EC2API interface {
	StopInstances(ctx context.Context, in *ec2.StopInstancesInput, opts ...func(*ec2.Options)) (*ec2.StopInstancesOutput, error)
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	CreateTags(ctx context.Context, in *ec2.CreateTagsInput, opts ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
}

// Launcher launches instances; *fleet.Fleet satisfies it.
type Launcher interface {
	Create(ctx context.Context, req fleet.Request) ([]fleet.Launched, error)
}

// MaxBatch is the most instance ids one EC2 mutation (Stop, Start, Terminate) carries.
const MaxBatch = 50

// Defaults.
const (
	DefaultDanglingAfter = 10 * time.Minute
	DefaultWarmupTimeout = 15 * time.Minute
	DefaultMaxStoppedAge = 24 * time.Hour
	DefaultMaxRuntime    = 6 * time.Hour
	DefaultDiscoverEvery = 10 * time.Minute
)

// JobRunPrefix prefixes the run id of an instance serving a pool job: "job:<job id>".
const JobRunPrefix = "job:"

// JobRunID is the run id of the instance serving GitHub job jobID.
func JobRunID(jobID int64) string { return fmt.Sprintf("%s%d", JobRunPrefix, jobID) }

// RunnerName is the GitHub runner name of an instance's just-in-time runner; a completed job's
// webhook names it, which leads back to the instance. It matches the agent's own naming.
func RunnerName(instanceID string) string { return "runnerpool-" + instanceID }

// InstanceOfRunner returns the instance id in a runner name of RunnerName's form.
func InstanceOfRunner(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, "runnerpool-")
	return id, ok && strings.HasPrefix(id, "i-") && !strings.ContainsAny(id, " \t#/")
}

// detachedTimeout bounds work that must finish after the caller's ctx ended: an instance
// launched, claimed or marked must reach its next state.
const detachedTimeout = 30 * time.Second

// Detached is ctx without its cancellation, bounded by detachedTimeout: for work that must finish
// after the caller's ctx ended.
func Detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), detachedTimeout)
}

// Victim is a record to terminate and why.
type Victim struct {
	Rec    store.Instance
	Reason string
}

// Terminator terminates records: each is marked terminating with a write conditional on the state
// (and run) it was read in, so a record claimed since it was read is left alone; the marked
// instances are terminated in batches of at most MaxBatch ids; then the records are marked
// terminated. An instance EC2 refuses stays terminating, and refresh retries it.
type Terminator struct {
	st    Store
	api   EC2API
	batch int
	log   *slog.Logger
}

// NewTerminator returns a Terminator over st and api, MaxBatch ids per call.
func NewTerminator(st Store, api EC2API, log *slog.Logger) *Terminator {
	return &Terminator{st: st, api: api, batch: MaxBatch, log: log}
}

// Terminate returns the ids it terminated (or found terminated) and the number of
// TerminateInstances calls it made.
func (t *Terminator) Terminate(ctx context.Context, victims []Victim) (done []string, calls int, _ error) {
	return t.TerminateFrom(ctx, victims, nil)
}

// TerminateFrom is Terminate where from names, by instance, the states a record may have reached
// since it was read and still be terminated (of the same run); others only from the state read.
func (t *Terminator) TerminateFrom(ctx context.Context, victims []Victim, from map[string][]store.State) (done []string, calls int, _ error) {
	if len(victims) == 0 {
		return nil, 0, nil
	}
	ctx, cancel := Detached(ctx)
	defer cancel()
	marked := make([]bool, len(victims))
	errs := make([]error, len(victims))
	Each(len(victims), func(i int) {
		v := victims[i]
		c := store.Change{From: []store.State{v.Rec.State}, To: store.StateTerminating, Reason: v.Reason}
		if states, ok := from[v.Rec.ID]; ok {
			c.From = states
		}
		if v.Rec.RunID != "" {
			c.RunID = v.Rec.RunID
		} else {
			c.RequireNoRun = true
		}
		_, err := t.st.Transition(ctx, v.Rec.ID, c)
		switch {
		case err == nil:
			marked[i] = true
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			t.log.Info("instance changed since it was read: not terminated", "instance", v.Rec.ID, "reason", v.Reason, "err", err)
		default:
			errs[i] = fmt.Errorf("marking %s terminating: %w", v.Rec.ID, err)
		}
	})
	var ids []string
	byID := map[string]Victim{}
	for i, v := range victims {
		if marked[i] {
			ids = append(ids, v.Rec.ID)
			byID[v.Rec.ID] = v
		}
	}
	slices.Sort(ids)
	res := terminate.Batches(ctx, t.api, ids, t.batch)
	calls = res.Calls
	for _, err := range res.Errs {
		errs = append(errs, fmt.Errorf("left terminating for refresh: %w", err))
	}
	// EC2 may not show an instance launched moments ago (another replica's warming one): its
	// NotFound is no proof, and its record stays terminating for refresh to ask again.
	proven, unseen := res.Proven(func(id string) time.Time { return byID[id].Rec.CreatedAt }, t.now())
	if len(unseen) > 0 {
		t.log.Info("EC2 does not show these instances yet: left terminating for refresh", "instances", unseen)
	}
	gone := slices.Sorted(slices.Values(append(res.Done, proven...)))
	Each(len(gone), func(i int) {
		id := gone[i]
		if _, err := t.st.Transition(ctx, id, store.Change{
			From: []store.State{store.StateTerminating}, To: store.StateTerminated, Reason: byID[id].Reason,
		}); err != nil && !errors.Is(err, store.ErrConflict) {
			t.log.Warn("instance terminated, record not marked (refresh finishes it)", "instance", id, "err", err)
		}
	})
	return gone, calls, errors.Join(errs...)
}

// now is the store's clock, which wrote the records' creation times (time.Now without one).
func (t *Terminator) now() time.Time {
	if c, ok := t.st.(interface{ Now() time.Time }); ok {
		return c.Now()
	}
	return time.Now()
}

// concurrency bounds the parallel store writes of one step.
const concurrency = 16

// Each runs f(0..n-1), at most concurrency at once.
func Each(n int, f func(i int)) {
	if n == 0 {
		return
	}
	var g errgroup.Group
	g.SetLimit(concurrency)
	for i := range n {
		g.Go(func() error { f(i); return nil })
	}
	_ = g.Wait() // f reports its own failures
}

// IDs returns the records' ids.
func IDs(recs []store.Instance) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}
