// Package servicetest runs reconciler replicas in a test against the local stack: DynamoDB Local
// and fauxqs from the shared stack (a table and a pool queue of the test's own), and, in process,
// an EC2 server whose instances each run a simulated agent (registration through claimtest, and
// the release handshake), a GitHub fake and an OIDC issuer with the Actions token endpoint. Every
// replica gets its own SDK clients, listener and lease holder name over the same table, as
// separate processes would. Options.WarmPools adds a pool job queue and a webhook secret (warm
// pools; TableRunnerClass and Hot seed the table); Options.InstanceKeys "arn" keys instance items
// by ARN everywhere, as on AWS.
//
//	env := servicetest.New(t, servicetest.Options{})
//	r := env.Start(t, "a", nil)
//	tok := env.Token(t, "1001", nil)
//	... POST r.URL+"/v1/provision" with "Authorization: Bearer "+tok ...
//	env.Audit(t) // every EC2 instance has a live record or is terminated
package servicetest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/oidcissuer"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// Values of the environment.
const (
	Repository   = "acme/api"
	RepositoryID = "4242"
	RunnerClass  = "linux"
	Deployment   = "dep-servicetest"
	Audience     = "runnerpool-test"
	// InstanceType is what Fill puts in the pool (2 vCPU, 4 GiB: resource class "small").
	InstanceType = "c6i.large"
)

