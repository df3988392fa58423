// Integration tests of refresh: the real SDK clients against DynamoDB Local and fauxqs from the
// shared stack, and an EC2 server and a GitHub fake of each test's own, on an injected clock.
package refresh_test

import (
	"context"
	"errors"
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
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

const (
	deployment = "dep-test"
	owner      = "acme"
	repo       = "api"
	scope      = owner + "/" + repo
)

// clock is the injected clock shared by the store, the EC2 server and the refresher.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// hookDB lets a test act between refresh's read of the expired records and its conditional mark.
type hookDB struct {
	store.DynamoDBAPI
	afterQuery func(ctx context.Context, out *dynamodb.QueryOutput)
}

func (h *hookDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := h.DynamoDBAPI.Query(ctx, in, opts...)
	if err == nil && h.afterQuery != nil {
		h.afterQuery(ctx, out)
	}
	return out, err
}

type env struct {
	clock  *clock
	db     *hookDB
	st     *store.Store
	sqs    *sqs.Client
	queue  *pool.Queue
	ec2srv *ec2server.Server
	ec2    *ec2.Client
	fake   *githubfake.Server
	ghURL  string
	gh     *ghaccess.Client
	opts   refresh.Options
}

func newEnv(t testing.TB) *env { return newEnvWith(t, ec2server.Options{}) }

// newEnvWith is newEnv with the EC2 server's model options set from o (ConsistencyDelay).
func newEnvWith(t testing.TB, o ec2server.Options) *env {
	t.Helper()
	ctx := t.Context()
	sk := stacktest.Shared(t)
	clk := &clock{t: time.Now().UTC().Truncate(time.Millisecond)}
	table := stacktest.UniqueName(t, "state")
	if err := store.CreateTable(ctx, sk.DynamoDB(), table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	db := &hookDB{DynamoDBAPI: sk.DynamoDB()}
	sq := sk.SQS()
	out, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("creating queue: %v", err)
	}
	q := pool.NewQueue(sq, aws.ToString(out.QueueUrl))

	ec2srv := ec2server.New(ec2server.Options{
		Now: clk.Now, PendingDelay: -1, StoppingDelay: -1, ShuttingDownDelay: -1, TerminatedRetention: 24 * time.Hour,
		ConsistencyDelay: o.ConsistencyDelay,
	})
	ec2http := httptest.NewServer(ec2srv)
	t.Cleanup(func() { ec2http.Close(); ec2srv.Close() })
	cfg, _ := sk.AWSConfig(ctx)
	ec2c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(ec2http.URL) })

	fake := githubfake.New(githubfake.Options{})
	ghhttp := httptest.NewServer(fake)
	t.Cleanup(func() { ghhttp.Close(); fake.Close() })
	gh, err := ghaccess.New(ghaccess.Config{APIURL: ghhttp.URL, Token: fake.PAT()})
	if err != nil {
		t.Fatalf("github client: %v", err)
	}
	return &env{
		clock: clk, db: db, st: store.New(db, table, store.WithClock(clk.Now)), sqs: sq, queue: q,
		ec2srv: ec2srv, ec2: ec2c, fake: fake, ghURL: ghhttp.URL, gh: gh,
		opts: refresh.Options{
			DeploymentID: deployment, Scopes: []string{scope}, Queues: []*pool.Queue{q}, SQS: sq,
			VisibilityTimeout: 10 * time.Second, Now: clk.Now,
		},
	}
}

func (e *env) refresher() *refresh.Refresher {
	return refresh.New(e.st, e.ec2, e.gh, pool.StaticResolver{}, e.opts)
}

