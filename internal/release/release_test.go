// Integration tests of release: the real SDK clients against DynamoDB Local and fauxqs from the
// shared stack, an EC2 server and a GitHub fake of the test's own, and simulated agents
// (releasetest) answering through the table.
package release_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/releasetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

const (
	scope       = "acme/api"
	runnerClass = "default"
	idleTime    = 30 * time.Minute
)

// env is one test's world: its own table, pool queue, EC2 server and GitHub fake.
type env struct {
	st      *store.Store
	rawDB   store.DynamoDBAPI
	sqs     *sqs.Client
	queue   *pool.Queue
	ec2srv  *ec2server.Server
	ec2     *ec2.Client
	gh      *ghaccess.Client
	ghURL   string
	fake    *githubfake.Server
	now     time.Time
	opts    release.Options
	classes pool.StaticResolver
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := t.Context()
	sk := stacktest.Shared(t)
	db := sk.DynamoDB()
	table := stacktest.UniqueName(t, "state")
	if err := store.CreateTable(ctx, db, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	sq := sk.SQS()
	out, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("creating queue: %v", err)
	}
	q := pool.NewQueue(sq, aws.ToString(out.QueueUrl))

	ec2srv := ec2server.New(ec2server.Options{PendingDelay: -1})
	ec2http := httptest.NewServer(ec2srv)
	t.Cleanup(func() { ec2http.Close(); ec2srv.Close() })
	cfg, _ := sk.AWSConfig(ctx)
	ec2c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(ec2http.URL) })

	fake := githubfake.New(githubfake.Options{})
	fake.SetLimits(githubfake.DocumentedLimits) // as one App installation has them
	ghhttp := httptest.NewServer(fake)
	t.Cleanup(func() { ghhttp.Close(); fake.Close() })
	gh, err := ghaccess.New(ghaccess.Config{APIURL: ghhttp.URL, Token: fake.PAT()})
	if err != nil {
		t.Fatalf("github client: %v", err)
	}

	now := time.Now().UTC().Truncate(time.Millisecond)
	return &env{
		st: store.New(db, table), rawDB: db, sqs: sq, queue: q, ec2srv: ec2srv, ec2: ec2c, gh: gh, ghURL: ghhttp.URL, fake: fake,
		now:     now,
		opts:    release.Options{SignalWait: 10 * time.Second, PollInterval: 20 * time.Millisecond, Now: func() time.Time { return now }},
		classes: pool.StaticResolver{runnerClass: q},
	}
}

func (e *env) releaser(gh release.GitHub) *release.Releaser {
	if gh == nil {
		gh = e.gh
	}
	return release.New(e.st, e.classes, gh, e.ec2, e.opts)
}

// launch starts n instances in the EC2 server and returns their ids.
func (e *env) launch(t testing.TB, n int) []string {
	t.Helper()
	out, err := e.ec2.RunInstances(t.Context(), &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large",
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
	})
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

// record writes the record of id for runID in state (created, claimed, running or terminating).
func (e *env) record(t *testing.T, id, runID string, state store.State) store.Instance {
	t.Helper()
	ctx := t.Context()
	rec, err := e.st.Create(ctx, store.Instance{
		ID: id, State: store.StateCreated, RunID: runID, Threshold: e.now.Add(time.Hour),
		UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, ResourceClass: "large",
		RunnerClass: runnerClass, Scope: scope, Zone: "us-east-1a",
	})
	if err != nil {
		t.Fatalf("creating record %s: %v", id, err)
	}
	path := map[store.State][]store.State{
		store.StateCreated:     nil,
		store.StateRunning:     {store.StateRunning},
		store.StateTerminating: {store.StateTerminating},
	}[state]
	if state == store.StateClaimed {
		// A claimed record of a run: created -> running -> idle -> claimed, as a reused instance.
		empty := ""
		for _, c := range []store.Change{
			{From: []store.State{store.StateCreated}, To: store.StateRunning},
			{From: []store.State{store.StateRunning}, To: store.StateIdle, SetRunID: &empty},
		} {
			if _, err := e.st.Transition(ctx, id, c); err != nil {
				t.Fatalf("record %s: %v", id, err)
			}
		}
		if rec, err = e.st.Claim(ctx, id, runID, e.now.Add(time.Hour)); err != nil {
			t.Fatalf("claiming %s: %v", id, err)
		}
		return rec
	}
	for _, to := range path {
		if rec, err = e.st.Transition(ctx, id, store.Change{From: []store.State{rec.State}, To: to, RunID: runID, Threshold: e.now.Add(time.Hour)}); err != nil {
			t.Fatalf("record %s -> %s: %v", id, to, err)
		}
	}
	return rec
}