// Subnets of the EC2 server, by zone.
var Subnets = map[string]string{"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}

// TableSubnets are subnets of the EC2 server with ids of AWS's form, for runner classes written to
// the state table (internal/declared validates subnet ids).
var TableSubnets = map[string]string{"subnet-0a0a0a0a0a0a0a0a0": "us-east-1a", "subnet-0b0b0b0b0b0b0b0b0": "us-east-1b"}

// More values of the environment.
const (
	// Account is the EC2 server's account: the account of its instance ARNs.
	Account = "123456789012"
	// Region is the stack's region.
	Region = "us-east-1"
	// WebhookSecret is the replicas' GitHub webhook secret with Options.WarmPools.
	WebhookSecret = "servicetest-webhook-secret"
	// Image is the image of the launch template and of TableRunnerClass.
	Image = "ami-0123456789abcdef0"
)

// Options tune the environment. Zero values take the defaults.
type Options struct {
	// Agent scripts the simulated agents of instances launched from now on (SetAgent changes it).
	Agent claimtest.Behaviour
	// Logger receives the replicas' logs (default: discarded; set RUNNERPOOL_TEST_LOG=1 to see
	// them on stderr).
	Logger *slog.Logger
	// InstanceKeys is the replicas' --instance-keys: "id" (the default here) or "arn", with the
	// account Account. The environment's own stores and the simulated agents use the same keys.
	InstanceKeys string
	// WarmPools creates a pool job queue and gives it and WebhookSecret to the replicas: webhook
	// routing, the pool worker and warm-pool convergence.
	WarmPools bool
}

// Env is one test's world.
type Env struct {
	Stack       *stack.Stack
	Table       string
	QueueURL    string
	EC2         *ec2server.Server
	EC2URL      string
	GitHub      *githubfake.Server
	GitHubURL   string
	Issuer      *oidcissuer.Issuer
	ClassesFile string
	// LaunchTemplate is the id of the runners' launch template in the EC2 server.
	LaunchTemplate string
	// JobQueueURL is the pool job queue with Options.WarmPools.
	JobQueueURL string
	// InstanceKeys is "id" or "arn"; KeyPrefix the instance key prefix of the environment's stores.
	InstanceKeys, KeyPrefix string
	// Store is the test's own view of the table (setup and audit).
	Store *store.Store
	SQS   *sqs.Client
	Log   *slog.Logger

	mu     sync.Mutex
	agent  claimtest.Behaviour
	agents map[string]*agent
}

// New builds the environment; everything is removed when the test ends.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	ctx := context.Background()
	stk := stacktest.Shared(t)
	e := &Env{Stack: stk, Table: stacktest.UniqueName(t, "state"), agent: o.Agent, agents: map[string]*agent{}, Log: o.Logger}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
		if os.Getenv("RUNNERPOOL_TEST_LOG") != "" {
			e.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	db := stk.DynamoDB()
	if err := store.CreateTable(ctx, db, e.Table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &e.Table}) })
	e.InstanceKeys = o.InstanceKeys
	if e.InstanceKeys == "" {
		e.InstanceKeys = config.InstanceKeysID
	}
	if e.InstanceKeys == config.InstanceKeysARN {
		e.KeyPrefix = store.InstanceARNPrefix(Region, Account)
	}
	e.Store = store.New(db, e.Table, store.WithInstanceKeyPrefix(e.KeyPrefix))

	e.SQS = stk.SQS()
	qo, err := e.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	e.QueueURL = aws.ToString(qo.QueueUrl)
	t.Cleanup(func() { _, _ = e.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: qo.QueueUrl}) })
	if o.WarmPools {
		jo, err := e.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "jobs"))})
		if err != nil {
			t.Fatalf("CreateQueue: %v", err)
		}
		e.JobQueueURL = aws.ToString(jo.QueueUrl)
		t.Cleanup(func() { _, _ = e.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: jo.QueueUrl}) })
	}

	agentStore := store.New(stk.DynamoDB(), e.Table, store.WithInstanceKeyPrefix(e.KeyPrefix))
	e.EC2 = ec2server.New(ec2server.Options{
		PendingDelay: -1, ShuttingDownDelay: 20 * time.Millisecond, TerminatedRetention: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Runtime: func(ctx context.Context, inst ec2server.RuntimeInstance) {
			e.mu.Lock()
			b := e.agent
			e.mu.Unlock()
			a := startAgent(ctx, agentStore, inst.ID, b)
			e.mu.Lock()
			e.agents[inst.ID] = a
			e.mu.Unlock()
			<-ctx.Done()
			a.stop()
		},
	})
	for _, subnets := range []map[string]string{Subnets, TableSubnets} {
		for s, z := range subnets {
			e.EC2.SetSubnet(s, z)
		}
	}
	ehs := httptest.NewServer(e.EC2)
	e.EC2URL = ehs.URL

	e.GitHub = githubfake.New(githubfake.Options{})
	ghs := httptest.NewServer(e.GitHub)
	e.GitHubURL = ghs.URL

	iss := httptest.NewUnstartedServer(nil)
	e.Issuer, err = oidcissuer.New("http://" + iss.Listener.Addr().String())
	if err != nil {
		t.Fatalf("oidcissuer.New: %v", err)
	}
	iss.Config.Handler = e.Issuer
	iss.Start()
	t.Cleanup(func() {
		iss.Close()
		ehs.Close()
		e.EC2.Close() // stops every simulated agent
		ghs.Close()
		e.GitHub.Close()
	})

	lt, err := e.EC2Client().CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runner"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: aws.String(Image),
			MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
				HttpTokens: ec2types.LaunchTemplateHttpTokensStateRequired, InstanceMetadataTags: ec2types.LaunchTemplateInstanceMetadataTagsStateEnabled,
			},
		},
	})
	if err != nil {
		t.Fatalf("CreateLaunchTemplate: %v", err)
	}
	e.LaunchTemplate = aws.ToString(lt.LaunchTemplate.LaunchTemplateId)
	classes := config.Classes{
		DefaultRunnerClass: RunnerClass,
		ResourceClasses:    map[string]config.ResourceClass{"small": {CPU: 2, MemoryMiB: 4096}, "large": {CPU: 8, MemoryMiB: 16384}},
		RunnerClasses: map[string]config.ClassEntry{RunnerClass: {
			QueueURL: e.QueueURL, LaunchTemplateID: aws.ToString(lt.LaunchTemplate.LaunchTemplateId),
			Subnets: slices.Sorted(maps.Keys(Subnets)), MaxRuntime: config.Duration(time.Hour), IdleTime: config.Duration(30 * time.Minute),
		}},
	}
	b, err := json.Marshal(classes)
	if err != nil {
		t.Fatalf("encoding classes: %v", err)
	}
	e.ClassesFile = filepath.Join(t.TempDir(), "classes.json")
	if err := os.WriteFile(e.ClassesFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// SetAgent scripts the simulated agents of instances launched from now on.
func (e *Env) SetAgent(b claimtest.Behaviour) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.agent = b
}