// launch starts n instances tagged with deployment (none when empty).
func (e *env) launch(t testing.TB, n int, deploymentTag string) []string {
	t.Helper()
	in := &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large",
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
	}
	if deploymentTag != "" {
		in.TagSpecifications = []ec2types.TagSpecification{{
			ResourceType: ec2types.ResourceTypeInstance,
			Tags:         []ec2types.Tag{{Key: aws.String(tags.Deployment), Value: aws.String(deploymentTag)}},
		}}
	}
	out, err := e.ec2.RunInstances(t.Context(), in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	var ids []string
	for _, in := range out.Instances {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	slices.Sort(ids)
	return ids
}

// record writes a record of id in state with the given threshold.
func (e *env) record(t testing.TB, id string, state store.State, threshold time.Time) store.Instance {
	t.Helper()
	ctx := t.Context()
	const runID = "77"
	if state == store.StateReady { // a hot warm-pool instance: warming -> ready, never owned by a run
		rec, err := e.st.Create(ctx, store.Instance{ID: id, State: store.StateWarming, Pool: "hot", Threshold: threshold,
			UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "default", Scope: scope})
		if err == nil {
			rec, err = e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: store.StateReady, Threshold: threshold, MarkPooled: true})
		}
		if err != nil {
			t.Fatalf("record %s ready: %v", id, err)
		}
		return rec
	}
	rec, err := e.st.Create(ctx, store.Instance{
		ID: id, State: store.StateCreated, RunID: runID, Threshold: threshold,
		UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "default", Scope: scope,
	})
	if err != nil {
		t.Fatalf("creating record %s: %v", id, err)
	}
	empty := ""
	var steps []store.Change
	switch state {
	case store.StateCreated:
	case store.StateRunning:
		steps = []store.Change{{From: []store.State{store.StateCreated}, To: store.StateRunning}}
	case store.StateIdle:
		steps = []store.Change{
			{From: []store.State{store.StateCreated}, To: store.StateRunning},
			{From: []store.State{store.StateRunning}, To: store.StateIdle, SetRunID: &empty},
		}
	case store.StateClaimed:
		steps = []store.Change{
			{From: []store.State{store.StateCreated}, To: store.StateRunning},
			{From: []store.State{store.StateRunning}, To: store.StateIdle, SetRunID: &empty},
			{From: []store.State{store.StateIdle}, To: store.StateClaimed, SetRunID: aws.String("78")},
		}
	case store.StateTerminating, store.StateTerminated:
		steps = []store.Change{{From: []store.State{store.StateCreated}, To: state, Reason: "test"}}
	default:
		t.Fatalf("record: unsupported state %s", state)
	}
	for _, c := range steps {
		c.Threshold = threshold
		if rec, err = e.st.Transition(ctx, id, c); err != nil {
			t.Fatalf("record %s -> %s: %v", id, c.To, err)
		}
	}
	return rec
}

func (e *env) ec2State(t *testing.T, id string) string {
	t.Helper()
	v, ok := e.ec2srv.Instance(id)
	if !ok {
		return "gone"
	}
	return v.State
}

func (e *env) recordState(t *testing.T, id string) store.State {
	t.Helper()
	rec, err := e.st.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("reading %s: %v", id, err)
	}
	return rec.State
}

func TestRefreshTerminatesExpiredRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const ghost = "i-0deadbeefdeadbeef" // its record outlived the instance: EC2 no longer knows it
	// Written longer ago than EC2's consistency window, so EC2's NotFound is proof it is gone.
	e.record(t, ghost, store.StateCreated, e.clock.Now())
	e.clock.Advance(terminate.ConsistencyWindow)
	ids := e.launch(t, 5, deployment)
	past, future := e.clock.Now().Add(-time.Minute), e.clock.Now().Add(time.Hour)
	idle, running, created, fresh, leftover := ids[0], ids[1], ids[2], ids[3], ids[4]
	e.record(t, idle, store.StateIdle, past)
	e.record(t, running, store.StateRunning, past)
	e.record(t, created, store.StateCreated, past)
	e.record(t, fresh, store.StateRunning, future)
	e.record(t, leftover, store.StateTerminating, future) // marked by a pass that crashed before terminating

	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantTerminated := []string{idle, running, created, leftover, ghost}
	slices.Sort(wantTerminated)
	got := rep.Expiry
	if got.Expired != 4 || got.Marked != 4 || got.Renewed != 0 || got.Retried != 1 {
		t.Errorf("expiry = %+v, want 4 expired and marked, 1 retried", got)
	}
	if diff := cmp.Diff(wantTerminated, got.Terminated); diff != "" {
		t.Errorf("terminated (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ghost}, got.AlreadyGone); diff != "" {
		t.Errorf("already gone (-want +got):\n%s", diff)
	}
	// One call refused for the unknown id, one without it.
	if got.TerminateCalls != 2 {
		t.Errorf("TerminateInstances calls = %d, want 2", got.TerminateCalls)
	}
	for _, id := range wantTerminated {
		if st := e.recordState(t, id); st != store.StateTerminated {
			t.Errorf("record %s = %s, want terminated", id, st)
		}
		if id != ghost {
			if st := e.ec2State(t, id); st != "terminated" && st != "shutting-down" {
				t.Errorf("instance %s = %s in EC2, want terminated", id, st)
			}
		}
	}
	if st, ec2st := e.recordState(t, fresh), e.ec2State(t, fresh); st != store.StateRunning || ec2st != "running" {
		t.Errorf("unexpired %s = record %s, EC2 %s; want running, running", fresh, st, ec2st)
	}

	// A second pass changes nothing.
	again, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if again.Changed() || again.Expiry.TerminateCalls != 0 {
		t.Errorf("second pass changed something: %+v", again)
	}
}

func TestRefreshLeavesRenewedRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	id := e.launch(t, 1, deployment)[0]
	e.record(t, id, store.StateIdle, e.clock.Now().Add(-time.Minute))

	// Right after refresh reads the idle records, the record changes under it: taken and handed
	// back (claimed -> idle) with a fresh threshold, so it is idle again but no longer expired.
	// (A real claim refuses an expired record; the raw transition stands for any renewal.)
	plain := store.New(e.db.DynamoDBAPI, e.st.Table(), store.WithClock(e.clock.Now))
	var once sync.Once
	e.db.afterQuery = func(ctx context.Context, out *dynamodb.QueryOutput) {
		if len(out.Items) == 0 {
			return
		}
		once.Do(func() {
			renewed := e.clock.Now().Add(time.Hour)
			run := "99"
			if _, err := plain.Transition(ctx, id, store.Change{
				From: []store.State{store.StateIdle}, To: store.StateClaimed, RequireNoRun: true, SetRunID: &run, Threshold: renewed,
			}); err != nil {
				t.Errorf("claim: %v", err)
				return
			}
			empty := ""
			if _, err := plain.Transition(ctx, id, store.Change{
				From: []store.State{store.StateClaimed}, To: store.StateIdle, RunID: "99", SetRunID: &empty, Threshold: renewed,
			}); err != nil {
				t.Errorf("unclaim: %v", err)
			}
		})
	}
	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Expiry.Expired != 1 || rep.Expiry.Renewed != 1 || rep.Expiry.Marked != 0 || len(rep.Expiry.Terminated) != 0 {
		t.Errorf("expiry = %+v, want 1 expired, renewed and left alone", rep.Expiry)
	}
	if st, ec2st := e.recordState(t, id), e.ec2State(t, id); st != store.StateIdle || ec2st != "running" {
		t.Errorf("renewed %s = record %s, EC2 %s; want idle, running", id, st, ec2st)
	}
}

func TestRefreshTerminatesInBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const n = 120
	ids := e.launch(t, n, deployment)
	past := e.clock.Now().Add(-time.Minute)
	for _, id := range ids {
		e.record(t, id, store.StateCreated, past)
	}
	e.ec2srv.ResetCalls()
	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	const wantCalls = (n + refresh.DefaultBatchSize - 1) / refresh.DefaultBatchSize
	if got := e.ec2srv.Calls()["TerminateInstances"]; got != wantCalls {
		t.Errorf("TerminateInstances calls = %d, want %d", got, wantCalls)
	}
	if diff := cmp.Diff(ids, rep.Expiry.Terminated); diff != "" {
		t.Errorf("terminated (-want +got):\n%s", diff)
	}
	for _, id := range ids {
		if st := e.ec2State(t, id); st != "terminated" {
			t.Fatalf("instance %s = %s, want terminated", id, st)
		}
	}
}

