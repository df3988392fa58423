// Test environment of the claim package: the shared DynamoDB Local and fauxqs, our own EC2 server
// and GitHub fake over httptest, real SDK clients, and helpers that put idle instances in the pool.
package claim_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// testOptions are claim options scaled down for tests.
func testOptions() claim.Options {
	return claim.Options{
		RegistrationWait: 5 * time.Second, PollInterval: 50 * time.Millisecond,
		HeartbeatMaxAge: 15 * time.Second, Logger: quiet,
	}
}

type env struct {
	db     *dynamodb.Client
	table  string
	st     *store.Store // the control plane's store
	sqs    *sqs.Client
	q      *pool.Queue
	ec2srv *ec2server.Server
	ec2    *ec2.Client
	ghsrv  *githubfake.Server
	ghURL  string
	gh     *ghaccess.Client
}

// newEnv builds a fresh table, queue, EC2 server and GitHub fake.
func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	stk := stacktest.Shared(t)
	e := &env{db: stk.DynamoDB(), table: stacktest.UniqueName(t, "state"), sqs: stk.SQS()}
	if err := store.CreateTable(ctx, e.db, e.table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() { _, _ = e.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &e.table}) })
	e.st = store.New(e.db, e.table)

	qo, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	t.Cleanup(func() { _, _ = e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: qo.QueueUrl}) })
	e.q = pool.NewQueue(e.sqs, aws.ToString(qo.QueueUrl))

	e.ec2srv = ec2server.New(ec2server.Options{PendingDelay: -1, ShuttingDownDelay: 50 * time.Millisecond})
	ehs := httptest.NewServer(e.ec2srv)
	e.ec2 = ec2.NewFromConfig(aws.Config{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", ""),
	}, func(o *ec2.Options) { o.BaseEndpoint = aws.String(ehs.URL) })

	e.ghsrv = githubfake.New(githubfake.Options{})
	e.ghsrv.SetLimits(githubfake.DocumentedLimits) // as one App installation has them
	ghs := httptest.NewServer(e.ghsrv)
	e.ghURL = ghs.URL
	e.gh, err = ghaccess.New(ghaccess.Config{APIURL: ghs.URL, Token: e.ghsrv.PAT(), Logger: quiet})
	if err != nil {
		t.Fatalf("ghaccess.New: %v", err)
	}
	t.Cleanup(func() {
		ehs.Close()
		e.ec2srv.Close()
		ghs.Close()
		e.ghsrv.Close()
	})
	return e
}

// releaseWait bounds the hand-back's wait for the agent's deregistration in these tests.
const releaseWait = 3 * time.Second

// claimer returns a Claimer whose hand-backs are releases (release.Releaser.HandBack) into e.q,
// unless opts sets its own HandBack.
func (e *env) claimer(opts claim.Options) (*claim.Claimer, *claim.Registrar) {
	if opts.HandBack == nil {
		rel := release.New(e.st, pool.StaticResolver{"linux": e.q}, e.gh, e.ec2, release.Options{
			SignalWait: releaseWait, PollInterval: 50 * time.Millisecond, Logger: quiet,
		})
		opts.HandBack = rel.HandBack
	}
	reg := claim.NewRegistrar(e.st, e.gh, e.ec2, opts)
	return claim.NewClaimer(e.st, reg, opts), reg
}

// idle launches n instances in the EC2 server and takes each through created -> running -> idle
// in the table, as a finished run's release would, marks it pooled and puts its message in the pool.
func (e *env) idle(t testing.TB, n int, edit func(*store.Instance)) []store.Instance {
	t.Helper()
	ctx := context.Background()
	out, err := e.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceTypeC6iLarge,
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	var ins []store.Instance
	for _, inst := range out.Instances {
		in := store.Instance{
			ID: aws.ToString(inst.InstanceId), State: store.StateCreated, RunID: "seed-run",
			Threshold: time.Now().Add(time.Hour), UsageClass: "on-demand", InstanceType: "c6i.large",
			CPU: 2, MemoryMiB: 4096, ResourceClass: "medium", RunnerClass: "linux", Scope: "acme/api",
			Zone: "us-east-1a",
		}
		if edit != nil {
			edit(&in)
		}
		if _, err := e.st.Create(ctx, in); err != nil {
			t.Fatalf("Create: %v", err)
		}
		if _, err := e.st.Transition(ctx, in.ID, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "seed-run"}); err != nil {
			t.Fatalf("to running: %v", err)
		}
		empty := ""
		_, err := e.st.Transition(ctx, in.ID, store.Change{
			From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "seed-run", SetRunID: &empty,
			Threshold: time.Now().Add(time.Hour).Truncate(time.Second),
		})
		if err != nil {
			t.Fatalf("to idle: %v", err)
		}
		// The release verified the hand-back: the control plane's pool mark, then the message.
		rec, err := e.st.MarkPooled(ctx, in.ID)
		if err != nil {
			t.Fatalf("MarkPooled: %v", err)
		}
		if err := e.q.Put(ctx, claim.MessageOf(rec), 0); err != nil {
			t.Fatalf("Put: %v", err)
		}
		ins = append(ins, rec)
	}
	return ins
}