// EC2Client is a client of the environment's EC2 server (not counted by any replica).
func (e *Env) EC2Client() *ec2.Client {
	cfg := e.AWSConfig()
	return ec2.NewFromConfig(cfg)
}

// AWSConfig is an SDK configuration reaching the stack's DynamoDB and SQS and the environment's
// EC2 server, as AWS_ENDPOINT_URL_* would for a process.
func (e *Env) AWSConfig() aws.Config {
	cfg, _ := e.Stack.AWSConfig(context.Background())
	cfg.ConfigSources = []any{endpoints{"DynamoDB": e.Stack.Endpoints.DynamoDB, "SQS": e.Stack.Endpoints.SQS, "EC2": e.EC2URL}}
	return cfg
}

// endpoints answers the SDK's base endpoint lookup by service id.
type endpoints map[string]string

func (e endpoints) GetServiceBaseEndpoint(_ context.Context, sdkID string) (string, bool, error) {
	v, ok := e[sdkID]
	return v, ok, nil
}

// Env returns the settings of a replica as RUNNERPOOL_* variables (config.Load reads them), with
// test-sized timeouts; extra overrides them.
func (e *Env) Env(replica string, extra map[string]string) map[string]string {
	env := map[string]string{
		"RUNNERPOOL_LISTEN":                  "127.0.0.1:0",
		"RUNNERPOOL_TABLE":                   e.Table,
		"RUNNERPOOL_DEPLOYMENT_ID":           Deployment,
		"RUNNERPOOL_REPLICA_ID":              replica,
		"RUNNERPOOL_OIDC_ISSUER":             e.Issuer.URL(),
		"RUNNERPOOL_OIDC_AUDIENCE":           Audience,
		"RUNNERPOOL_ALLOWED_REPOSITORIES":    Repository + ",trusted-org",
		"RUNNERPOOL_GITHUB_API_URL":          e.GitHubURL,
		"RUNNERPOOL_GITHUB_TOKEN":            e.GitHub.PAT(),
		"RUNNERPOOL_RUNNER_CLASSES_FILE":     e.ClassesFile,
		"RUNNERPOOL_REFRESH_SCHEDULE":        "@every 1m",
		"RUNNERPOOL_CONVERGE_SCHEDULE":       "@every 30s",
		"RUNNERPOOL_LEASE_TTL":               "2s",
		"RUNNERPOOL_DRAIN_TIMEOUT":           "2s",
		"RUNNERPOOL_REGISTRATION_WAIT":       "8s",
		"RUNNERPOOL_CLAIM_REGISTRATION_WAIT": "4s",
		"RUNNERPOOL_RELEASE_SIGNAL_WAIT":     "4s",
		"RUNNERPOOL_POLL_INTERVAL":           "50ms",
		"RUNNERPOOL_GITHUB_LISTING_INTERVAL": "200ms",
		"RUNNERPOOL_DYNAMODB_SKIP_CRC32":     "true",
		"RUNNERPOOL_LOG_LEVEL":               "debug",
		"RUNNERPOOL_INSTANCE_KEYS":           e.InstanceKeys,
		"RUNNERPOOL_CONFIG_CACHE_TTL":        "1s",
		"RUNNERPOOL_AWS_PRICES":              "false", // no AWS pricing API here: prices come from a price file or are unknown
	}
	if e.InstanceKeys == config.InstanceKeysARN {
		env["RUNNERPOOL_AWS_ACCOUNT_ID"] = Account
	}
	if e.JobQueueURL != "" {
		env["RUNNERPOOL_POOL_JOB_QUEUE_URL"] = e.JobQueueURL
		env["RUNNERPOOL_WEBHOOK_SECRET"] = WebhookSecret
	}
	maps.Copy(env, extra)
	return env
}

