// Test environment of the scale set listeners: DynamoDB Local and fauxqs from the shared stack, our
// EC2 server and the GitHub fake (with its Actions service) over httptest, real SDK clients. Leases
// run on the wall clock with short TTLs; the fake's long polls and timeouts are scaled down.
package scalesets_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

func logger() *slog.Logger {
	if os.Getenv("SCALESET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

const (
	deployment = "dep-ss"
	subnet     = "subnet-0123456789abcdef0"
	setName    = "linux-warm"
	org        = "acme"
	poolName   = "warm"
	// testLeaseTTL is the scale set leases' lifetime: short, so takeovers are quick, and long
	// enough that a loaded machine's slow DynamoDB Local answers do not lose a healthy lease
	// (renewals come every third of it).
	testLeaseTTL = 3 * time.Second
)

type env struct {
	stk   *stack.Stack
	st    *store.Store
	sqs   *sqs.Client
	jobs  *pooljob.JobQueue
	ec2   *ec2.Client
	ec2s  *ec2server.Server
	lt    string
	gh    *githubfake.Server
	ghURL string
	set   declared.ScaleSet
	shape githubfake.ScaleSetShape
	// retryWait is the scale set clients' shortest wait before a retry (the longest is 5 times it).
	retryWait time.Duration
}

// allShapes are the Actions service's shapes: github.com's first.
var allShapes = []githubfake.ScaleSetShape{githubfake.ShapeAssigned, githubfake.ShapeAvailable}

// shapes runs f once per shape of the Actions service (github.com's, GHES's), each in its own env.
func shapes(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, sh := range allShapes {
		t.Run(string(sh), func(t *testing.T) {
			t.Parallel()
			f(t, newEnv(t, sh))
		})
	}
}

// newEnv starts an env whose Actions service has the given shape (default github.com's).
func newEnv(t *testing.T, shape ...githubfake.ScaleSetShape) *env {
	t.Helper()
	ctx := context.Background()
	stk := stacktest.Shared(t)
	e := &env{stk: stk, sqs: stk.SQS(), set: declared.ScaleSet{Name: setName, WarmPool: poolName, Scope: org, MaxRunners: 10}, retryWait: 10 * time.Millisecond}
	db := stk.DynamoDB()
	table := stacktest.UniqueName(t, "state")
	if err := store.CreateTable(ctx, db, table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	e.st = store.New(db, table)
	qo, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "jobs"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: qo.QueueUrl}) })
	e.jobs = pooljob.NewJobQueue(e.sqs, aws.ToString(qo.QueueUrl), e.st)

	e.ec2s = ec2server.New(ec2server.Options{PendingDelay: -1, StoppingDelay: -1, ShuttingDownDelay: -1, TerminatedRetention: time.Hour, Logger: logger()})
	e.ec2s.SetSubnet(subnet, "us-east-1a")
	ehs := httptest.NewServer(e.ec2s)
	cfg, _ := stk.AWSConfig(ctx)
	e.ec2 = ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(ehs.URL) })
	lt, err := e.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("warm"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: aws.String("ami-0123456789abcdef0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.lt = aws.ToString(lt.LaunchTemplate.LaunchTemplateId)

	e.gh = githubfake.New(githubfake.Options{Logger: logger()})
	e.shape = githubfake.ShapeAssigned
	for _, sh := range shape {
		e.shape = sh
	}
	e.gh.SetScaleSetShape(e.shape)
	e.gh.SetScaleSetTiming(githubfake.ScaleSetTiming{LongPoll: 300 * time.Millisecond, SessionIdle: time.Minute})
	ghs := httptest.NewServer(e.gh)
	e.ghURL = ghs.URL
	t.Cleanup(func() {
		e.gh.Close()
		ghs.Close()
		ehs.Close()
		e.ec2s.Close()
	})
	return e
}

func (e *env) github(t *testing.T) *ghaccess.Client {
	t.Helper()
	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.ghURL + "/", Token: e.gh.PAT(), Logger: logger()})
	if err != nil {
		t.Fatal(err)
	}
	return gh
}