// messages receives every message of the pool queue (leaving them in flight) and decodes them.
func (e *env) messages(t *testing.T) []pool.Message {
	t.Helper()
	var out []pool.Message
	for {
		got, err := e.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.queue.URL()), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
		})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(got.Messages) == 0 {
			break
		}
		for _, m := range got.Messages {
			msg, err := pool.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("pool message %q: %v", aws.ToString(m.Body), err)
			}
			out = append(out, msg)
		}
	}
	slices.SortFunc(out, func(a, b pool.Message) int { return cmpString(a.InstanceID, b.InstanceID) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func outcomes(rep release.Report) map[string]release.Outcome {
	out := map[string]release.Outcome{}
	for _, in := range rep.Instances {
		out[in.ID] = in.Outcome
	}
	return out
}

func TestReleasePoolsConfirmedInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const runID = "7890"
	ids := e.launch(t, 3)
	tags := map[string]string{} // the wake tag before the release
	for _, id := range ids {
		e.record(t, id, runID, store.StateRunning)
		view, _ := e.ec2srv.Instance(id)
		tags[id] = view.Tags[wake.TagKey]
	}
	agent := releasetest.Start(ctx, e.st, runID, ids, releasetest.Deregister)
	defer agent.Stop()

	rep, err := e.releaser(nil).Release(ctx, runID, idleTime)
	if err != nil {
		t.Fatalf("Release: %v (report %+v)", err, rep)
	}
	want := map[string]release.Outcome{}
	for _, id := range ids {
		want[id] = release.Pooled
	}
	if diff := cmp.Diff(want, outcomes(rep)); diff != "" {
		t.Fatalf("outcomes (-want +got):\n%s\nreport: %+v", diff, rep)
	}
	if err := agent.Stop(); err != nil {
		t.Fatalf("agents: %v", err)
	}
	// GitHub confirmed the three deregistrations with one listing of the scope.
	if n := e.fake.Calls()["GET /repos/{owner}/{repo}/actions/runners"]; n != 1 {
		t.Errorf("%d runner listings for a release of 3, want 1", n)
	}

	threshold := e.now.Add(idleTime)
	var wantMsgs []pool.Message
	for _, id := range ids {
		rec, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// Each message announces the pooling its release marked.
		wantMsgs = append(wantMsgs, pool.Message{
			InstanceID: id, UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096,
			ResourceClass: "large", RunnerClass: runnerClass, Scope: scope, Zone: "us-east-1a", Threshold: threshold,
			PooledAt: rec.PooledAt,
		})
	}
	if diff := cmp.Diff(wantMsgs, e.messages(t)); diff != "" {
		t.Errorf("pool messages (-want +got):\n%s", diff)
	}
	for _, id := range ids {
		rec, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != store.StateIdle || rec.RunID != "" || !rec.Threshold.Equal(threshold) || rec.Reason != "released by run "+runID {
			t.Errorf("record %s = %s run %q threshold %v reason %q; want idle, no run, threshold %v", id, rec.State, rec.RunID, rec.Threshold, rec.Reason, threshold)
		}
		cred, ok := agent.Credential(id)
		if !ok || cred.Kind != store.CredentialRemoval || cred.RunID != runID || cred.Token == "" || cred.URL != e.ghURL+"/"+scope {
			t.Errorf("removal credential of %s = %+v (taken %v); want a removal token for run %s and %s/%s", id, cred, ok, runID, e.ghURL, scope)
		}
		// The agent is woken: the wake tag has a new value.
		view, _ := e.ec2srv.Instance(id)
		if got := view.Tags[wake.TagKey]; got == "" || got == tags[id] {
			t.Errorf("wake tag of %s = %q (before the release %q): want a new value", id, got, tags[id])
		}
	}

	// A second release of the same run finds nothing running: a no-op that says so.
	again, err := e.releaser(nil).Release(ctx, runID, idleTime)
	if err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if again.Message != release.NothingToRelease || again.Count(release.Pooled) != 0 {
		t.Errorf("second release = %+v, want %q and nothing pooled", again, release.NothingToRelease)
	}
	if got := e.messages(t); len(got) != 0 {
		t.Errorf("second release put %d more pool messages", len(got))
	}
}

func TestReleaseExpiresUnconfirmedInstances(t *testing.T) {
	t.Parallel()
	for _, b := range []releasetest.Behavior{releasetest.Silent, releasetest.Fail} {
		t.Run(string(b), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			const runID = "4242"
			ids := e.launch(t, 2)
			for _, id := range ids {
				e.record(t, id, runID, store.StateRunning)
			}
			agent := releasetest.Start(ctx, e.st, runID, ids, b)
			defer agent.Stop()
			e.opts.SignalWait = time.Second
			rep, err := e.releaser(nil).Release(ctx, runID, idleTime)
			if err != nil {
				t.Fatalf("Release: %v", err)
			}
			for _, in := range rep.Instances {
				if in.Outcome != release.Expired {
					t.Errorf("%s: outcome %s (%s), want expired", in.ID, in.Outcome, in.Reason)
				}
			}
			if len(rep.Instances) != len(ids) {
				t.Errorf("report has %d instances, want %d", len(rep.Instances), len(ids))
			}
			if got := e.messages(t); len(got) != 0 {
				t.Errorf("unconfirmed instances were pooled: %+v", got)
			}
			for _, id := range ids {
				rec, err := e.st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if !rec.Expired(time.Now()) || rec.State != store.StateIdle {
					t.Errorf("record %s = %s threshold %v: want idle and expired", id, rec.State, rec.Threshold)
				}
			}
		})
	}
}

func TestConcurrentReleasesPoolOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const runID = "5555"
	ids := e.launch(t, 3)
	for _, id := range ids {
		e.record(t, id, runID, store.StateRunning)
	}
	agent := releasetest.Start(ctx, e.st, runID, ids, releasetest.Deregister)
	defer agent.Stop()

	var wg sync.WaitGroup
	reps := make([]release.Report, 2)
	errs := make([]error, 2)
	for i := range reps {
		wg.Go(func() { reps[i], errs[i] = e.releaser(nil).Release(ctx, runID, idleTime) })
	}
	wg.Wait()
	pooled := map[string]int{}
	for i, rep := range reps {
		t.Logf("release %d: %s", i, rep.Message)
		if errs[i] != nil {
			t.Fatalf("release %d: %v", i, errs[i])
		}
		for _, in := range rep.Instances {
			switch in.Outcome {
			case release.Pooled:
				pooled[in.ID]++
			case release.AlreadyReleased:
			default:
				t.Errorf("release %d: %s: outcome %s (%s)", i, in.ID, in.Outcome, in.Reason)
			}
		}
	}
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	if diff := cmp.Diff(want, pooled); diff != "" {
		t.Errorf("pooled per instance across both releases (-want +got):\n%s", diff)
	}
	var got []string
	for _, m := range e.messages(t) {
		got = append(got, m.InstanceID)
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("pool messages (-want +got):\n%s", diff)
	}
}

func TestReleaseReportsUnexpectedStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const runID = "6161"
	ids := e.launch(t, 4)
	states := map[string]store.State{
		ids[0]: store.StateCreated, ids[1]: store.StateClaimed, ids[2]: store.StateRunning, ids[3]: store.StateTerminating,
	}
	before := map[string]store.Instance{}
	for id, st := range states {
		before[id] = e.record(t, id, runID, st)
	}
	agent := releasetest.Start(ctx, e.st, runID, ids[2:3], releasetest.Deregister)
	defer agent.Stop()

	rep, err := e.releaser(nil).Release(ctx, runID, idleTime)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	want := map[string]release.Outcome{
		ids[0]: release.SkippedUnexpectedState, ids[1]: release.SkippedUnexpectedState,
		ids[2]: release.Pooled, ids[3]: release.SkippedUnexpectedState,
	}
	if diff := cmp.Diff(want, outcomes(rep)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	var unexpected []string
	for _, in := range rep.Unexpected() {
		unexpected = append(unexpected, fmt.Sprintf("%s:%s", in.ID, in.State))
		if in.Reason == "" {
			t.Errorf("%s: no reason given", in.ID)
		}
	}
	wantUnexpected := []string{ids[0] + ":created", ids[1] + ":claimed", ids[3] + ":terminating"}
	if diff := cmp.Diff(wantUnexpected, unexpected); diff != "" {
		t.Errorf("unexpected (-want +got):\n%s", diff)
	}
	for _, id := range []string{ids[0], ids[1], ids[3]} {
		rec, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Version != before[id].Version || rec.State != states[id] || rec.RunID != runID {
			t.Errorf("%s was touched: %s run %q version %d, was %s version %d", id, rec.State, rec.RunID, rec.Version, states[id], before[id].Version)
		}
	}
}

// failingGitHub is a GitHub that cannot hand out remove tokens.
type failingGitHub struct{}

func (failingGitHub) RemoveToken(context.Context, string) (ghaccess.RunnerToken, error) {
	return ghaccess.RunnerToken{}, errors.New("github is down")
}

func (failingGitHub) ListRunners(context.Context, string) ([]ghaccess.Runner, error) {
	return nil, errors.New("github is down")
}

func TestReleaseFailuresLeaveInstancesSafe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		gh          release.GitHub
		runnerClass string
		want        release.Outcome
		wantState   store.State
		wantExpired bool
	}{
		// No remove token: nothing is changed, a retried release picks the instance up again.
		{name: "no remove token", gh: failingGitHub{}, runnerClass: runnerClass, want: release.Failed, wantState: store.StateRunning},
		// No pool for the class: it can never be pooled, so it is expired for its run at once.
		{name: "no pool queue", runnerClass: "unknown", want: release.Expired, wantState: store.StateRunning, wantExpired: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			const runID = "9001"
			id := e.launch(t, 1)[0]
			e.record(t, id, runID, store.StateRunning)
			e.classes = pool.StaticResolver{tc.runnerClass: e.queue}
			rep, err := e.releaser(tc.gh).Release(ctx, runID, idleTime)
			if err == nil {
				t.Errorf("Release succeeded, want the failure reported")
			}
			if len(rep.Instances) != 1 || rep.Instances[0].Outcome != tc.want || rep.Instances[0].Err == nil {
				t.Fatalf("report = %+v, want one %s instance with its error", rep, tc.want)
			}
			rec, err := e.st.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != tc.wantState || rec.RunID != runID || rec.Expired(time.Now()) != tc.wantExpired {
				t.Errorf("record = %s run %q expired %v; want %s run %s expired %v", rec.State, rec.RunID, rec.Expired(time.Now()), tc.wantState, runID, tc.wantExpired)
			}
			if got := e.messages(t); len(got) != 0 {
				t.Errorf("pooled: %+v", got)
			}
		})
	}
}

