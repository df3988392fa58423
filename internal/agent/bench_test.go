// The claim-notice benchmark: how fast an idle agent notices a claim, and what an idle agent costs in
// requests, for the seeds' design (poll: GetItem every 250 ms) and runnerpool's (imds-tags: the wake tag
// through IMDS every 50 ms, a record read only when it changes, plus one every 30 s).
//
//	go test ./internal/agent -run '^$' -bench BenchmarkClaimNotice -benchtime 100x [-idle-window 60s]
//
// Latency: from just before the control plane's claim write (store.Claim, then wake.Notify for
// imds-tags) until the agent has read a record carrying the new run id (Config.OnRecord). Each
// iteration is a full cycle: claim, the agent registers (a no-op runner), release, the agent confirms.
// Requests: counted by wrappers around the agent's own DynamoDB, EC2 and IMDS clients while the agent
// sits idle for -idle-window with production intervals, then scaled to one hour. IMDS requests are
// reported apart: they stay on the instance, cost nothing and count against no AWS limit.
package agent_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

var idleWindow = flag.Duration("idle-window", 60*time.Second, "BenchmarkClaimNotice: idle time over which requests are counted")

func BenchmarkClaimNotice(b *testing.B) {
	for _, mode := range []agent.NoticeMode{agent.NoticePoll, agent.NoticeIMDSTags} {
		b.Run(string(mode), func(b *testing.B) { benchNotice(b, mode) })
	}
}

// counts are the agent's requests, by kind.
type counts struct{ ddbReads, ddbWrites, ec2, imds atomic.Int64 }

// countingDDB counts the agent's DynamoDB calls.
type countingDDB struct {
	store.DynamoDBAPI
	c *counts
}

