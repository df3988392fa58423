// Test environment of the warmpool package: DynamoDB Local and fauxqs from the shared stack, our own
// EC2 server and GitHub fake over httptest, real SDK clients, and an injected clock for the store,
// the converger and the worker. The instance side is played by the tests themselves (they write the
// agent's signals), so every scenario is deterministic.
package warmpool_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

const (
	deployment  = "dep-warm"
	runnerClass = "linux"
	subnetA     = "subnet-0123456789abcdef0"
	subnetB     = "subnet-0123456789abcdef1"
)

// clock is the tests' injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	stk    *stack.Stack
	db     *dynamodb.Client
	table  string
	clock  *clock
	st     *store.Store // on the injected clock
	sqs    *sqs.Client
	queue  *pool.Queue // the runner class's pool queue
	ec2srv *ec2server.Server
	ec2URL string
	ec2    *ec2.Client
	calls  *mutations // what the code under test asked EC2 to mutate
	lt     string     // launch template id
	gh     *githubfake.Server
	ghURL  string
	keys   sync.Map // instance id -> the signing key its played agent signs with (agentSignal)
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	stk := stacktest.Shared(t)
	e := &env{stk: stk, db: stk.DynamoDB(), sqs: stk.SQS(), table: stacktest.UniqueName(t, "state"),
		clock: &clock{t: time.Date(2025, 1, 15, 12, 0, 0, 0, time.UTC)}}
	if err := store.CreateTable(ctx, e.db, e.table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() { _, _ = e.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &e.table}) })
	e.st = store.New(e.db, e.table, store.WithClock(e.clock.Now))
	e.queue = pool.NewQueue(e.sqs, e.createQueue(t, "pool"))

	e.ec2srv = ec2server.New(ec2server.Options{PendingDelay: -1, StoppingDelay: -1, ShuttingDownDelay: -1, TerminatedRetention: time.Hour, Logger: quiet})
	e.ec2srv.SetSubnet(subnetA, "us-east-1a")
	e.ec2srv.SetSubnet(subnetB, "us-east-1b")
	ehs := httptest.NewServer(e.ec2srv)
	e.ec2URL = ehs.URL
	e.ec2 = e.ec2Client()
	e.calls = &mutations{Client: e.ec2}
	lt, err := e.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("warm"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String("ami-0123456789abcdef0")},
	})
	if err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	e.lt = aws.ToString(lt.LaunchTemplate.LaunchTemplateId)

	e.gh = githubfake.New(githubfake.Options{})
	ghs := httptest.NewServer(e.gh)
	e.ghURL = ghs.URL
	t.Cleanup(func() {
		ehs.Close()
		e.ec2srv.Close()
		ghs.Close()
		e.gh.Close()
	})
	return e
}

func (e *env) createQueue(t testing.TB, prefix string) string {
	t.Helper()
	qo, err := e.sqs.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, prefix))})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	t.Cleanup(func() { _, _ = e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: qo.QueueUrl}) })
	return aws.ToString(qo.QueueUrl)
}

func (e *env) ec2Client() *ec2.Client {
	cfg, _ := e.stk.AWSConfig(context.Background())
	return ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(e.ec2URL) },
		awslimit.WithEC2LimitsRetry(awslimit.Default(), awslimit.RetryOptions{MaxBackoff: 50 * time.Millisecond}))
}

// spec is a pool of the runner class launched from the env's template.
func (e *env) spec(name string, hot, stopped int, hash string) warmpool.PoolSpec {
	return warmpool.PoolSpec{
		Name: name, Schedule: "default", Hot: hot, Stopped: stopped, SpecHash: hash, Scope: "acme",
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: runnerClass, LaunchTemplateID: e.lt, Subnets: []string{subnetA, subnetB}, InstanceTypes: []string{"c6i.*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: "$Default", Queue: e.queue},
	}
}

// targets is a mutable set of pool specs.
type targets struct {
	mu    sync.Mutex
	specs []warmpool.PoolSpec
}

func (ts *targets) set(specs ...warmpool.PoolSpec) {
	ts.mu.Lock()
	ts.specs = specs
	ts.mu.Unlock()
}

func (ts *targets) get(context.Context, time.Time) ([]warmpool.PoolSpec, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.specs), nil
}