func TestReleaseRejectsBadInput(t *testing.T) {
	t.Parallel()
	r := release.New(nil, nil, nil, nil, release.Options{})
	for _, tc := range []struct {
		runID string
		idle  time.Duration
	}{
		{"", time.Minute},
		{"run 1", time.Minute},
		{"42", 0},
		{"42", -time.Second},
	} {
		_, err := r.Release(t.Context(), tc.runID, tc.idle)
		if !errors.Is(err, release.ErrInvalid) {
			t.Errorf("Release(%q, %v) = %v, want ErrInvalid", tc.runID, tc.idle, err)
		}
	}
}

// TestSignedReleaseSpendsNoListing: a release signal signed by the instance's pinned agent key,
// in a class reused across repositories, pools without a runner listing; an unsigned one, or one
// of a class that is not reused across repositories (root jobs may run there), still confirms the
// deregistration with one listing of the scope.
func TestSignedReleaseSpendsNoListing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		signed   bool
		reuse    string
		listings int
	}{
		{"signed, any repository", true, declared.ReuseAny, 0},
		{"signed, reuse unset", true, "", 0},
		{"signed, same repository", true, declared.ReuseSameRepository, 1},
		{"unsigned", false, declared.ReuseAny, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.opts.Reuse = func(string) (string, error) { return tc.reuse, nil }
			ctx := t.Context()
			const runID = "4242"
			ids := e.launch(t, 2)
			keys := map[string]ed25519.PrivateKey{}
			for _, id := range ids {
				e.record(t, id, runID, store.StateRunning)
				if tc.signed {
					pub, key, err := ed25519.GenerateKey(nil)
					if err != nil {
						t.Fatal(err)
					}
					if err := e.st.PinAgentKey(ctx, id, base64.StdEncoding.EncodeToString(pub)); err != nil {
						t.Fatal(err)
					}
					keys[id] = key
				}
			}
			var agent *releasetest.Agent
			if tc.signed {
				agent = releasetest.StartSigned(ctx, e.st, runID, keys, releasetest.Deregister)
			} else {
				agent = releasetest.Start(ctx, e.st, runID, ids, releasetest.Deregister)
			}
			defer agent.Stop()
			rep, err := e.releaser(nil).Release(ctx, runID, idleTime)
			if err != nil {
				t.Fatalf("Release: %v (report %+v)", err, rep)
			}
			want := map[string]release.Outcome{ids[0]: release.Pooled, ids[1]: release.Pooled}
			if diff := cmp.Diff(want, outcomes(rep)); diff != "" {
				t.Fatalf("outcomes (-want +got):\n%s\nreport: %+v", diff, rep)
			}
			if n := e.fake.Calls()["GET /repos/{owner}/{repo}/actions/runners"]; n != tc.listings {
				t.Errorf("%d runner listings for the release of 2, want %d", n, tc.listings)
			}
		})
	}
}

// With a queue per scope, a release puts each instance's message in the queue of the scope it
// narrowed the instance to, created on the way; the class queue stays empty.
func TestReleaseIntoScopeQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const runID = "7891"
	scoped := pool.NewScopedQueue(e.sqs, e.queue.URL(), pool.ScopeOptions{})
	t.Cleanup(func() {
		_, _ = e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(scoped.URLFor(scope))})
	})
	e.classes = pool.StaticResolver{runnerClass: scoped}
	ids := e.launch(t, 2)
	for _, id := range ids {
		e.record(t, id, runID, store.StateRunning)
	}
	agent := releasetest.Start(ctx, e.st, runID, ids, releasetest.Deregister)
	defer agent.Stop()
	rep, err := e.releaser(nil).Release(ctx, runID, idleTime)
	if err != nil || rep.Count(release.Pooled) != len(ids) {
		t.Fatalf("Release = %+v, %v; want both pooled", rep, err)
	}
	if got := e.messages(t); len(got) != 0 {
		t.Errorf("class queue holds %d messages, want none", len(got))
	}
	e.queue = pool.NewQueue(e.sqs, scoped.URLFor(scope))
	var got []string
	for _, m := range e.messages(t) {
		got = append(got, m.InstanceID)
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Errorf("messages of %s's queue (-want +got):\n%s", scope, diff)
	}
}