// client is a scale set client of scope, through the reconciler's GitHub access.
func (e *env) client(t *testing.T, scope string) *scaleset.Client {
	t.Helper()
	gh := e.github(t)
	c, err := scaleset.New(scaleset.Config{
		APIURL: e.ghURL + "/", Logger: logger(), RetryWaitMin: e.retryWait, RetryWaitMax: 5 * e.retryWait,
		RegistrationToken: func(ctx context.Context) (string, string, error) {
			rt, err := gh.RegistrationToken(ctx, scope)
			return rt.Token, rt.URL, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createSet creates the env's scale set at the fake by hand (as another process, or an older
// runnerpool, would have), with the runner setting given, and returns it with the client used.
func (e *env) createSet(t *testing.T, setting scaleset.Setting) (*scaleset.Client, scaleset.ScaleSet) {
	t.Helper()
	c := e.client(t, org)
	g, err := c.RunnerGroupByName(t.Context(), "default")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := c.CreateScaleSet(t.Context(), scaleset.ScaleSet{Name: setName, RunnerGroupID: g.ID, RunnerSetting: setting})
	if err != nil {
		t.Fatal(err)
	}
	return c, ss
}

// replica is one reconciler replica's listeners.
type replica struct {
	m      *scalesets.Manager
	cancel context.CancelFunc
	done   chan struct{}
}

// replica starts a Manager named holder with short lease and back-off times, serving the env's
// scale set.
func (e *env) replica(t *testing.T, holder string) *replica {
	t.Helper()
	return e.start(t, holder, nil)
}

// start starts a Manager named holder with the test defaults (the env's scale set, short lease and
// back-off times), changed by mod when it is not nil.
func (e *env) start(t *testing.T, holder string, mod func(*scalesets.Config)) *replica {
	t.Helper()
	cfg := scalesets.Config{
		Store: e.st, Jobs: e.jobs, Holder: holder,
		ScaleSets: func(context.Context) ([]declared.ScaleSet, error) { return []declared.ScaleSet{e.set}, nil },
		Client:    func(scope string) (scalesets.Client, error) { return e.client(t, scope), nil },
		LeaseTTL:  testLeaseTTL, Resync: 200 * time.Millisecond, Backoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		ConflictBackoff: 200 * time.Millisecond, Logger: logger().With("replica", holder),
	}
	if mod != nil {
		mod(&cfg)
	}
	m, err := scalesets.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{m: m, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); m.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

// number is the pool job number the listener gives the fake's job id: its runner request id
// where jobs are acquired, a number drawn from its jobId where github.com sends request id 0.
func (e *env) number(id int64) int64 { return jobNumber(e.shape, id) }

func jobNumber(shape githubfake.ScaleSetShape, id int64) int64 {
	jm := scaleset.JobMessage{JobID: githubfake.ScaleSetJobID(id)}
	if shape == githubfake.ShapeAvailable {
		jm.RunnerRequestID = id
	}
	return jm.Number()
}

// serveAll runs the worker's batches until every job of ids was served or 30 s passed, and
// returns how many times each job was served.
func (e *env) serveAll(t *testing.T, w *pooljob.Worker, ids []int64, each func(pooljob.Served)) map[int64]int {
	t.Helper()
	byNumber := map[int64]int64{}
	for _, id := range ids {
		byNumber[e.number(id)] = id
	}
	served := map[int64]int{}
	for deadline := time.Now().Add(30 * time.Second); len(served) < len(ids) && time.Now().Before(deadline); {
		rep, err := w.Once(t.Context())
		if err != nil {
			t.Logf("Once: %v", err)
		}
		for _, s := range rep.Served {
			served[byNumber[s.JobID]]++
			if each != nil {
				each(s)
			}
		}
	}
	return served
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// kill stops the replica as a crash would: no lease released, no session deleted.
func (r *replica) kill() {
	r.m.Kill()
	r.stop()
}

// eventually polls cond every 20 ms for up to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// sessionOwner is who holds the scale set's session at the fake ("" for nobody).
func (e *env) sessionOwner() string {
	st, ok := e.gh.ScaleSet(org, setName)
	if !ok || st.Session == nil {
		return ""
	}
	return st.Session.Owner
}

// ledger reads a scale set job's ledger status ("" when the ledger does not know it).
func (e *env) ledger(t *testing.T, jobID int64) string {
	t.Helper()
	st, _ := e.gh.ScaleSet(org, setName)
	j := warmpool.Job{JobID: jobID, ScaleSetID: st.ID, ScaleSetJob: githubfake.ScaleSetJobID(jobID)}
	r, err := e.st.GetRun(t.Context(), "pooljob:"+j.RunKey()[len(warmpool.JobRunPrefix):])
	if err != nil {
		return ""
	}
	return r.Status
}

// worker is a pool worker of the env's warm pool whose scale set runners come from m.
func (e *env) worker(t *testing.T, m *scalesets.Manager) *pooljob.Worker {
	t.Helper()
	return e.workerOver(t, m, e.st)
}

// workerOver is worker reading and writing the state table through st.
func (e *env) workerOver(t *testing.T, m *scalesets.Manager, st warmpool.Store) *pooljob.Worker {
	t.Helper()
	gh := e.github(t)
	copts := claim.Options{Logger: logger(), StartWait: 500 * time.Millisecond}
	reg := claim.NewRegistrar(e.st, gh, e.ec2, copts)
	w, err := pooljob.NewWorker(pooljob.WorkerConfig{
		Store: st, EC2: e.ec2, Fleet: fleet.New(e.ec2, fleet.Options{Logger: logger()}), Starter: claim.NewStarter(e.st, e.ec2, reg, copts),
		Discarder: reg, GitHub: gh, Jobs: e.jobs, Pools: warmpool.NewCatalog(warmpool.StaticTargets(e.spec()), time.Minute, nil),
		ScaleSets: m, DeploymentID: deployment, WaitTime: time.Second, Lease: 30 * time.Second, RetryDelay: time.Second, Logger: logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// spec is the warm pool the scale set feeds (no hot or stopped target: tests place instances).
func (e *env) spec() warmpool.PoolSpec {
	return warmpool.PoolSpec{
		Name: poolName, Schedule: "default", SpecHash: "v1", Scope: org,
		Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: "linux", LaunchTemplateID: e.lt, Subnets: []string{subnet}, InstanceTypes: []string{"c6i.*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: "$Default"},
	}
}

// warm launches n instances of the pool and records them in state (ready: hot; stopped: stopped
// in EC2 too), as convergence leaves them: their agents' keys (claimtest.Key) pinned.
func (e *env) warm(t *testing.T, state store.State, n int) []store.Instance {
	t.Helper()
	ctx := context.Background()
	ro, err := e.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceTypeC6iLarge, SubnetId: aws.String(subnet),
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String(tags.Deployment), Value: aws.String(deployment)}, {Key: aws.String(tags.Pool), Value: aws.String(poolName)},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Instance
	var mu sync.Mutex
	for _, inst := range ro.Instances {
		id := aws.ToString(inst.InstanceId)
		if _, err := e.st.Create(ctx, store.Instance{
			ID: id, State: store.StateWarming, Threshold: time.Now().Add(time.Hour), UsageClass: fleet.OnDemand,
			InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "linux", Pool: poolName, Scope: org, Zone: "us-east-1a", SpecHash: "v1",
		}); err != nil {
			t.Fatal(err)
		}
		// Its warm-up pinned its agent's key: no job is handed to an instance without one.
		pub := base64.StdEncoding.EncodeToString(claimtest.Key(id).Public().(ed25519.PublicKey))
		if err := e.st.PinAgentKey(ctx, id, pub); err != nil {
			t.Fatal(err)
		}
		rec, err := e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: state, Threshold: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		out = append(out, rec)
		mu.Unlock()
		if state == store.StateStopped {
			if _, err := e.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}