func (d countingDDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	d.c.ddbReads.Add(1)
	return d.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (d countingDDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	d.c.ddbReads.Add(1)
	return d.DynamoDBAPI.Query(ctx, in, o...)
}

func (d countingDDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	d.c.ddbWrites.Add(1)
	return d.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (d countingDDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.c.ddbWrites.Add(1)
	return d.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (d countingDDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	d.c.ddbWrites.Add(1)
	return d.DynamoDBAPI.DeleteItem(ctx, in, o...)
}

// countingEC2 counts the agent's EC2 calls.
type countingEC2 struct {
	agent.TerminatorAPI
	c *counts
}

func (e countingEC2) TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, o ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error) {
	e.c.ec2.Add(1)
	return e.TerminatorAPI.TerminateInstances(ctx, in, o...)
}

// countingTransport counts IMDS HTTP requests (token PUTs included).
type countingTransport struct{ c *counts }

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.imds.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// nopRunner registers and removes instantly: the benchmark measures the notice, not GitHub.
type nopRunner struct{}

func (nopRunner) Register(context.Context, store.Credential, string) error { return nil }
func (nopRunner) Run(ctx context.Context) error                            { <-ctx.Done(); return nil }
func (nopRunner) Remove(context.Context, store.Credential) error           { return nil }

var _ runner.Runner = nopRunner{}

// seenRun waits for the agent to read a record with a given run id.
type seenRun struct {
	mu   sync.Mutex
	want string
	ch   chan time.Time
}

func (s *seenRun) expect(run string) <-chan time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.ch = run, make(chan time.Time, 1)
	return s.ch
}

func (s *seenRun) observe(rec store.Instance) {
	at := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.want != "" && rec.RunID == s.want {
		s.ch <- at
		s.want = ""
	}
}

func benchNotice(b *testing.B, mode agent.NoticeMode) {
	e := newEnv(b, envOptions{manual: true})
	db := stacktest.Shared(b).DynamoDB()
	table := e.store.Table()
	id := e.launch()

	var c counts
	seen := &seenRun{}
	cfg := agent.Config{
		Store:     store.New(countingDDB{db, &c}, table),
		EC2:       countingEC2{e.ec2, &c},
		IMDS:      imds.New(imds.Options{Endpoint: e.imdsEndpoint(id), HTTPClient: &http.Client{Transport: countingTransport{&c}}}),
		NewRunner: func(string) (runner.Runner, error) { return nopRunner{}, nil },
		Notice:    mode, StateDir: b.TempDir(), WorkDir: b.TempDir(),
		CredentialWait: 2 * time.Second, OnRecord: seen.observe,
		Logger: slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	defer func() { cancel(); <-done }()

	cp := e.store // the control plane's store (not counted)
	put := func(run string, kind store.CredentialKind) {
		if err := cp.PutCredential(b.Context(), id, store.Credential{Kind: kind, RunID: run, Token: "t-" + run, Labels: []string{run}}); err != nil {
			b.Fatal(err)
		}
	}
	waitSig := func(sig store.Signal, run string) {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if s, err := cp.LastSignal(b.Context(), id); err == nil && s.Signal == sig && s.RunID == run {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.Fatalf("no %s for %s", sig, run)
	}
	release := func(run string, from store.State) {
		put(run, store.CredentialRemoval)
		none := ""
		in, err := cp.Transition(b.Context(), id, store.Change{From: []store.State{from}, To: store.StateIdle, RunID: run, SetRunID: &none,
			Threshold: time.Now().Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		e.notify(in)
		waitSig(store.SignalReleased, run)
	}

	// Boot into the pool: created for a first run, registered, running, released to idle.
	put("boot", store.CredentialRegistration)
	if _, err := cp.Create(b.Context(), store.Instance{ID: id, State: store.StateCreated, RunID: "boot", Threshold: time.Now().Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	waitSig(store.SignalRegistered, "boot")
	if _, err := cp.Transition(b.Context(), id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: "boot"}); err != nil {
		b.Fatal(err)
	}
	release("boot", store.StateRunning)

	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		run := fmt.Sprintf("run-%d", i)
		put(run, store.CredentialRegistration)
		// Spread the claims evenly over a 250 ms period: each cycle ends right after one of the agent's
		// reads, so without this every claim would land at the same phase of its polling.
		time.Sleep(time.Duration(i*37%250) * time.Millisecond)
		ch := seen.expect(run)
		start := time.Now()
		in, err := cp.Claim(b.Context(), id, run, time.Now().Add(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if mode == agent.NoticeIMDSTags {
			e.notify(in)
		}
		select {
		case at := <-ch:
			lat = append(lat, at.Sub(start))
		case <-time.After(time.Minute):
			b.Fatalf("claim %s never noticed", run)
		}
		waitSig(store.SignalRegistered, run)
		release(run, store.StateClaimed)
	}
	slices.Sort(lat)
	pct := func(p int) float64 {
		return float64(lat[min(len(lat)-1, len(lat)*p/100)]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(50), "p50_ms")
	b.ReportMetric(pct(99), "p99_ms")
	b.ReportMetric(0, "ns/op")

	// Idle: count what the agent does on its own for the window, then scale to an hour.
	time.Sleep(time.Second) // let the last cycle's reads settle
	c.ddbReads.Store(0)
	c.ddbWrites.Store(0)
	c.ec2.Store(0)
	c.imds.Store(0)
	time.Sleep(*idleWindow)
	perHour := func(n int64) float64 { return float64(n) * float64(time.Hour) / float64(*idleWindow) }
	reads, writes, ec2n := c.ddbReads.Load(), c.ddbWrites.Load(), c.ec2.Load()
	b.ReportMetric(perHour(reads), "ddb_reads_per_idle_hour")
	b.ReportMetric(perHour(writes), "ddb_writes_per_idle_hour")
	b.ReportMetric(perHour(reads+writes+ec2n), "aws_requests_per_idle_hour")
	b.ReportMetric(perHour(c.imds.Load()), "imds_requests_per_idle_hour")
}