// Config loads a replica's configuration through config.Load, as `runnerpool serve` does.
func (e *Env) Config(t testing.TB, replica string, extra map[string]string) config.Config {
	t.Helper()
	env := e.Env(replica, extra)
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, os.Stderr)
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	return cfg
}

// Replica is one running reconciler.
type Replica struct {
	Service *service.Service
	URL     string
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	err     error
}

// Start runs a replica until Stop (or the end of the test). It returns once the leader lease has a
// holder and, when this replica took it, its first refresh pass (run at once on gaining the lease)
// is over: that pass briefly hides the pool's messages while it checks them, which would make a
// provision started at the same moment create instead of reuse.
func (e *Env) Start(t testing.TB, replica string, extra map[string]string, opts ...func(*service.Options)) *Replica {
	t.Helper()
	cfg := e.Config(t, replica, extra)
	awsCfg := e.AWSConfig()
	refreshed := make(chan struct{})
	var once sync.Once
	o := service.Options{AWS: &awsCfg, Logger: e.Log.With("replica", replica)}
	for _, f := range opts {
		f(&o)
	}
	userOnJob := o.OnJob
	o.OnJob = func(job string, err error) {
		if job == service.JobRefresh {
			once.Do(func() { close(refreshed) })
		}
		if userOnJob != nil {
			userOnJob(job, err)
		}
	}
	svc, err := service.New(context.Background(), cfg, o)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replica{Service: svc, URL: svc.URL(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.Run(ctx) }()
	t.Cleanup(func() { _ = r.Stop() })

	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		l, err := e.Store.CurrentLease(context.Background(), cfg.LeaseName)
		if err == nil && l.ExpiresAt.After(time.Now()) {
			if l.Holder != replica {
				return r
			}
			select {
			case <-refreshed:
				return r
			case <-time.After(time.Until(deadline)):
				t.Fatalf("replica %s: no refresh pass after taking the lease", replica)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("replica %s: the leader lease has no holder", replica)
	return nil
}

// Stop shuts the replica down as SIGTERM would and waits for Run to return.
func (r *Replica) Stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// Kill stops the replica like a crashed process: the lease is left to expire, nothing drains.
func (r *Replica) Kill() error {
	r.Service.Abandon()
	return r.Stop()
}

// Stopped reports whether Run has returned.
func (r *Replica) Stopped() bool {
	select {
	case err := <-r.done:
		r.done <- err
		return true
	default:
		return false
	}
}

// Token mints an OIDC token of the environment's repository for a run; claims override the
// defaults (nil removes a claim).
func (e *Env) Token(t testing.TB, runID string, claims map[string]any) string {
	t.Helper()
	tok, err := e.Issuer.Mint(e.Claims(runID, claims))
	if err != nil {
		t.Fatalf("Mint: %v", err)
	}
	return tok
}

// Claims are the claims of a GitHub Actions token of the environment's repository and run runID,
// with the environment's audience (ids as strings, as GitHub sends them), overridden by extra.
func (e *Env) Claims(runID string, extra map[string]any) map[string]any {
	c := map[string]any{
		"repository": Repository, "repository_id": RepositoryID, "repository_owner": "acme",
		"run_id": runID, "run_attempt": "1", "aud": Audience,
	}
	maps.Copy(c, extra)
	return c
}

// Fill launches n instances in the EC2 server and takes each through created -> running -> idle in
// the table, as a finished run's release would, marks it pooled and puts it in the pool. It returns their ids.
func (e *Env) Fill(t testing.TB, n int) []string {
	t.Helper()
	ctx := context.Background()
	// The pool as the reconciler keeps it: the message goes to the queue of the instance's scope.
	q := pool.NewScopedQueue(e.SQS, e.QueueURL, pool.ScopeOptions{})
	ro, err := e.EC2Client().RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceType(InstanceType), SubnetId: aws.String("subnet-a"),
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String(tags.Deployment), Value: aws.String(Deployment)},
			{Key: aws.String(tags.RunnerClass), Value: aws.String(RunnerClass)},
		}}},
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	var ids []string
	for _, inst := range ro.Instances {
		id := aws.ToString(inst.InstanceId)
		ids = append(ids, id)
		_, err := e.Store.Create(ctx, store.Instance{
			ID: id, State: store.StateCreated, RunID: "seed-run", Threshold: time.Now().Add(time.Hour),
			UsageClass: "on-demand", InstanceType: InstanceType, CPU: 2, MemoryMiB: 4096, ResourceClass: "small",
			RunnerClass: RunnerClass, Scope: Repository, Zone: Subnets["subnet-a"],
		})
		if err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		if _, err = e.Store.Transition(ctx, id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "seed-run"}); err != nil {
			t.Fatalf("%s to running: %v", id, err)
		}
		empty := ""
		_, err = e.Store.Transition(ctx, id, store.Change{
			From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "seed-run", SetRunID: &empty,
			Threshold: time.Now().Add(time.Hour).Truncate(time.Second),
		})
		if err != nil {
			t.Fatalf("%s to idle: %v", id, err)
		}
		// The release verified the hand-back: the control plane's pool mark, then the message.
		rec, err := e.Store.MarkPooled(ctx, id)
		if err != nil {
			t.Fatalf("%s marked pooled: %v", id, err)
		}
		if err := q.Put(ctx, claim.MessageOf(rec), 0); err != nil {
			t.Fatalf("Put %s: %v", id, err)
		}
	}
	slices.Sort(ids)
	return ids
}

