// Test environment of the provision package: the shared DynamoDB Local and fauxqs, our own EC2
// server (with a simulated agent inside every running instance) and GitHub fake over httptest,
// real SDK clients, and helpers to fill the pool and to audit where every instance ended up.
package provision_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

const (
	repo        = "acme/api"
	repoID      = "4242"
	runnerClass = "linux"
	deployment  = "dep-test"
	// simTag on an instance scripts its simulated agent: "stale" (dead: no heartbeat, no claim acknowledgement), "never" (never
	// registers), "fail" (reports a failed registration). Absent: a healthy agent.
	simTag = "test:sim"
)

var subnets = map[string]string{"subnet-a": "us-east-1a", "subnet-b": "us-east-1b", "subnet-c": "us-east-1c"}

// Sizes of the resource classes, and the instance type the pool uses for each.
var (
	resourceClasses = map[string]provision.ResourceClass{
		"small": {CPU: 2, MemoryMiB: 4096}, "medium": {CPU: 4, MemoryMiB: 8192}, "large": {CPU: 8, MemoryMiB: 16384},
	}
	poolTypes = map[string]string{"small": "c6i.large", "medium": "c6i.xlarge", "large": "c6i.2xlarge"}
)

type env struct {
	stk     *stack.Stack
	table   string
	db      *dynamodb.Client
	st      *store.Store // the test's own store (setup and audit; not counted)
	sqs     *sqs.Client
	queue   string // pool queue URL of runnerClass
	ec2srv  *ec2server.Server
	ec2URL  string
	ec2     *ec2.Client // the test's own EC2 client
	lt      string      // launch template id
	ghURL   string
	gh      *githubfake.Server
	agentSt *store.Store // the simulated agents' store (own client)

	mu      sync.Mutex
	created claimtest.Behaviour // behaviour of agents of instances without a sim tag
	agents  map[string]*claimtest.Agent
}

type envOptions struct {
	agentPoll      time.Duration // simulated agent's record polling; default 200 ms
	heartbeatEvery time.Duration // default 2 s
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	if o.agentPoll == 0 {
		o.agentPoll = 200 * time.Millisecond
	}
	if o.heartbeatEvery == 0 {
		o.heartbeatEvery = 2 * time.Second
	}
	ctx := context.Background()
	stk := stacktest.Shared(t)
	e := &env{stk: stk, db: stk.DynamoDB(), sqs: stk.SQS(), table: stacktest.UniqueName(t, "state"), agents: map[string]*claimtest.Agent{}}
	if err := store.CreateTable(ctx, e.db, e.table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() { _, _ = e.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &e.table}) })
	e.st = store.New(e.db, e.table)
	e.agentSt = store.New(stk.DynamoDB(), e.table)

	qo, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	e.queue = aws.ToString(qo.QueueUrl)
	t.Cleanup(func() { _, _ = e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: qo.QueueUrl}) })

	e.ec2srv = ec2server.New(ec2server.Options{
		PendingDelay: -1, ShuttingDownDelay: 20 * time.Millisecond, TerminatedRetention: time.Hour, Logger: quiet,
		Runtime: func(ctx context.Context, inst ec2server.RuntimeInstance) {
			b := e.behaviour(inst.Tags[simTag])
			b.Poll, b.HeartbeatEvery = o.agentPoll, o.heartbeatEvery
			a := claimtest.Simulate(ctx, e.agentSt, inst.ID, b)
			e.mu.Lock()
			e.agents[inst.ID] = a
			e.mu.Unlock()
			<-ctx.Done()
			a.Stop()
		},
	})
	for s, z := range subnets {
		e.ec2srv.SetSubnet(s, z)
	}
	ehs := httptest.NewServer(e.ec2srv)
	e.ec2URL = ehs.URL
	e.ec2 = e.ec2Client(nil)
	lt, err := e.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runner"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: aws.String("ami-0123456789abcdef0"),
			MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
				HttpTokens: ec2types.LaunchTemplateHttpTokensStateRequired, InstanceMetadataTags: ec2types.LaunchTemplateInstanceMetadataTagsStateEnabled,
			},
		},
	})
	if err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	e.lt = aws.ToString(lt.LaunchTemplate.LaunchTemplateId)

	e.gh = githubfake.New(githubfake.Options{})
	// GitHub's documented limits, as one App installation has them: the contention tests must hold
	// under them (a test that needs a limit of its own sets it).
	e.gh.SetLimits(githubfake.DocumentedLimits)
	ghs := httptest.NewServer(e.gh)
	e.ghURL = ghs.URL
	t.Cleanup(func() {
		ehs.Close()
		e.ec2srv.Close() // stops every simulated agent
		ghs.Close()
		e.gh.Close()
	})
	return e
}