func TestRefreshSweepsOnlyOwnOrphans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	old := e.launch(t, 3, deployment)
	orphan, withRecord, deadRecord := old[0], old[1], old[2]
	e.record(t, withRecord, store.StateRunning, e.clock.Now().Add(time.Hour))
	e.record(t, deadRecord, store.StateTerminated, e.clock.Now().Add(time.Hour)) // record says gone, EC2 disagrees
	untagged := e.launch(t, 1, "")[0]
	foreign := e.launch(t, 1, "another-deployment")[0]
	e.clock.Advance(5 * time.Minute)
	young := e.launch(t, 1, deployment)[0]

	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantOrphans := []string{orphan, deadRecord}
	slices.Sort(wantOrphans)
	if diff := cmp.Diff(wantOrphans, rep.Orphans.Terminated); diff != "" {
		t.Errorf("orphans terminated (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{young}, rep.Orphans.Young); diff != "" {
		t.Errorf("young orphans (-want +got):\n%s", diff)
	}
	for id, want := range map[string]string{
		orphan: "terminated", deadRecord: "terminated",
		withRecord: "running", untagged: "running", foreign: "running", young: "running",
	} {
		if got := e.ec2State(t, id); got != want {
			t.Errorf("instance %s = %s, want %s", id, got, want)
		}
	}

	again, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if again.Changed() {
		t.Errorf("second pass changed something: %+v", again)
	}
	if got := e.ec2State(t, untagged); got != "running" {
		t.Errorf("untagged instance = %s after two passes, want running", got)
	}
}

// The sweep lists the deployment's instances by tag (DescribeTags) and describes only those without
// a live record; one EC2 reports terminated is not described again while its tag is listed.
func TestRefreshDescribesOnlyUnrecordedInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 6, deployment)
	for _, id := range ids[:5] {
		e.record(t, id, store.StateRunning, e.clock.Now().Add(time.Hour))
	}
	if _, err := e.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids[5:]}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(5 * time.Minute)
	r := e.refresher()
	for pass, wantDescribe := range []int{1, 0} {
		e.ec2srv.ResetCalls()
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		calls := e.ec2srv.Calls()
		if calls["DescribeTags"] != 1 || calls["DescribeInstances"] != wantDescribe || rep.Changed() || rep.Orphans.Tagged != 5 {
			t.Errorf("pass %d: calls %v, tagged %d, changed %v; want 1 DescribeTags, %d DescribeInstances, 5 tagged, no change",
				pass, calls, rep.Orphans.Tagged, rep.Changed(), wantDescribe)
		}
	}
}

func TestRefreshRemovesLeftoverRunners(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 4, deployment)
	dead, deadOnline, live, orphan := ids[0], ids[1], ids[2], ids[3]
	e.record(t, dead, store.StateTerminated, e.clock.Now())
	e.record(t, deadOnline, store.StateTerminated, e.clock.Now())
	e.record(t, live, store.StateRunning, e.clock.Now().Add(time.Hour))
	// The dead instances are gone in EC2 too, so only their records say they were ours.
	if _, err := e.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{dead, deadOnline}}); err != nil {
		t.Fatal(err)
	}
	const unknown = "i-0123456789abcdef0" // no record here: perhaps another deployment's
	e.clock.Advance(5 * time.Minute)      // the orphan is past its grace

	tok, err := e.gh.RegistrationToken(ctx, scope)
	if err != nil {
		t.Fatalf("registration token: %v", err)
	}
	register := func(name string, online bool) {
		rc := githubfake.NewRunnerClient(e.ghURL, nil)
		if _, err := rc.Register(ctx, githubfake.RegisterOptions{Token: tok.Token, Name: name}); err != nil {
			t.Fatalf("registering %s: %v", name, err)
		}
		if online {
			if err := rc.Connect(ctx); err != nil {
				t.Fatalf("connecting %s: %v", name, err)
			}
		}
	}
	register(refresh.RunnerNamePrefix+dead, false)
	register(refresh.RunnerNamePrefix+deadOnline, true)
	register(refresh.RunnerNamePrefix+live, false)
	register(refresh.RunnerNamePrefix+orphan, false)
	register(refresh.RunnerNamePrefix+unknown, false)
	register("someone-elses-runner", false)

	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{scope + "/" + refresh.RunnerNamePrefix + dead, scope + "/" + refresh.RunnerNamePrefix + orphan}
	slices.Sort(want)
	if diff := cmp.Diff(want, rep.Runners.Deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	var left []string
	for _, r := range e.fake.Runners(owner, repo) {
		left = append(left, r.Name)
	}
	wantLeft := []string{
		refresh.RunnerNamePrefix + deadOnline, refresh.RunnerNamePrefix + live,
		refresh.RunnerNamePrefix + unknown, "someone-elses-runner",
	}
	slices.Sort(left)
	slices.Sort(wantLeft)
	if diff := cmp.Diff(wantLeft, left); diff != "" {
		t.Errorf("runners left (-want +got):\n%s", diff)
	}

	again, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if again.Changed() {
		t.Errorf("second pass changed something: %+v", again)
	}
}