// Audit checks the rule "no instance is lost": every instance the EC2 server launched is
// terminated (or shutting down) or has a live record. It returns the records of the live ones.
func (e *Env) Audit(t testing.TB) map[string]store.Instance {
	t.Helper()
	live := map[string]store.Instance{}
	for _, v := range e.EC2.Instances() {
		if v.State == "terminated" || v.State == "shutting-down" {
			continue
		}
		rec, err := e.Store.Get(context.Background(), v.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			t.Errorf("instance %s is %s in EC2 with no record: an orphan", v.ID, v.State)
		case err != nil:
			t.Errorf("reading the record of %s: %v", v.ID, err)
		case !rec.State.Live():
			t.Errorf("instance %s is %s in EC2 but its record is %s", v.ID, v.State, rec.State)
		default:
			live[v.ID] = rec
		}
	}
	return live
}

// Registered lists the runs the simulated agent of an instance registered for.
func (e *Env) Registered(id string) []string {
	e.mu.Lock()
	a := e.agents[id]
	e.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.sim.Registered()
}

// Credentials lists the credentials the simulated agent of an instance received.
func (e *Env) Credentials(id string) []store.Credential {
	e.mu.Lock()
	a := e.agents[id]
	e.mu.Unlock()
	if a == nil {
		return nil
	}
	return a.sim.Credentials()
}

// agent is a simulated instance agent: claimtest's registration half, plus the release half
// (take the removal credential of the run it registered for last, signal deregistration).
type agent struct {
	sim    *claimtest.Agent
	cancel context.CancelFunc
	done   chan struct{}
}

func startAgent(ctx context.Context, st *store.Store, id string, b claimtest.Behaviour) *agent {
	if b.Poll <= 0 {
		b.Poll = 50 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &agent{sim: claimtest.Simulate(ctx, st, id, b), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		released := map[string]bool{}
		tick := time.NewTicker(b.Poll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			runs := a.sim.Registered()
			if len(runs) == 0 || released[runs[len(runs)-1]] {
				continue
			}
			run := runs[len(runs)-1]
			rec, err := st.Get(ctx, id)
			if err != nil || rec.State != store.StateIdle || rec.RunID != "" {
				continue
			}
			if _, err := st.TakeCredential(ctx, id, store.CredentialRemoval, run); err != nil {
				continue
			}
			if err := st.PutSignal(ctx, id, claimtest.Signed(id, store.SignalRecord{Signal: store.SignalReleased, RunID: run, Detail: "simulated"})); err == nil {
				released[run] = true
			}
		}
	}()
	return a
}

func (a *agent) stop() {
	a.cancel()
	a.sim.Stop()
	<-a.done
}

// Describe is a short description of an instance for failure messages.
func Describe(in store.Instance) string {
	return fmt.Sprintf("%s %s run=%q reason=%q", in.ID, in.State, in.RunID, in.Reason)
}

// Call sends one API request with a bearer token ("" for none) and a JSON body (nil for none, a
// string as is) and returns the status and the body.
func Call(t testing.TB, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encoding the body: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer of %s %s: %v", method, url, err)
	}
	return resp.StatusCode, b
}

