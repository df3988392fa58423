//go:build faults

// The fault matrix's world: one sandbox (the local stack with the real agent in every simulated
// instance) shared by the whole matrix, and reconciler replicas made on demand, each with its own
// SDK clients over the fault transports, as separate processes would have. The matrix runs its
// steps one after the other: each fault is judged by the invariant checker over the whole
// deployment, which must not see another step's work in flight.
package faults_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/faults"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// Timings of the matrix's replicas: test-sized, as the sandbox's.
const (
	pollInterval     = 50 * time.Millisecond
	fleetWait        = 8 * time.Second // created instances: boot and register
	registrationWait = 4 * time.Second // reused instances: notice the claim and register
	releaseWait      = 4 * time.Second // the agent's deregistration signal
	heartbeatMaxAge  = 4 * time.Second // agents beat every second
	idleTime         = time.Hour       // released instances stay pooled through the matrix
	quickBackoff     = 200 * time.Millisecond
	// lateShift is how far ahead the "late" refresh's clock runs: past the claimed and created
	// thresholds (5 min) of whatever a crashed replica abandoned, short of the idle and running ones.
	lateShift = 6 * time.Minute
	// provisionDeadline is the replicas' provision deadline (provision.Config.InProgressWait): a
	// run provisioning longer is taken over, by the late refresh at the latest.
	provisionDeadline = 2 * time.Minute
)

// env is the matrix's world.
type env struct {
	t   *testing.T
	sb  *sandbox.Sandbox
	log *slog.Logger
	rng *rand.Rand

	skew      atomic.Int64 // the agents' clock offset (clock skew faults)
	noAgent   atomic.Bool  // instances booting now run no agent (never registers)
	refuse    sync.Map     // instance id -> struct{}: GitHub refuses its registrations
	runSeq    atomic.Int64
	mu        sync.Mutex
	held      map[string][]string // run key -> instances, of runs provisioned and not released
	heldLabel map[string]string   // run key -> label
	answered  []string            // run keys whose provision answered under a fault (stuck-run rule)
	summary   []string
	// isolatedQueue is the pool queue of isolatedClass, warmQueue warmClass's, jobQueue the pool
	// job queue of the webhook path.
	isolatedQueue, warmQueue, jobQueue string
	releaseQueue                       string // releaseClass's pool queue (runner_release_test.go)
	warm                               warmTarget
	defaultRunID                       int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FAULTS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FAULTS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	fmt.Printf("faults: seed=%d (FAULTS_SEED=%d reproduces the kill points)\n", seed, seed)
	e := &env{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), held: map[string][]string{}, heldLabel: map[string]string{}, defaultRunID: 50000}
	e.log = slog.New(slog.DiscardHandler)
	if os.Getenv("RUNNERPOOL_TEST_LOG") != "" {
		e.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	sb, err := sandbox.Start(t.Context(), sandbox.Options{
		Root: t.TempDir(), Logger: e.log, JobDuration: 100 * time.Millisecond,
		AgentDisabled:    func(string) bool { return e.noAgent.Load() },
		FailRegistration: func(id string) bool { _, ok := e.refuse.Load(id); return ok },
		AgentClock:       func() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) },
	})
	if err != nil {
		t.Fatalf("starting the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	e.sb = sb
	q, err := sb.Stack.SQS().CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + isolatedClass)})
	if err != nil {
		t.Fatalf("creating the isolated class's queue: %v", err)
	}
	e.isolatedQueue = aws.ToString(q.QueueUrl)
	for name, dst := range map[string]*string{warmClass: &e.warmQueue, "jobs": &e.jobQueue, releaseClass: &e.releaseQueue} {
		q, err := sb.Stack.SQS().CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + name)})
		if err != nil {
			t.Fatalf("creating queue %s: %v", name, err)
		}
		*dst = aws.ToString(q.QueueUrl)
	}
	return e
}

// isolatedClass is a second runner class with a pool of its own, empty unless a step fills it: a
// provision of it creates its runners whatever the default class's pool holds.
const isolatedClass = "isolated"

// replica is one reconciler replica's control plane.
type replica struct {
	now   func() time.Time
	crash *faults.Crash
	st    *store.Store
	db    *dynamodb.Client // the store's client, for the ledgers that share its table
	ec2   *ec2.Client
	sqs   *sqs.Client
	gh    *ghaccess.Client
	queue *pool.Queue
	reg   *claim.Registrar
	cl    *claim.Claimer
	prov  *provision.Provisioner
	rel   *release.Releaser
	ref   *refresh.Refresher
}