func (e *env) behaviour(sim string) claimtest.Behaviour {
	switch sim {
	case "stale":
		// A dead agent: no heartbeat, and no acknowledgement of a claim (what liveness is judged by).
		return claimtest.Behaviour{Dead: true}
	case "never":
		return claimtest.Behaviour{NeverRegister: true}
	case "fail":
		return claimtest.Behaviour{FailRegistration: true}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.created
}

// setCreatedBehaviour scripts the agents of instances launched from now on without a sim tag.
func (e *env) setCreatedBehaviour(b claimtest.Behaviour) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.created = b
}

func (e *env) ec2Client(apiOptions []func(*middleware.Stack) error, opts ...func(*ec2.Options)) *ec2.Client {
	cfg, _ := e.stk.AWSConfig(context.Background())
	cfg.APIOptions = append(cfg.APIOptions, apiOptions...)
	opts = append([]func(*ec2.Options){
		func(o *ec2.Options) { o.BaseEndpoint = aws.String(e.ec2URL) },
		awslimit.WithEC2LimitsRetry(awslimit.Default(), awslimit.RetryOptions{MaxBackoff: 50 * time.Millisecond}),
	}, opts...)
	return ec2.NewFromConfig(cfg, opts...)
}

// side is one control-plane replica: its own clients, store, registrar, claimer, fleet and
// provisioner over the shared table, queues and EC2 server.
type side struct {
	st  *store.Store
	sqs *sqs.Client
	ec2 *ec2.Client
	reg *claim.Registrar
	cl  *claim.Claimer
	fl  *fleet.Fleet
	p   *provision.Provisioner
	cfg provision.Config
	rel *release.Releaser // the hand-backs of the side's rollbacks (claim.Options.HandBack)
}

type sideOptions struct {
	counter *awslimit.Counter // counts the replica's AWS calls
	// fleetAPI wraps the replica's EC2 client for the fleet (fault injection).
	fleetAPI         func(fleet.EC2API) fleet.EC2API
	claimPoll        time.Duration // default 50 ms
	claimWait        time.Duration // registration wait of reused instances; default 4 s
	registrationWait time.Duration // fleet validation; default 8 s
	inProgressWait   time.Duration
	// warm adds the stopped branch of selection (claim.Starter).
	warm bool
	// sampling puts the SQS sampling proxy (stack.Sampler) between the replica and fauxqs: a short
	// poll comes back empty with this probability, as on real SQS with few messages.
	sampling float64
	// scopeQueues keeps a queue per scope beside the class queue (pool.NewScopedQueue), as the
	// reconciler does, and no second look: what the side reuses came through its pickup.
	scopeQueues bool
	// reuse is runnerClass's reuse rule (declared.Reuse*; "" any repository), which the side's
	// hand-backs apply as its release does.
	reuse string
	// jobAccess is runnerClass's job access (declared.JobAccess*; "" user).
	jobAccess string
	// bootExtra is runnerClass's BootExtra (a boot that installs packages).
	bootExtra time.Duration
}