// TestRefreshDeletesRunnersOfPooledInstances: a release that believed its agent's signed word
// spent no listing; refresh's runner phase checks that word after the fact. A runner still
// registered (here online) for an instance pooled more than PooledCheckMargin before the listing is
// deleted and reported in OfPooled; one pooled just now (GitHub may not show the removal yet) and
// one of a running instance stay.
func TestRefreshDeletesRunnersOfPooledInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 3, deployment)
	old, recent, running := ids[0], ids[1], ids[2]
	e.record(t, old, store.StateIdle, e.clock.Now().Add(time.Hour))
	if _, err := e.st.MarkPooled(ctx, old); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * refresh.PooledCheckMargin)
	e.record(t, recent, store.StateIdle, e.clock.Now().Add(time.Hour))
	if _, err := e.st.MarkPooled(ctx, recent); err != nil {
		t.Fatal(err)
	}
	e.record(t, running, store.StateRunning, e.clock.Now().Add(time.Hour))
	tok, err := e.gh.RegistrationToken(ctx, scope)
	if err != nil {
		t.Fatalf("registration token: %v", err)
	}
	for _, id := range ids {
		rc := githubfake.NewRunnerClient(e.ghURL, nil)
		if _, err := rc.Register(ctx, githubfake.RegisterOptions{Token: tok.Token, Name: refresh.RunnerNamePrefix + id}); err != nil {
			t.Fatalf("registering %s: %v", id, err)
		}
		if err := rc.Connect(ctx); err != nil {
			t.Fatalf("connecting %s: %v", id, err)
		}
	}

	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff([]string{scope + "/" + refresh.RunnerNamePrefix + old}, rep.Runners.OfPooled); diff != "" {
		t.Errorf("runners of pooled instances deleted (-want +got):\n%s", diff)
	}
	if len(rep.Runners.Deleted) != 0 {
		t.Errorf("leftover runners deleted: %v, want none", rep.Runners.Deleted)
	}
	var left []string
	for _, r := range e.fake.Runners(owner, repo) {
		left = append(left, r.Name)
	}
	wantLeft := []string{refresh.RunnerNamePrefix + recent, refresh.RunnerNamePrefix + running}
	slices.Sort(left)
	slices.Sort(wantLeft)
	if diff := cmp.Diff(wantLeft, left); diff != "" {
		t.Errorf("runners left (-want +got):\n%s", diff)
	}
	// The instances themselves are left to their thresholds: the pooled one stays pooled.
	if st := e.recordState(t, old); st != store.StateIdle {
		t.Errorf("the pooled instance is %s, want idle", st)
	}
}

