// Test environment of the agent's integration tests: the real store on the shared DynamoDB Local, an
// EC2 double of the test's own whose runtime hook runs the agent in-process, and a GitHub fake with the
// fake runner. Everything goes through the real SDK clients over HTTP.
package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/wake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

const (
	owner, repo = "acme", "api"
	waitFor     = 20 * time.Second
)

// env is one test's world.
type env struct {
	t          testing.TB
	store      *store.Store // the control plane's
	agentStore *store.Store // the agents' (the same unless envOptions.agentAPI is set)
	ec2        *ec2.Client
	ecs        *ec2server.Server
	gh         *githubfake.Server
	ghURL      string
	root       string
	pins       *pinner // the control plane's pinning of agent keys (pin_test.go)
}

// envOptions tune the environment.
type envOptions struct {
	notice    agent.NoticeMode
	preRunner string // script content; none when empty
	grace     time.Duration
	// manual makes the EC2 double's runtime do nothing but keep the instance's IMDS up: the test
	// runs agent.Run itself (to stop and restart it).
	manual bool
	// keyPrefix is the instance key prefix of both stores (store.WithInstanceKeyPrefix).
	keyPrefix string
	// agentAPI are middlewares of the agents' own DynamoDB client (the control plane's store is
	// separate): iam_test.go records every call an agent makes.
	agentAPI []func(*middleware.Stack) error
	// installation gives every instance a stand-in runner installation with its manifest.
	installation bool
	// noPin: nothing pins the agents' keys (the control plane's part, pin_test.go); their runners
	// never start unless the test pins.
	noPin bool
}