type replicaOptions struct {
	crash  *faults.Crash      // nil: never crashes
	inject *faults.Inject     // nil: no injected DynamoDB/SQS errors
	lost   *faults.LostAnswer // nil: every answer arrives
	// quickRetries scales the SDK's retry backoff down as the sandbox scales time (at most
	// quickBackoff between attempts instead of 20-30 s), for steps that make the SDK retry often.
	quickRetries bool
	// callTimeout bounds each HTTP request of the replica (default 30 s, as the service's
	// aws-call-timeout).
	callTimeout time.Duration
	shift       time.Duration // the replica's clock runs this far ahead
	// fleetWait bounds the wait for created instances to register (default fleetWait).
	fleetWait time.Duration
	// reuse is the runner classes' reuse rule (config.Reuse*) the replica's releases and
	// hand-backs apply; "" any repository.
	reuse string
	// release, when set, adds releaseClass at its launch template version and the product's
	// runner-due rule to the replica's releases and refresh passes (runner_release_test.go).
	release *releaseAt
}

// replica builds a control plane over the sandbox with its own clients.
func (e *env) replica(o replicaOptions) *replica {
	now := time.Now
	if o.shift != 0 {
		now = func() time.Time { return time.Now().Add(o.shift) }
	}
	var base http.RoundTripper
	if o.lost != nil {
		base = o.lost
	}
	hc := &http.Client{Transport: faults.Chain(base, o.crash, o.inject), Timeout: cmp.Or(o.callTimeout, 30*time.Second)}
	cfg, _ := e.sb.Stack.AWSConfig(context.Background())
	cfg.HTTPClient = hc
	r := &replica{crash: o.crash, now: now}
	r.db = dynamodb.NewFromConfig(cfg, func(do *dynamodb.Options) { do.DisableValidateResponseChecksum = true })
	r.st = store.New(r.db, e.sb.Table, store.WithClock(now))
	ec2Retry := awslimit.RetryOptions{}
	if o.quickRetries {
		cfg.Retryer = func() aws.Retryer {
			return retry.AddWithMaxBackoffDelay(retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = ratelimit.None }), quickBackoff)
		}
		ec2Retry.MaxBackoff = quickBackoff
	}
	r.ec2 = ec2.NewFromConfig(cfg, awslimit.WithEC2LimitsRetry(awslimit.Default(), ec2Retry))
	r.sqs = sqs.NewFromConfig(cfg)
	r.queue = pool.NewQueue(r.sqs, e.sb.Queue.URL())
	isolated := pool.NewQueue(r.sqs, e.isolatedQueue)
	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.sb.Stack.Endpoints.GitHubAPI, Token: e.sb.Stack.GitHub.PAT(), HTTPClient: hc, Logger: e.log})
	if err != nil {
		e.t.Fatalf("ghaccess: %v", err)
	}
	r.gh = gh
	releaseQ := pool.NewQueue(r.sqs, e.releaseQueue)
	resolver := pool.StaticResolver{sandbox.RunnerClass: r.queue, isolatedClass: isolated, warmClass: pool.NewQueue(r.sqs, e.warmQueue), releaseClass: releaseQ}
	relOpts := release.Options{SignalWait: releaseWait, PollInterval: pollInterval, Now: now, Logger: e.log, RunnerDue: o.release.due()}
	if o.reuse != "" {
		relOpts.Reuse = func(string) (string, error) { return o.reuse, nil }
	}
	r.rel = release.New(r.st, resolver, gh, r.ec2, relOpts)
	copts := claim.Options{RegistrationWait: registrationWait, PollInterval: pollInterval, HandBack: r.rel.HandBack,
		HeartbeatMaxAge: heartbeatMaxAge, Now: now, Logger: e.log}
	r.reg = claim.NewRegistrar(r.st, gh, r.ec2, copts)
	r.cl = claim.NewClaimer(r.st, r.reg, copts)
	subnets := make([]string, 0, len(sandbox.Subnets))
	for s := range sandbox.Subnets {
		subnets = append(subnets, s)
	}
	slices.Sort(subnets)
	cfgp := provision.Config{
		ResourceClasses: map[string]provision.ResourceClass{"small": {CPU: 2, MemoryMiB: 4096}},
		RunnerClasses: map[string]runnerclass.Resolved{
			sandbox.RunnerClass: {RunnerClass: faultClass(sandbox.RunnerClass, e.sb.LaunchTemplate, subnets), Queue: r.queue, TemplateVersion: "$Latest"},
			isolatedClass:       {RunnerClass: faultClass(isolatedClass, e.sb.LaunchTemplate, subnets), Queue: isolated, TemplateVersion: "$Latest"},
		},
		DefaultRunnerClass: sandbox.RunnerClass, DeploymentID: sandbox.DeploymentID, RegistrationWait: cmp.Or(o.fleetWait, fleetWait),
		InProgressWait: provisionDeadline,
	}
	if o.release != nil {
		cfgp.RunnerClasses[releaseClass] = o.release.class(releaseQ, subnets)
	}
	r.prov = provision.New(r.st, r.cl, r.reg, fleet.New(r.ec2, fleet.Options{Now: now, Logger: e.log}), r.ec2, cfgp,
		provision.Options{PollInterval: pollInterval, RollbackTimeout: 20 * time.Second, Now: now, Logger: e.log})
	r.ref = refresh.New(r.st, r.ec2, gh, resolver, refresh.Options{
		DeploymentID: sandbox.DeploymentID, OrphanGrace: time.Millisecond, Scopes: []string{sandbox.Scope},
		SQS: r.sqs, VisibilityTimeout: 2 * time.Second, TakeOver: r.prov.TakeOverAbandoned, Now: now, Logger: e.log,
		RunnerDue: o.release.due(),
	})
	return r
}