// peek receives every visible message of the queue and makes them visible again.
func (e *env) peek(t *testing.T) []string {
	t.Helper()
	ctx := t.Context()
	var ids []string
	var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
	for {
		out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 30})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			msg, err := pool.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Errorf("message %q left in the pool: %v", aws.ToString(m.Body), err)
			}
			ids = append(ids, msg.InstanceID)
			entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(len(entries))), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
			})
		}
	}
	for batch := range slices.Chunk(entries, 10) {
		if _, err := e.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(e.queue.URL()), Entries: batch}); err != nil {
			t.Fatalf("ChangeMessageVisibilityBatch: %v", err)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestRefreshDropsDeadPoolMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 5, deployment)
	live, claimed, stale, unverified := ids[0], ids[1], ids[2], ids[4]
	future := e.clock.Now().Add(time.Hour)
	hot := e.record(t, ids[3], store.StateReady, future).ID // a hot warm-pool instance is poolable too
	e.record(t, live, store.StateIdle, future)
	if _, err := e.st.MarkPooled(ctx, live); err != nil { // its release verified the hand-back
		t.Fatal(err)
	}
	e.record(t, claimed, store.StateClaimed, future)
	e.record(t, stale, store.StateIdle, future)
	// Idle again, but its release has not verified the hand-back: a message of an earlier pooling
	// (one a second-look claim left) is dead, whatever its threshold says.
	e.record(t, unverified, store.StateIdle, future)
	const noRecord = "i-0aaaaaaaaaaaaaaaa"

	put := func(id string, threshold time.Time) {
		t.Helper()
		err := e.queue.Put(ctx, pool.Message{InstanceID: id, UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, Threshold: threshold}, 0)
		if err != nil {
			t.Fatalf("put %s: %v", id, err)
		}
	}
	put(live, future)
	put(hot, future)
	put(live, future) // a duplicate
	put(claimed, future)
	put(noRecord, future)
	put(stale, e.clock.Now().Add(-time.Second)) // the message outlived its threshold
	put(unverified, future)
	if _, err := e.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(e.queue.URL()), MessageBody: aws.String(`{"instanceId":`)}); err != nil {
		t.Fatal(err)
	}
	// A GitHub phase that fails does not stop the pool phase.
	e.opts.Scopes = []string{"not a scope!"}

	rep, err := e.refresher().Run(ctx)
	if err == nil || len(rep.Errors) != 1 || rep.Errors[0].Phase != refresh.PhaseRunners {
		t.Errorf("Run error = %v, errors %v; want one error of the runners phase", err, rep.Errors)
	}
	if diff := cmp.Diff(refresh.PoolReport{Queues: 1, Checked: 8, Dropped: 6, Kept: 2}, rep.Pool); diff != "" {
		t.Errorf("pool (-want +got):\n%s", diff)
	}
	// The live messages are receivable again at once.
	if diff := cmp.Diff(sorted([]string{hot, live}), sorted(e.peek(t))); diff != "" {
		t.Errorf("messages left (-want +got):\n%s", diff)
	}

	again, _ := e.refresher().Run(ctx)
	if again.Changed() || again.Pool.Kept != 2 {
		t.Errorf("second pass = %+v, want nothing dropped and the live messages kept", again.Pool)
	}
	if diff := cmp.Diff(sorted([]string{hot, live}), sorted(e.peek(t))); diff != "" {
		t.Errorf("messages left after the second pass (-want +got):\n%s", diff)
	}
}