// newEnv builds the world; with manual unset, every instance runs the agent (agenttest.RuntimeHook).
func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	st := stacktest.Shared(t)
	db := st.DynamoDB()
	table := stacktest.UniqueName(t, "agent")
	if err := store.CreateTable(t.Context(), db, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	e := &env{t: t, store: store.New(db, table, store.WithInstanceKeyPrefix(o.keyPrefix)), root: t.TempDir()}
	e.agentStore = e.store
	if !o.noPin {
		e.pins = startPinner(t, e.store)
	}
	if len(o.agentAPI) > 0 {
		adb := dynamodb.New(db.Options(), func(do *dynamodb.Options) { do.APIOptions = append(do.APIOptions, o.agentAPI...) })
		e.agentStore = store.New(adb, table, store.WithInstanceKeyPrefix(o.keyPrefix))
	}

	e.gh = githubfake.New(githubfake.Options{})
	ghs := httptest.NewServer(e.gh)
	t.Cleanup(ghs.Close)
	e.ghURL = ghs.URL

	runtime := agenttest.RuntimeHook(e.agentConfig(o), agenttest.Options{
		Root: e.root, GitHubURL: e.ghURL, JobDuration: 100 * time.Millisecond, Installation: o.installation,
	})
	if o.manual {
		runtime = func(ctx context.Context, _ ec2server.RuntimeInstance) { <-ctx.Done() }
	}
	e.ecs = ec2server.New(ec2server.Options{
		Runtime: runtime, PendingDelay: 20 * time.Millisecond, ShuttingDownDelay: 50 * time.Millisecond,
		StoppingDelay: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	ecs := httptest.NewServer(e.ecs)
	t.Cleanup(func() { e.ecs.Close(); ecs.Close() })
	e.ec2 = ec2.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, func(o *ec2.Options) { o.BaseEndpoint = aws.String(ecs.URL) })
	return e
}

// agentConfig is the template every instance's agent starts from: test-sized intervals.
func (e *env) agentConfig(o envOptions) agent.Config {
	cfg := agent.Config{
		Store: e.agentStore, Notice: o.notice,
		HeartbeatInterval: 200 * time.Millisecond, FallbackInterval: 2 * time.Second, SpotInterval: 100 * time.Millisecond,
		CredentialWait: 2 * time.Second, RetryInterval: 50 * time.Millisecond,
		Grace: o.grace, OrphanGrace: 3 * time.Second, StopTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if cfg.Grace == 0 {
		cfg.Grace = time.Second
	}
	cfg.EC2 = lazyEC2{e}
	if o.preRunner != "" {
		p := filepath.Join(e.t.TempDir(), "pre-runner.sh")
		if err := os.WriteFile(p, []byte(o.preRunner), 0o755); err != nil {
			e.t.Fatal(err)
		}
		cfg.PreRunnerScript = p
	}
	return cfg
}

// lazyEC2 lets the agent config be built before the EC2 client exists.
type lazyEC2 struct{ e *env }

func (l lazyEC2) TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	return l.e.ec2.TerminateInstances(ctx, in, opts...)
}

// testWriter sends log lines to t.Log (dropped once the test is over).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a goroutine logging after its test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// launch starts one instance with metadata tags enabled (as runnerpool's launch templates do).
func (e *env) launch() string {
	e.t.Helper()
	out, err := e.ec2.RunInstances(e.t.Context(), &ec2.RunInstancesInput{
		ImageId: aws.String("ami-12345678"), InstanceType: ec2types.InstanceTypeC6iLarge,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		MetadataOptions: &ec2types.InstanceMetadataOptionsRequest{
			HttpTokens:           ec2types.HttpTokensStateRequired,
			InstanceMetadataTags: ec2types.InstanceMetadataTagsStateEnabled,
		},
	})
	if err != nil {
		e.t.Fatalf("RunInstances: %v", err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	e.pins.watch(id)
	return id
}

// create writes the control plane's "created" record for run.
func (e *env) create(id, run string) store.Instance {
	e.t.Helper()
	in, err := e.store.Create(e.t.Context(), store.Instance{
		ID: id, State: store.StateCreated, RunID: run, Threshold: time.Now().Add(10 * time.Minute),
		InstanceType: "c6i.large", UsageClass: "on-demand",
	})
	if err != nil {
		e.t.Fatalf("creating record: %v", err)
	}
	return in
}

// imdsEndpoint waits for the instance's IMDS endpoint.
func (e *env) imdsEndpoint(id string) string {
	e.t.Helper()
	var endpoint string
	if !eventually(func() bool { v, _ := e.ecs.Instance(id); endpoint = v.IMDSEndpoint; return endpoint != "" }) {
		e.t.Fatalf("instance %s has no IMDS endpoint", id)
	}
	return endpoint
}

// runnerToken asks the GitHub fake for a registration or remove token, as the control plane does.
func (e *env) runnerToken(kind string) string {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.t.Context(), http.MethodPost,
		fmt.Sprintf("%s/repos/%s/%s/actions/runners/%s-token", e.ghURL, owner, repo, kind), nil)
	req.Header.Set("Authorization", "token "+e.gh.PAT())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s token: %v", kind, err)
	}
	defer resp.Body.Close()
	var body struct {
		Token string `json:"token"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil || body.Token == "" {
		e.t.Fatalf("%s token: %d %s", kind, resp.StatusCode, b)
	}
	return body.Token
}

// putCredential writes a credential for run, as the control plane's Registrar and release do.
func (e *env) putCredential(id, run string, kind store.CredentialKind, token string) {
	e.t.Helper()
	err := e.store.PutCredential(e.t.Context(), id, store.Credential{
		Kind: kind, RunID: run, URL: "https://github.example/" + owner + "/" + repo, Token: token,
		Labels: []string{run}, ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		e.t.Fatalf("writing %s credential: %v", kind, err)
	}
}

// notify tags the instance as the control plane does after a claim or release.
func (e *env) notify(in store.Instance) {
	e.t.Helper()
	if err := wake.Notify(e.t.Context(), e.ec2, in.ID); err != nil {
		e.t.Fatalf("notify: %v", err)
	}
}

// release does the control plane's half of a release: removal credential, running -> idle, notify.
func (e *env) release(id, run string) {
	e.t.Helper()
	e.putCredential(id, run, store.CredentialRemoval, e.runnerToken("remove"))
	none := ""
	in, err := e.store.Transition(e.t.Context(), id, store.Change{
		From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: run, SetRunID: &none,
		Threshold: time.Now().Add(10 * time.Minute), Reason: "released",
	})
	if err != nil {
		e.t.Fatalf("release: %v", err)
	}
	e.notify(in)
}

// toRunning is the control plane's created|claimed -> running after a verified registration.
func (e *env) toRunning(id, run string) {
	e.t.Helper()
	_, err := e.store.Transition(e.t.Context(), id, store.Change{
		From: []store.State{store.StateCreated, store.StateClaimed}, To: store.StateRunning, RunID: run,
		Threshold: time.Now().Add(10 * time.Minute), Reason: "registered",
	})
	if err != nil {
		e.t.Fatalf("to running: %v", err)
	}
}

// waitSignal waits until the instance's last signal is sig for run.
func (e *env) waitSignal(id string, sig store.Signal, run string) store.SignalRecord {
	e.t.Helper()
	var last store.SignalRecord
	var lastErr error
	ok := eventually(func() bool {
		last, lastErr = e.store.LastSignal(e.t.Context(), id)
		return lastErr == nil && last.Signal == sig && last.RunID == run
	})
	if !ok {
		e.t.Fatalf("waiting for signal %s run %q: last %+v (err %v)", sig, run, last, lastErr)
	}
	return last
}

// runnerOf returns the instance's runner in the GitHub fake.
func (e *env) runnerOf(id string) (githubfake.Runner, bool) {
	for _, r := range e.gh.Runners(owner, repo) {
		if r.Name == agent.RunnerName(id) {
			return r, true
		}
	}
	return githubfake.Runner{}, false
}

// waitRunner waits for the instance's runner to be online with label run.
func (e *env) waitRunner(id, run string) githubfake.Runner {
	e.t.Helper()
	var r githubfake.Runner
	ok := eventually(func() bool {
		var found bool
		r, found = e.runnerOf(id)
		return found && r.Status == "online" && containsFold(r.Labels, run)
	})
	if !ok {
		e.t.Fatalf("runner of %s for %s not online: %+v (all: %+v)", id, run, r, e.gh.Runners(owner, repo))
	}
	return r
}

// waitJob waits until a job completed and returns it.
func (e *env) waitJob(jobID int64) githubfake.Job {
	e.t.Helper()
	var j githubfake.Job
	if !eventually(func() bool { j, _ = e.gh.Job(jobID); return j.Status == githubfake.JobCompleted }) {
		e.t.Fatalf("job %d not completed: %+v", jobID, j)
	}
	return j
}

// waitEC2State waits until the instance is in one of states.
func (e *env) waitEC2State(id string, states ...string) {
	e.t.Helper()
	var v ec2server.InstanceView
	if !eventually(func() bool {
		v, _ = e.ecs.Instance(id)
		for _, s := range states {
			if v.State == s {
				return true
			}
		}
		return false
	}) {
		e.t.Fatalf("instance %s is %q, want one of %v", id, v.State, states)
	}
}

// workFiles lists the files below an instance's workspace.
func (e *env) workFiles(id string) []string {
	var out []string
	root := agenttest.InstanceDirs(e.root, id).Work
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, root))
		}
		return nil
	})
	return out
}

func eventually(cond func() bool) bool {
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

func containsFold(xs []string, x string) bool {
	for _, v := range xs {
		if strings.EqualFold(v, x) {
			return true
		}
	}
	return false
}