func (e *env) side(t testing.TB, o sideOptions) *side {
	t.Helper()
	if o.claimPoll == 0 {
		o.claimPoll = 50 * time.Millisecond
	}
	if o.claimWait == 0 {
		o.claimWait = 4 * time.Second
	}
	if o.registrationWait == 0 {
		o.registrationWait = 8 * time.Second
	}
	var api []func(*middleware.Stack) error
	if o.counter != nil {
		api = append(api, o.counter.AddMiddleware)
	}
	cfg, _ := e.stk.AWSConfig(context.Background())
	cfg.APIOptions = append(cfg.APIOptions, api...)
	db := dynamodb.NewFromConfig(cfg, func(op *dynamodb.Options) {
		op.BaseEndpoint = aws.String(e.stk.Endpoints.DynamoDB)
		op.DisableValidateResponseChecksum = true
	})
	sqsURL := e.stk.Endpoints.SQS
	if o.sampling > 0 {
		sm, err := stack.NewSampler(sqsURL, o.sampling, 0)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(sm)
		t.Cleanup(srv.Close)
		sqsURL = srv.URL
	}
	s := &side{sqs: sqs.NewFromConfig(cfg, func(op *sqs.Options) { op.BaseEndpoint = aws.String(sqsURL) })}
	s.st = store.New(db, e.table)
	s.ec2 = e.ec2Client(api)
	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.ghURL, Token: e.gh.PAT(), Logger: quiet})
	if err != nil {
		t.Fatalf("ghaccess.New: %v", err)
	}
	copts := claim.Options{RegistrationWait: o.claimWait, PollInterval: o.claimPoll, HeartbeatMaxAge: 15 * time.Second, Logger: quiet,
		HandBack: func(ctx context.Context, runID, scope string, rec store.Instance, idleUntil time.Time) error {
			return s.rel.HandBack(ctx, runID, scope, rec, idleUntil)
		}}
	s.reg = claim.NewRegistrar(s.st, gh, s.ec2, copts)
	s.cl = claim.NewClaimer(s.st, s.reg, copts)
	var fapi fleet.EC2API = s.ec2
	if o.fleetAPI != nil {
		fapi = o.fleetAPI(fapi)
	}
	s.fl = fleet.New(fapi, fleet.Options{Logger: quiet})
	s.cfg = provision.Config{
		ResourceClasses: resourceClasses,
		RunnerClasses: map[string]runnerclass.Resolved{runnerClass: {
			RunnerClass: declared.RunnerClass{
				Name: runnerClass, LaunchTemplateID: e.lt, Subnets: []string{"subnet-a", "subnet-b", "subnet-c"},
				MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(time.Hour), JobAccess: o.jobAccess,
			},
			Queue: pool.NewQueue(s.sqs, e.queue), TemplateVersion: "$Default", BootExtra: o.bootExtra,
		}},
		DefaultRunnerClass: runnerClass, DeploymentID: deployment,
		CreatedTimeout: 2 * time.Minute, RegistrationWait: o.registrationWait, InProgressWait: o.inProgressWait,
	}
	popts := provision.Options{
		PollInterval: 50 * time.Millisecond, Logger: quiet,
	}
	if o.warm {
		popts.Starter = claim.NewStarter(s.st, s.ec2, s.reg, copts)
	}
	if o.scopeQueues {
		rc := s.cfg.RunnerClasses[runnerClass]
		rc.Queue = pool.NewScopedQueue(s.sqs, e.queue, pool.ScopeOptions{Logger: quiet})
		s.cfg.RunnerClasses[runnerClass] = rc
		popts.NoSecondLook = true
	}
	s.p = provision.New(s.st, s.cl, s.reg, s.fl, s.ec2, s.cfg, popts)
	s.rel = release.New(s.st, pool.StaticResolver{runnerClass: s.cfg.RunnerClasses[runnerClass].Queue}, gh, s.ec2, release.Options{
		SignalWait: 5 * time.Second, PollInterval: 50 * time.Millisecond, Logger: quiet,
		Reuse: func(class string) (string, error) {
			if class != runnerClass {
				return "", fmt.Errorf("no runner class %q", class)
			}
			return o.reuse, nil
		},
	})
	return s
}

// poolSpec describes idle instances to put in the pool.
type poolSpec struct {
	n             int
	resourceClass string // small, medium or large
	usageClass    string // default on-demand
	sim           string // simTag value
	delaySeconds  int32  // SQS delay of their messages
	// unverified leaves them idle with their agent's release signal written but never marked pooled
	// nor put in the pool: a release still checking with GitHub, or a job's forged signal.
	unverified bool
}