func (e *env) converger(t testing.TB, tg warmpool.Targets, opts poolsize.Options) *poolsize.Converger {
	t.Helper()
	opts.DeploymentID = deployment
	opts.Now = e.clock.Now
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	c, err := poolsize.NewConverger(e.st, e.calls, fleet.New(e.calls, fleet.Options{Logger: quiet, Now: e.clock.Now}), tg, opts)
	if err != nil {
		t.Fatalf("NewConverger: %v", err)
	}
	return c
}

func pass(t testing.TB, c *poolsize.Converger) poolsize.Report {
	t.Helper()
	rep, err := c.Pass(t.Context())
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	if rep.Err != nil {
		t.Errorf("Pass: %v", rep.Err)
	}
	return rep
}

func poolReport(t testing.TB, rep poolsize.Report, name string) poolsize.PoolReport {
	t.Helper()
	pr, ok := rep.Pool(name)
	if !ok {
		t.Fatalf("no report for pool %s in %+v", name, rep)
	}
	return pr
}

// records lists the live records of a pool by state.
func (e *env) records(t testing.TB, poolName string) map[store.State][]store.Instance {
	t.Helper()
	recs, err := e.st.ByPool(context.Background(), poolName)
	if err != nil {
		t.Fatalf("ByPool %s: %v", poolName, err)
	}
	out := map[store.State][]store.Instance{}
	for _, r := range recs {
		out[r.State] = append(out[r.State], r)
	}
	return out
}

// warmUp plays the agents of a pool's warming instances: each signals UD_OK, except those in fail
// (UD_FAILED) and silent (no signal).
func (e *env) warmUp(t testing.TB, poolName string, fail, silent []string) {
	t.Helper()
	for _, r := range e.records(t, poolName)[store.StateWarming] {
		sig := store.SignalPreRunnerOK
		switch {
		case slices.Contains(silent, r.ID):
			continue
		case slices.Contains(fail, r.ID):
			sig = store.SignalPreRunnerFailed
		}
		e.agentSignal(t, r.ID, store.SignalRecord{Signal: sig, Detail: "simulated"})
	}
}

// ec2State is an instance's state in the EC2 server.
func (e *env) ec2State(t testing.TB, id string) string {
	t.Helper()
	v, ok := e.ec2srv.Instance(id)
	if !ok {
		t.Fatalf("instance %s unknown to EC2", id)
	}
	return v.State
}

// poolMessages drains the runner class's pool queue and returns the instance ids announced.
func (e *env) poolMessages(t testing.TB) []string {
	t.Helper()
	var out []string
	for empty := 0; empty < 2; {
		got, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(got.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range got.Messages {
			msg, err := pool.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Errorf("pool message: %v", err)
				continue
			}
			out = append(out, msg.InstanceID)
			_, _ = e.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(e.queue.URL()), ReceiptHandle: m.ReceiptHandle})
		}
	}
	slices.Sort(out)
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// mutations wraps the EC2 client and records the ids of every mutating call.
type mutations struct {
	*ec2.Client
	mu    sync.Mutex
	calls map[string][]int // action -> ids per call
	// beforeStart, when set, runs before each StartInstances (a slow start).
	beforeStart func()
}

func (m *mutations) record(action string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = map[string][]int{}
	}
	m.calls[action] = append(m.calls[action], n)
}

func (m *mutations) StopInstances(ctx context.Context, in *ec2.StopInstancesInput, opts ...func(*ec2.Options)) (*ec2.StopInstancesOutput, error) {
	m.record("StopInstances", len(in.InstanceIds))
	return m.Client.StopInstances(ctx, in, opts...)
}

func (m *mutations) StartInstances(ctx context.Context, in *ec2.StartInstancesInput, opts ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error) {
	m.record("StartInstances", len(in.InstanceIds))
	if m.beforeStart != nil {
		m.beforeStart()
	}
	return m.Client.StartInstances(ctx, in, opts...)
}

func (m *mutations) TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	m.record("TerminateInstances", len(in.InstanceIds))
	return m.Client.TerminateInstances(ctx, in, opts...)
}

func (m *mutations) CreateFleet(ctx context.Context, in *ec2.CreateFleetInput, opts ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	m.record("CreateFleet", int(aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity)))
	return m.Client.CreateFleet(ctx, in, opts...)
}

// of returns the ids per call of an action since the last reset.
func (m *mutations) of(action string) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls[action])
}

func (m *mutations) reset() {
	m.mu.Lock()
	m.calls = nil
	m.mu.Unlock()
}