// Nothing lost on a crash: an idle instance whose pool message is gone (a crash between going idle
// and the message being put) is pooled again once two complete walks further apart than the
// longest visibility timeout missed it, exactly once, and only if the control plane marked it
// pooled; an idle instance that still has its message gets no second one.
func TestRefreshPoolsLostMessagesAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ids := e.launch(t, 4, deployment)
	lost, unconfirmed, pooled, fresh := ids[0], ids[1], ids[2], ids[3]
	future := e.clock.Now().Add(time.Hour)
	for _, id := range []string{lost, unconfirmed, pooled} {
		e.record(t, id, store.StateIdle, future)
	}
	signal := func(id string, s store.Signal) {
		t.Helper()
		if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: s, RunID: "77"}); err != nil {
			t.Fatal(err)
		}
	}
	mark := func(id string) store.Instance {
		t.Helper()
		rec, err := e.st.MarkPooled(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	signal(lost, store.SignalReleased)
	mark(lost)
	// Released by the control plane, never confirmed: its agent's forged release signal is not the
	// control plane's mark, so it is never pooled.
	signal(unconfirmed, store.SignalReleased)
	signal(pooled, store.SignalReleased)
	rec := mark(pooled)
	if err := e.queue.Put(ctx, claim.MessageOf(rec), 0); err != nil {
		t.Fatal(err)
	}
	// Made idle just now: its release is still putting its message (it does, after the first pass).
	e.record(t, fresh, store.StateIdle, future)
	signal(fresh, store.SignalReleased)
	freshRec := mark(fresh)

	r := e.poolRefresher()
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Pool.Repooled) != 0 || !cmp.Equal(sorted([]string{lost, fresh}), sorted(rep.Pool.Missed)) {
		t.Errorf("first pass = %+v, want %s and %s missed, nothing pooled again (a reader may hold a message)", rep.Pool, lost, fresh)
	}
	if err := e.queue.Put(ctx, claim.MessageOf(freshRec), 0); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(16 * time.Second) // past the longest visibility timeout (the pickups' 15 s)
	rep, err = r.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff([]string{lost}, rep.Pool.Repooled); diff != "" {
		t.Errorf("repooled (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sorted([]string{lost, pooled, fresh}), e.peek(t)); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	again, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("third Run: %v", err)
	}
	if len(again.Pool.Repooled) != 0 || again.Pool.Kept != 3 {
		t.Errorf("second pass = %+v, want nothing pooled again", again.Pool)
	}
	if diff := cmp.Diff(sorted([]string{lost, pooled, fresh}), e.peek(t)); diff != "" {
		t.Errorf("messages after the third pass (-want +got):\n%s", diff)
	}
}

func TestRefreshRequiresDeploymentID(t *testing.T) {
	t.Parallel()
	r := refresh.New(store.New(nil, "t"), &ec2.Client{}, nil, nil, refresh.Options{})
	if _, err := r.Run(t.Context()); !errors.Is(err, refresh.ErrConfig) {
		t.Fatalf("Run without a DeploymentID = %v, want ErrConfig", err)
	}
}

func TestRefreshTerminationFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		code   string
		status int
		// calls in the first pass, whether the first pass fails, and where the records are after it
		wantCalls  int
		wantErr    bool
		wantRecord store.State
	}{
		// EC2 names no id of the batch: the batch is terminated one id at a time.
		{name: "unknown id not named", code: "InvalidInstanceID.NotFound", wantCalls: 1 + 3, wantRecord: store.StateTerminated},
		// Any other failure leaves the records terminating; the next pass finishes the job.
		{name: "unauthorized", code: "UnauthorizedOperation", status: 403, wantCalls: 1, wantErr: true, wantRecord: store.StateTerminating},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			ids := e.launch(t, 3, deployment)
			for _, id := range ids {
				e.record(t, id, store.StateRunning, e.clock.Now().Add(-time.Second))
			}
			e.opts.Queues = nil // this test is about termination only
			e.ec2srv.SetFailNext("TerminateInstances", tc.code, tc.status)
			rep, err := e.refresher().Run(ctx)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Run error = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && (len(rep.Errors) != 1 || rep.Errors[0].Phase != refresh.PhaseExpiry) {
				t.Errorf("errors = %v, want one of the expiry phase", rep.Errors)
			}
			if rep.Expiry.TerminateCalls != tc.wantCalls {
				t.Errorf("TerminateInstances calls = %d, want %d", rep.Expiry.TerminateCalls, tc.wantCalls)
			}
			for _, id := range ids {
				if st := e.recordState(t, id); st != tc.wantRecord {
					t.Errorf("record %s = %s, want %s", id, st, tc.wantRecord)
				}
			}

			// The next pass terminates whatever is left.
			if _, err := e.refresher().Run(ctx); err != nil {
				t.Fatalf("second Run: %v", err)
			}
			for _, id := range ids {
				if st, ec2st := e.recordState(t, id), e.ec2State(t, id); st != store.StateTerminated || ec2st != "terminated" {
					t.Errorf("%s after the second pass = record %s, EC2 %s; want terminated", id, st, ec2st)
				}
			}
		})
	}
}

func sorted(ids []string) []string {
	slices.Sort(ids)
	return ids
}