// ranThroughTheSecondLook takes a pooled instance through a run that claimed it by its record,
// as the second look does (its pool message stays in the queue), ran it, and released it: the
// record idle without a run, its pool mark not written again (the release has yet to verify the
// hand-back).
func (e *env) ranThroughTheSecondLook(t testing.TB, id, runID string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.st.ClaimPooled(ctx, id, runID, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	none := ""
	for _, c := range []store.Change{
		{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: runID, Threshold: time.Now().Add(time.Hour)},
		{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: runID, SetRunID: &none, Threshold: time.Now().Add(time.Hour).Truncate(time.Second)},
	} {
		if _, err := e.st.Transition(ctx, id, c); err != nil {
			t.Fatal(err)
		}
	}
}

// agents starts a simulated agent per instance, on st (the control plane's store when nil).
func (e *env) agents(t testing.TB, st claimtest.Store, ins []store.Instance, b claimtest.Behaviour) map[string]*claimtest.Agent {
	t.Helper()
	if st == nil {
		st = store.New(e.db, e.table)
	}
	out := map[string]*claimtest.Agent{}
	for _, in := range ins {
		a := claimtest.Simulate(context.Background(), st, in.ID, b)
		t.Cleanup(a.Stop)
		out[in.ID] = a
	}
	return out
}

func (e *env) record(t testing.TB, id string) store.Instance {
	t.Helper()
	in, err := e.st.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return in
}

// drain takes every visible message off the pool queue.
func (e *env) drain(t testing.TB) []pool.Message {
	t.Helper()
	var ms []pool.Message
	for {
		out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.q.URL()), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(out.Messages) == 0 {
			return ms
		}
		for _, m := range out.Messages {
			pm, err := pool.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("pool holds a bad message: %v", err)
			}
			ms = append(ms, pm)
			_, _ = e.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(e.q.URL()), ReceiptHandle: m.ReceiptHandle})
		}
	}
}

func ids(cls []claim.Claimed) []string {
	var out []string
	for _, c := range cls {
		out = append(out, c.Instance.ID)
	}
	return out
}

// counter counts calls by operation.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[op]++
}

func (c *counter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	clear(c.n)
	return out
}

// countingSQS counts the pool's SQS calls.
type countingSQS struct {
	api pool.SQSAPI
	counter
}

func (c *countingSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.add("SendMessage")
	return c.api.SendMessage(ctx, in, o...)
}

func (c *countingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.add("ReceiveMessage")
	return c.api.ReceiveMessage(ctx, in, o...)
}

func (c *countingSQS) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	c.add("DeleteMessage")
	return c.api.DeleteMessage(ctx, in, o...)
}

func (c *countingSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c.add("ChangeMessageVisibilityBatch")
	return c.api.ChangeMessageVisibilityBatch(ctx, in, o...)
}

// countingDynamoDB counts the control plane store's DynamoDB calls.
type countingDynamoDB struct {
	api store.DynamoDBAPI
	counter
}

func (c *countingDynamoDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.add("GetItem")
	if pk, ok := in.Key["pk"].(*dynamodbtypes.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, "AGENT#") {
		c.add("GetItem of an agent's item")
	}
	return c.api.GetItem(ctx, in, o...)
}

func (c *countingDynamoDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.add("PutItem")
	return c.api.PutItem(ctx, in, o...)
}

func (c *countingDynamoDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.add("UpdateItem")
	return c.api.UpdateItem(ctx, in, o...)
}

func (c *countingDynamoDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.add("DeleteItem")
	return c.api.DeleteItem(ctx, in, o...)
}

func (c *countingDynamoDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.add("Query")
	return c.api.Query(ctx, in, o...)
}

func (c *countingDynamoDB) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.add("Scan")
	return c.api.Scan(ctx, in, o...)
}

// runID is a run id unique to one test.
func runID(tag string) string {
	return fmt.Sprintf("run-%s-%d", tag, time.Now().UnixNano())
}

func (c *countingDynamoDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c.add("BatchGetItem")
	for _, ka := range in.RequestItems {
		for range ka.Keys {
			c.add("BatchGetItem key")
		}
	}
	return c.api.BatchGetItem(ctx, in, o...)
}