// request is a provision of count runners for a new run.
func (e *env) request(count int) provision.Request {
	run := strconv.FormatInt(e.defaultRunID+e.runSeq.Add(1), 10)
	return provision.Request{
		RepositoryID: "4242", Repository: sandbox.Scope, RunID: run, Attempt: 1, Count: count,
		UsageClass: "on-demand", InstanceTypes: []string{"c*", "m*"}, ResourceClass: "small",
	}
}

// hold records a successful provision's runners as held by its run; unhold forgets the run (its
// release started).
func (e *env) hold(res provision.Result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range res.Runners {
		e.held[res.RunKey] = append(e.held[res.RunKey], r.InstanceID)
	}
	e.heldLabel[res.RunKey] = res.Label
}

func (e *env) unhold(runKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.held, runKey)
}

func (e *env) heldRuns() map[string][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string][]string, len(e.held))
	for k, v := range e.held {
		out[k] = slices.Clone(v)
	}
	return out
}

// provision runs a healthy provision and holds its runners.
func (e *env) provision(ctx context.Context, r *replica, count int) (provision.Result, error) {
	res, err := r.prov.Provision(ctx, e.request(count))
	if err == nil {
		e.hold(res)
	}
	return res, err
}

// release releases a held run with a healthy replica.
func (e *env) release(ctx context.Context, r *replica, runKey string) (release.Report, error) {
	e.unhold(runKey)
	return r.rel.Release(ctx, runKey, idleTime)
}

// idle counts the poolable idle records.
func (e *env) idle(ctx context.Context) int {
	recs, err := e.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
	if err != nil {
		e.t.Fatalf("listing idle records: %v", err)
	}
	n := 0
	for _, rec := range recs {
		if rec.RunID == "" && !rec.Expired(time.Now()) {
			n++
		}
	}
	return n
}

// stock makes sure the pool holds at least n idle instances (provisioning and releasing).
func (e *env) stock(ctx context.Context, r *replica, n int) error {
	if missing := n - e.idle(ctx); missing > 0 {
		res, err := e.provision(ctx, r, missing)
		if err != nil {
			return fmt.Errorf("stocking the pool: %w", err)
		}
		if _, err := e.release(ctx, r, res.RunKey); err != nil {
			return fmt.Errorf("stocking the pool: %w", err)
		}
	}
	return nil
}

// check runs the invariant checker with the healthy view of the world.
func (e *env) check(ctx context.Context, r *replica, o invariant.Options) (invariant.Report, error) {
	o.DeploymentID = sandbox.DeploymentID
	o.Queues, o.SQS = []string{e.sb.Queue.URL(), e.isolatedQueue, e.warmQueue, e.releaseQueue}, r.sqs
	o.GitHub, o.Scopes = r.gh, []string{sandbox.Scope}
	o.Held = e.heldRuns()
	e.mu.Lock()
	o.Answered = slices.Clone(e.answered)
	e.mu.Unlock()
	o.RunRepositories = []string{sandbox.Scope}
	for _, m := range e.sb.Stack.GitHub.Minted() {
		o.Minted = append(o.Minted, invariant.Mint{Kind: m.Kind, Scope: m.Scope})
	}
	return invariant.Check(ctx, r.st, r.ec2, o)
}