// idle launches instances in the EC2 server and takes each through created -> running -> idle in
// the table, as a finished run's release would, then puts its message in the pool.
func (e *env) idle(t testing.TB, specs ...poolSpec) []store.Instance {
	t.Helper()
	ctx := context.Background()
	q := pool.NewQueue(e.sqs, e.queue)
	var out []store.Instance
	var mu sync.Mutex
	for i, sp := range specs {
		if sp.usageClass == "" {
			sp.usageClass = fleet.OnDemand
		}
		itype := poolTypes[sp.resourceClass]
		subnet := slices.Sorted(maps.Keys(subnets))[i%3]
		in := &ec2.RunInstancesInput{
			ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceType(itype), SubnetId: aws.String(subnet),
			MinCount: aws.Int32(int32(sp.n)), MaxCount: aws.Int32(int32(sp.n)),
		}
		if sp.sim != "" {
			in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance,
				Tags: []ec2types.Tag{{Key: aws.String(simTag), Value: aws.String(sp.sim)}}}}
		}
		ro, err := e.ec2.RunInstances(ctx, in)
		if err != nil {
			t.Fatalf("RunInstances: %v", err)
		}
		rc := resourceClasses[sp.resourceClass]
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, inst := range ro.Instances {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				rec := e.makeIdle(t, q, store.Instance{
					ID: aws.ToString(inst.InstanceId), State: store.StateCreated, RunID: "seed-run",
					Threshold: time.Now().Add(time.Hour), UsageClass: sp.usageClass, InstanceType: itype,
					CPU: rc.CPU, MemoryMiB: rc.MemoryMiB, ResourceClass: sp.resourceClass, RunnerClass: runnerClass,
					Scope: repo, Zone: subnets[subnet],
				}, sp.delaySeconds, sp.unverified)
				mu.Lock()
				out = append(out, rec)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	return out
}

func (e *env) makeIdle(t testing.TB, q *pool.Queue, in store.Instance, delay int32, unverified bool) store.Instance {
	ctx := context.Background()
	if _, err := e.st.Create(ctx, in); err != nil {
		t.Errorf("Create %s: %v", in.ID, err)
		return in
	}
	if _, err := e.st.Transition(ctx, in.ID, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "seed-run"}); err != nil {
		t.Errorf("%s to running: %v", in.ID, err)
		return in
	}
	empty := ""
	rec, err := e.st.Transition(ctx, in.ID, store.Change{
		From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "seed-run", SetRunID: &empty,
		Threshold: time.Now().Add(time.Hour).Truncate(time.Second),
	})
	if err != nil {
		t.Errorf("%s to idle: %v", in.ID, err)
		return in
	}
	// The agent confirms its clean-up after the record went idle, as on a release.
	if err := e.st.PutSignal(ctx, in.ID, store.SignalRecord{Signal: store.SignalReleased, RunID: "seed-run"}); err != nil {
		t.Errorf("signal of %s: %v", in.ID, err)
	}
	if unverified {
		return rec
	}
	// The control plane marks it pooled once it verified the hand-back, as a release does.
	if rec, err = e.st.MarkPooled(ctx, in.ID); err != nil {
		t.Errorf("mark %s pooled: %v", in.ID, err)
		return in
	}
	if err := q.Put(ctx, claim.MessageOf(rec), delay); err != nil {
		t.Errorf("Put %s: %v", in.ID, err)
	}
	return rec
}

// warm launches n instances of a warm pool and takes their records through warming to state
// (ready: marked pooled and announced in the pool queue, as convergence does; stopped: stopped in
// EC2 too).
func (e *env) warm(t testing.TB, n int, state store.State) []store.Instance {
	t.Helper()
	return e.warmOf(t, n, state, "")
}

// warmOf is warm for records that carry a resource class (as convergence writes them).
func (e *env) warmOf(t testing.TB, n int, state store.State, resourceClass string) []store.Instance {
	t.Helper()
	return e.warmIn(t, n, state, resourceClass, "acme")
}