// Decode unmarshals an answer, failing the test when it is not JSON of that shape.
func Decode[T any](t testing.TB, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

// TableRunnerClass is a valid runner class of the environment as the Terraform provider writes it
// to the state table (declared.Repository.PutRunnerClass): the environment's pool queue, launch
// template and TableSubnets, 2 vCPUs and 4 GiB.
func (e *Env) TableRunnerClass(name string) declared.RunnerClass {
	return declared.RunnerClass{
		Name: name, Image: Image, CPU: 2, MemoryMiB: 4096,
		Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 8, IOPS: 3000, ThroughputMiBps: 125},
		UsageClass: declared.UsageOnDemand, Subnets: slices.Sorted(maps.Keys(TableSubnets)),
		MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(30 * time.Minute),
		LaunchTemplateID: e.LaunchTemplate, QueueURL: e.QueueURL,
	}
}

// Hot launches n instances in the EC2 server and records them as hot instances of a warm pool
// (warming, then ready with an hour to wait and the given spec hash), as the converger would once
// their warm-up is over. It returns their ids.
func (e *Env) Hot(t testing.TB, rc declared.RunnerClass, poolName, specHash string, n int) []string {
	t.Helper()
	ctx := context.Background()
	subnet := rc.Subnets[0]
	ro, err := e.EC2Client().RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String(rc.Image), InstanceType: ec2types.InstanceType(InstanceType), SubnetId: aws.String(subnet),
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String(tags.Deployment), Value: aws.String(Deployment)},
			{Key: aws.String(tags.RunnerClass), Value: aws.String(rc.Name)},
			{Key: aws.String(tags.Pool), Value: aws.String(poolName)},
		}}},
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	var ids []string
	for _, inst := range ro.Instances {
		id := aws.ToString(inst.InstanceId)
		ids = append(ids, id)
		_, err := e.Store.Create(ctx, store.Instance{
			ID: id, State: store.StateWarming, Threshold: time.Now().Add(time.Hour), UsageClass: "on-demand",
			InstanceType: InstanceType, CPU: rc.CPU, MemoryMiB: rc.MemoryMiB, RunnerClass: rc.Name, Pool: poolName,
			Zone: TableSubnets[subnet], SpecHash: specHash,
		})
		if err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		// Its warm-up pinned its (simulated) agent's key: no job is handed to an instance without one.
		if err := e.Store.PinAgentKey(ctx, id, base64.StdEncoding.EncodeToString(claimtest.Key(id).Public().(ed25519.PublicKey))); err != nil {
			t.Fatalf("pinning the agent key of %s: %v", id, err)
		}
		if _, err := e.Store.Transition(ctx, id, store.Change{
			From: []store.State{store.StateWarming}, To: store.StateReady, RequireNoRun: true,
			Threshold: time.Now().Add(time.Hour).Truncate(time.Second), Reason: "seeded hot by the test",
		}); err != nil {
			t.Fatalf("%s to ready: %v", id, err)
		}
	}
	slices.Sort(ids)
	return ids
}

// Webhooks is a GitHub webhook sender to a replica's webhook endpoint, signed with WebhookSecret.
func (e *Env) Webhooks(replicaURL string) *githubfake.WebhookSender {
	return &githubfake.WebhookSender{URL: replicaURL + apiv1.PathWebhookGitHub, Secret: WebhookSecret}
}