// verify is what follows every fault: a fresh replica runs one refresh pass, and the rules must
// hold; a late replica (clock past every abandoned claim's and creation's threshold) runs another,
// and no record may be left past its threshold and every idle instance confirmed clean has exactly
// one pool message; a second late pass must change nothing.
func (e *env) verify(ctx context.Context) error {
	_, err := e.verifyWith(ctx, invariant.Options{})
	return err
}

// verifyWith is verify whose late check also asks for the rules extra sets (Healthy, Terminations,
// Answers, ProvisionDeadline, IdlePooled); it returns that check's report.
func (e *env) verifyWith(ctx context.Context, extra invariant.Options) (invariant.Report, error) {
	fresh := e.replica(replicaOptions{})
	faultEnded := time.Now()
	first, err := fresh.ref.Run(ctx)
	if err != nil {
		return invariant.Report{}, fmt.Errorf("refresh after the fault: %w", err)
	}
	// Instances launched just now (a step's setup) are spared by refresh's grace, and here too;
	// the late pass below judges them.
	rep, err := e.check(ctx, fresh, invariant.Options{OrphanGrace: 10 * time.Second})
	if err != nil {
		return rep, err
	}
	if err := rep.Err(); err != nil {
		return rep, fmt.Errorf("after one refresh pass: %w", err)
	}
	// The late replica's clock runs lateShift ahead, but SQS's does not: a message a crashed
	// reader received is still hidden for that reader's visibility timeout in fauxqs's time. A
	// walk that missed a message (first.Pool.Missed) would otherwise see it missing again "6
	// minutes later" and pool the instance again beside it, which real time never allows. So
	// when the fresh walk missed one, the late pass starts only once every reader's hold on a
	// message received before the fault ended has lapsed (refresh.Options.LongestVisibility, as
	// the replicas' defaults set it); the common case, no miss, does not wait.
	if len(first.Pool.Missed) > 0 {
		time.Sleep(time.Until(faultEnded.Add(pool.DefaultVisibilityTimeout + time.Second)))
	}
	late := e.replica(replicaOptions{shift: lateShift})
	refreshedAt := time.Now()
	if _, err := late.ref.Run(ctx); err != nil {
		return invariant.Report{}, fmt.Errorf("late refresh: %w", err)
	}
	// A threshold that passed while the pass ran (it read the table at its start) is the next
	// pass's to enforce: the grace covers the pass, on a loaded machine several seconds.
	o := extra
	o.Thresholds, o.Grace, o.Pooled, o.RefreshedAt = true, time.Second+time.Since(refreshedAt), true, refreshedAt
	o.Now = func() time.Time { return time.Now().Add(lateShift) }
	rep, err = e.check(ctx, late, o)
	if err != nil {
		return rep, err
	}
	if err := rep.Err(); err != nil {
		return rep, fmt.Errorf("after a late refresh pass: %w", err)
	}
	again, err := late.ref.Run(ctx)
	if err != nil {
		return rep, fmt.Errorf("second late refresh: %w", err)
	}
	after, err := e.check(ctx, late, invariant.Options{})
	if err != nil {
		return rep, err
	}
	// A repeated pass changes no record and no instance. It may still drop a dead pool message the
	// first pass could not see (SQS hides a message received by a crashed replica until its
	// visibility timeout ends): that cleans up, it changes nothing a claim could act on.
	// It may also pool an idle instance whose agent confirmed its clean-up only after the first
	// late pass began (the release that crashed never woke it): the world changed, the pass caught up.
	v := slices.DeleteFunc(invariant.Unchanged(rep, after), func(v invariant.Violation) bool {
		if !slices.Contains(again.Pool.Repooled, v.Instance) {
			return false
		}
		rec, err := late.st.Get(ctx, v.Instance)
		return err == nil && rec.PooledAt.After(refreshedAt)
	})
	if len(v) > 0 || again.Expiry.Marked > 0 || len(again.Orphans.Terminated) > 0 {
		return rep, fmt.Errorf("a repeated refresh pass changed something: %v (report %+v)", v, again)
	}
	return rep, nil
}

// report prints and keeps one step's line.
func (e *env) report(step string, runs, ok int, extra string) {
	line := fmt.Sprintf("faults: step=%s runs=%d ok=%d%s", step, runs, ok, extra)
	fmt.Println(line)
	e.mu.Lock()
	e.summary = append(e.summary, line)
	e.mu.Unlock()
}

// faultClass is a step-driven runner class of the matrix, launched from the sandbox's template.
func faultClass(name, lt string, subnets []string) declared.RunnerClass {
	return declared.RunnerClass{
		Name: name, LaunchTemplateID: lt, Subnets: subnets,
		MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(idleTime),
	}
}
