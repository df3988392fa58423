// Package refresh is the control plane's cleanup pass, run on a schedule by the reconciler (seed
// 003, "Expiration, Thresholds, and Termination"). One pass:
//
//  1. marks every record past its threshold terminating, with a conditional write that loses to
//     any change made since the read (a renewed record is left alone);
//  2. terminates the marked instances (and any left terminating by an earlier, interrupted pass)
//     with TerminateInstances in batches, then marks their records terminated;
//  3. terminates orphans: instances carrying this deployment's tag with no live record, older than
//     a grace period (never anything without the tag);
//  4. deletes offline GitHub runners this deployment left behind for instances that are gone;
//  5. drops pool messages whose instance is no longer idle, keeping every live one, and pools again
//     an idle instance whose message was lost;
//  6. at most every AgentSweepInterval, deletes the agent-partition items no live instance owns and
//     those carrying an index key (agents.go).
//
// A failure in one phase is recorded and the other phases still run. A pass is idempotent: a second
// pass over an unchanged world changes nothing.
package refresh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"golang.org/x/sync/errgroup"
)

// EC2API is the part of the EC2 client refresh uses; *ec2.Client satisfies it.
type EC2API interface {
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, opts ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeTags(ctx context.Context, in *ec2.DescribeTagsInput, opts ...func(*ec2.Options)) (*ec2.DescribeTagsOutput, error)
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// GitHub is the part of the reconciler's GitHub access refresh uses; *ghaccess.Client satisfies it.
type GitHub interface {
	ListRunners(ctx context.Context, scope string) ([]ghaccess.Runner, error)
	DeleteRunner(ctx context.Context, scope string, id int64) error
}

// SQSAPI is the part of the SQS client the pool check uses; *sqs.Client satisfies it.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	// The scope queues of a pool (scopequeues.go).
	ListQueues(ctx context.Context, in *sqs.ListQueuesInput, opts ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
	DeleteQueue(ctx context.Context, in *sqs.DeleteQueueInput, opts ...func(*sqs.Options)) (*sqs.DeleteQueueOutput, error)
}

// QueueLister is implemented by a pool.Resolver that can list every pool queue; refresh checks
// those queues as well as Options.Queues.
type QueueLister interface {
	Queues() []*pool.Queue
}

// Defaults and limits of Options.
const (
	DefaultOrphanGrace = 2 * time.Minute
	DefaultBatchSize   = 50
	// MaxBatchSize is EC2's limit on instance ids per TerminateInstances call.
	MaxBatchSize              = terminate.MaxBatch
	DefaultVisibilityTimeout  = 30 * time.Second
	DefaultMissWindow         = 15 * time.Minute
	DefaultEmptyScopeQueueAge = 24 * time.Hour
)

// Options configure a Refresher.
type Options struct {
	// RunnerDue says why an idle instance's runner must not serve another run ("" when it may;
	// runner_due.go). Nil: none is retired for its runner.
	RunnerDue func(rec store.Instance) string
	// DeploymentID is the value of this deployment's runnerpool:deployment tag. Required: the orphan
	// sweep touches only instances carrying it.
	DeploymentID string
	// OrphanGrace protects instances launched less than this ago from the orphan sweep: a fleet's
	// records are written just after CreateFleet returns (default 2 min).
	OrphanGrace time.Duration
	// BatchSize is the number of instance ids per TerminateInstances call (default 50, at most 1000).
	BatchSize int
	// Scopes are the GitHub repositories ("owner/repo") and organisations ("owner") whose runners are
	// checked for leftovers. The scopes pooled instances were released under are checked too (the
	// after-the-fact check of signed releases, runners.go) whenever there is a GitHub client.
	Scopes []string
	// Queues are the pool queues to check, in addition to those of a resolver that is a QueueLister.
	Queues []*pool.Queue
	// SQS is the client of those queues. Required when there is a queue to check.
	SQS SQSAPI
	// VisibilityTimeout bounds how long a batch the pool check received stays hidden if the check
	// cannot make it visible again (it does so as soon as the batch is judged; default 30 s; whole
	// seconds, at least 1).
	VisibilityTimeout time.Duration
	// LongestVisibility is the longest visibility timeout of any reader of the pool queues
	// (pickups, this check; default the longer of VisibilityTimeout and
	// pool.DefaultVisibilityTimeout): an instance is pooled again for want of a message only when
	// two complete walks further apart than this both missed it.
	LongestVisibility time.Duration
	// MissWindow is how long a recorded miss stays the first of a fault (default 15 min); an older
	// one is of an earlier fault, and the next miss starts afresh.
	MissWindow time.Duration
	// EmptyScopeQueueAge is how long a pool's scope queue must have been seen empty, with no
	// pooled record expecting it, before the pool check deletes it (default a day).
	EmptyScopeQueueAge time.Duration
	// JobAccess, when set, says a runner class's job_access now (ok false: unknown): a pooled
	// instance launched under another one is expired (pool.go, retireOtherPostures).
	JobAccess func(runnerClass string) (jobAccess string, ok bool)
	// AgentSweepInterval is the pace of phase 6, a Scan of the table (default 10 min).
	AgentSweepInterval time.Duration
	// Concurrency bounds parallel store writes and reads within a phase (default 8).
	Concurrency int
	// TakeOver, when set, is asked about every run its live records name until it reports the run
	// settled: it takes over a provision abandoned past its
	// deadline (provision.Provisioner.TakeOverAbandoned; runs.go).
	TakeOver func(ctx context.Context, runKey string) (settled bool, err error)
	Now      func() time.Time
	Logger   *slog.Logger
}

// Refresher runs refresh passes.
type Refresher struct {
	st       *store.Store
	ec2      EC2API
	gh       GitHub
	resolver pool.Resolver
	opts     Options
	log      *slog.Logger

	mu        sync.Mutex
	lastSweep time.Time // of phase 6
	// terminated remembers instances EC2 reported terminated whose tag DescribeTags still lists,
	// so the orphan sweep does not describe them again (orphans.go).
	terminated map[string]bool
	// missed holds the pooling of each instance whose miss marker this refresher wrote (pool.go),
	// to clear once its message is seen.
	missed map[string]time.Time
	// emptySince is when the pool check first saw each scope queue empty and unexpected, since it
	// last saw it otherwise (scopequeues.go).
	emptySince map[string]time.Time
	// settled are the runs the stuck-run phase found settled (runs.go).
	settled settledRuns
}

// New returns a Refresher. Options are checked by Run, so a bad configuration is an error of every
// pass rather than a crash.
func New(st *store.Store, ec2 EC2API, gh GitHub, resolver pool.Resolver, opts Options) *Refresher {
	if opts.OrphanGrace <= 0 {
		opts.OrphanGrace = DefaultOrphanGrace
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.AgentSweepInterval <= 0 {
		opts.AgentSweepInterval = DefaultAgentSweepInterval
	}
	if opts.LongestVisibility <= 0 {
		opts.LongestVisibility = max(opts.VisibilityTimeout, pool.DefaultVisibilityTimeout)
	}
	if opts.MissWindow <= 0 {
		opts.MissWindow = DefaultMissWindow
	}
	if opts.EmptyScopeQueueAge <= 0 {
		opts.EmptyScopeQueueAge = DefaultEmptyScopeQueueAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Refresher{st: st, ec2: ec2, gh: gh, resolver: resolver, opts: opts, log: opts.Logger}
}

// Phases of a pass, as named in reports and errors.
const (
	PhaseExpiry  = "expiry"
	PhaseOrphans = "orphans"
	PhaseRunners = "runners"
	PhasePool    = "pool"
)

// ErrConfig marks a Refresher configured so that no pass can run.
var ErrConfig = errors.New("refresh misconfigured")

// Run runs one pass. Its error joins every phase's errors (Report.Errors); the report is complete
// whatever failed.
func (r *Refresher) Run(ctx context.Context) (Report, error) {
	if err := r.check(); err != nil {
		return Report{}, err
	}
	p := &pass{now: r.opts.Now()}
	p.rep.At = p.now
	r.expiry(ctx, p)
	orphans := r.orphans(ctx, p)
	r.retireDue(ctx, p)
	r.runs(ctx, p)
	r.runners(ctx, p, orphans)
	r.pool(ctx, p)
	r.agents(ctx, p)
	rep := p.rep
	rep.sort()
	r.log.InfoContext(ctx, "refresh pass",
		"marked", rep.Expiry.Marked, "renewed", rep.Expiry.Renewed, "retried", rep.Expiry.Retried,
		"terminated", len(rep.Expiry.Terminated), "already_gone", len(rep.Expiry.AlreadyGone), "unseen", len(rep.Expiry.Unseen),
		"terminate_calls", rep.Expiry.TerminateCalls+rep.Orphans.TerminateCalls,
		"orphans_terminated", len(rep.Orphans.Terminated), "orphans_young", len(rep.Orphans.Young), "orphans_unseen", len(rep.Orphans.Unseen),
		"runners_deleted", len(rep.Runners.Deleted), "runners_of_pooled_deleted", len(rep.Runners.OfPooled), "messages_dropped", rep.Pool.Dropped, "messages_kept", rep.Pool.Kept,
		"agent_items_unowned", rep.Agents.Unowned, "agent_items_foreign", len(rep.Agents.Foreign),
		"errors", len(rep.Errors))
	return rep, rep.Err()
}

func (r *Refresher) check() error {
	var problems []error
	if r.opts.DeploymentID == "" {
		problems = append(problems, errors.New("DeploymentID is required (the orphan sweep only touches instances tagged with it)"))
	}
	if r.opts.BatchSize > MaxBatchSize {
		problems = append(problems, fmt.Errorf("BatchSize %d: EC2 takes at most %d instance ids per call", r.opts.BatchSize, MaxBatchSize))
	}
	if r.st == nil || r.ec2 == nil {
		problems = append(problems, errors.New("a store and an EC2 client are required"))
	}
	if len(r.opts.Scopes) > 0 && r.gh == nil {
		problems = append(problems, errors.New("GitHub scopes are configured without a GitHub client"))
	}
	if len(r.queues()) > 0 && r.opts.SQS == nil {
		problems = append(problems, errors.New("pool queues are configured without an SQS client"))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(problems...))
	}
	return nil
}

// queues lists the pool queues to check, each URL once: the resolver's first (its queues are
// those releases put into, with their scope queues).
func (r *Refresher) queues() []*pool.Queue {
	var all []*pool.Queue
	if l, ok := r.resolver.(QueueLister); ok {
		all = append(all, l.Queues()...)
	}
	all = append(all, r.opts.Queues...)
	seen := map[string]bool{}
	var out []*pool.Queue
	for _, q := range all {
		if q != nil && !seen[q.URL()] {
			seen[q.URL()] = true
			out = append(out, q)
		}
	}
	return out
}

// forEach runs fn for every item with at most n at once and waits for all of them.
func forEach[T any](n int, items []T, fn func(T)) {
	var g errgroup.Group
	g.SetLimit(n)
	for _, it := range items {
		g.Go(func() error { fn(it); return nil })
	}
	_ = g.Wait() // fn reports its own failures
}