// warmIn is warmOf for a warm pool of scope (an owner, or a repository).
func (e *env) warmIn(t testing.TB, n int, state store.State, resourceClass, scope string) []store.Instance {
	t.Helper()
	ctx := context.Background()
	ro, err := e.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large", SubnetId: aws.String("subnet-a"),
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	var out []store.Instance
	for _, inst := range ro.Instances {
		id := aws.ToString(inst.InstanceId)
		if _, err := e.st.Create(ctx, store.Instance{
			ID: id, State: store.StateWarming, Threshold: time.Now().Add(time.Hour), UsageClass: fleet.OnDemand,
			InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, ResourceClass: resourceClass, RunnerClass: runnerClass,
			Pool: "warm", Scope: scope, Zone: "us-east-1a", SpecHash: "v1-test",
		}); err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		// A hot instance warms up into its pool, marked pooled (poolsize.Converger does the same).
		rec, err := e.st.Transition(ctx, id, store.Change{
			From: []store.State{store.StateWarming}, To: state, Threshold: time.Now().Add(time.Hour).Truncate(time.Second),
			MarkPooled: state == store.StateReady,
		})
		if err != nil {
			t.Fatalf("%s to %s: %v", id, state, err)
		}
		switch state {
		case store.StateReady:
			if err := pool.NewQueue(e.sqs, e.queue).Put(ctx, claim.MessageOf(rec), 0); err != nil {
				t.Fatalf("Put %s: %v", id, err)
			}
		case store.StateStopped:
			if _, err := e.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
				t.Fatalf("StopInstances %s: %v", id, err)
			}
			for v, _ := e.ec2srv.Instance(id); v.State != "stopped"; v, _ = e.ec2srv.Instance(id) {
				time.Sleep(20 * time.Millisecond)
			}
		}
		out = append(out, rec)
	}
	return out
}

// drain receives every message of the pool queue (deleting them) until it has been empty for
// quiet, long enough for delayed misfits to show, and returns the instance ids, with repeats.
func (e *env) drain(t testing.TB, quietFor time.Duration) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	lastSeen := time.Now()
	for time.Since(lastSeen) < quietFor {
		out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &e.queue, MaxNumberOfMessages: 10, VisibilityTimeout: 60})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(out.Messages) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		lastSeen = time.Now()
		for _, m := range out.Messages {
			msg, err := pool.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Errorf("pool message %q: %v", aws.ToString(m.Body), err)
				continue
			}
			ids = append(ids, msg.InstanceID)
			if _, err := e.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &e.queue, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage: %v", err)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// audit checks where every instance the EC2 server knows ended up, against the results of the
// provisions: running for exactly the run whose result lists it, idle and in the pool exactly
// once, or terminated in EC2 with a closed record (or, when allowNoRecord says so, with no record:
// a partial fleet terminated before anything was recorded). It returns the number of instances
// in each outcome.
func (e *env) audit(t testing.TB, results []provision.Result, allowNoRecord bool) map[string]int {
	t.Helper()
	ctx := context.Background()
	owner := map[string]string{} // instance -> run key of the result listing it
	for _, r := range results {
		if r.Status != provision.StatusSucceeded {
			if len(r.Runners) != 0 {
				t.Errorf("failed run %s lists runners %v", r.RunKey, r.Runners)
			}
			continue
		}
		for _, rn := range r.Runners {
			if prev, dup := owner[rn.InstanceID]; dup {
				t.Errorf("instance %s given to two runs: %s and %s", rn.InstanceID, prev, r.RunKey)
			}
			owner[rn.InstanceID] = r.RunKey
		}
		recs, err := e.st.ByRun(ctx, r.RunKey)
		if err != nil {
			t.Fatalf("ByRun %s: %v", r.RunKey, err)
		}
		var byRun, listed []string
		for _, rec := range recs {
			byRun = append(byRun, rec.ID)
		}
		for _, rn := range r.Runners {
			listed = append(listed, rn.InstanceID)
		}
		slices.Sort(byRun)
		slices.Sort(listed)
		if !slices.Equal(byRun, listed) {
			t.Errorf("run %s: records of the run %v, result lists %v", r.RunKey, byRun, listed)
		}
	}
	// Messages of instances claimed through the second look stay in the queue, stale: a later
	// pickup or refresh drops them (DESIGN rule 3). Only messages of idle records count.
	all := e.drain(t, 2500*time.Millisecond)
	var pooled []string
	for _, id := range all {
		if rec, err := e.st.Get(ctx, id); err == nil && rec.State == store.StateIdle && rec.RunID == "" {
			pooled = append(pooled, id)
		}
	}
	if stale := len(all) - len(pooled); stale > 0 {
		t.Logf("%d stale pool messages (their records are no longer idle)", stale)
	}
	for i := 1; i < len(pooled); i++ {
		if pooled[i] == pooled[i-1] {
			t.Errorf("instance %s is in the pool twice", pooled[i])
		}
	}
	counts := map[string]int{}
	var idle []string
	for _, v := range e.ec2srv.Instances() {
		rec, err := e.st.Get(ctx, v.ID)
		switch {
		case err != nil && !(allowNoRecord && v.State != "running" && v.State != "pending"):
			t.Errorf("instance %s (%s in EC2): record: %v", v.ID, v.State, err)
		case err != nil:
			counts["terminated without record"]++
		case v.State == "running" || v.State == "pending":
			switch rec.State {
			case store.StateRunning:
				if owner[v.ID] != rec.RunID {
					t.Errorf("instance %s running for %q, but results give it to %q", v.ID, rec.RunID, owner[v.ID])
				}
				counts["running"]++
			case store.StateIdle:
				if rec.RunID != "" {
					t.Errorf("idle instance %s has run %q", v.ID, rec.RunID)
				}
				idle = append(idle, v.ID)
				counts["idle"]++
			default:
				t.Errorf("instance %s running in EC2 with a %s record (run %q)", v.ID, rec.State, rec.RunID)
			}
		default:
			if rec.State != store.StateTerminated {
				t.Errorf("instance %s %s in EC2 but its record is %s", v.ID, v.State, rec.State)
			}
			counts["terminated"]++
		}
	}
	slices.Sort(idle)
	if !slices.Equal(slices.Compact(slices.Clone(pooled)), idle) {
		t.Errorf("pool holds %d messages %v, idle records are %d %v", len(pooled), pooled, len(idle), idle)
	}
	return counts
}

// waitAgents waits until the simulated agents of recs have started, so that a behaviour set for
// instances launched later (setCreatedBehaviour) cannot reach them.
func (e *env) waitAgents(t testing.TB, recs []store.Instance) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, r := range recs {
		for e.agent(r.ID) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("the agent of %s did not start", r.ID)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (e *env) agent(id string) *claimtest.Agent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.agents[id]
}

func request(runID string, count int) provision.Request {
	return provision.Request{
		RepositoryID: repoID, Repository: repo, RunID: runID, Attempt: 1, Count: count,
		UsageClass: fleet.OnDemand, InstanceTypes: []string{"c6i.*"}, ResourceClass: "small",
	}
}

// bySource groups runners' instance ids by their source (reused, started, created).
func bySource(rs []provision.Runner) map[string][]string {
	out := map[string][]string{}
	for _, r := range rs {
		out[r.Source] = append(out[r.Source], r.InstanceID)
	}
	return out
}

func ids(rs []provision.Runner) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.InstanceID)
	}
	slices.Sort(out)
	return out
}

func (e *env) get(t testing.TB, id string) store.Instance {
	t.Helper()
	in, err := e.st.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("reading %s: %v", id, err)
	}
	return in
}

func (e *env) getRun(t testing.TB, key string) store.Run {
	t.Helper()
	r, err := e.st.GetRun(context.Background(), key)
	if err != nil {
		t.Fatalf("reading run %s: %v", key, err)
	}
	return r
}

func (e *env) byRun(t testing.TB, key string) []store.Instance {
	t.Helper()
	recs, err := e.st.ByRun(context.Background(), key)
	if err != nil {
		t.Fatalf("listing run %s: %v", key, err)
	}
	return recs
}
