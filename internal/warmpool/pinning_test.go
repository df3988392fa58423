// Pinning in the warm pools (issue #28 item 6). A cold-started pool-job instance is pinned too: its
// agent's first self-signed report, the boot report written before any registration, pins its key,
// so a registration a job forged afterwards does not promote it (the old convergence promoted it on
// any signal). No instance is made hot, handed a job or promoted without its agent's key pinned, and
// the worker pins a cold start's key within a poll, since its agent starts the runner only then.
package warmpool_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// coldJobInstance launches the overflow's cold start for job 500 of pool "cold": created for the
// job, in the pool, no key pinned.
func (e *env) coldJobInstance(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	ro, err := e.ec2Client().RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large",
		SubnetId: aws.String(subnetA), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(ro.Instances[0].InstanceId)
	if _, err := e.st.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: warmpool.JobRunPrefix + "500",
		Threshold: e.clock.Now().Add(10 * time.Minute), UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096,
		RunnerClass: runnerClass, Pool: "cold", Scope: "acme", Zone: "us-east-1a", SpecHash: "v1-a"}); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestConvergePinsColdStartedJobInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("cold", 0, 0, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	ctx := t.Context()
	id := e.coldJobInstance(t)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	boot := store.SignalRecord{Signal: store.SignalPreRunnerOK}
	boot.Sign(id, key, e.clock.Now())
	if err := e.st.PutSignal(ctx, id, boot); err != nil {
		t.Fatal(err)
	}
	pass(t, c)
	if rec, err := e.st.Get(ctx, id); err != nil || rec.AgentKey != boot.Key {
		t.Fatalf("agent key after the boot report %q, %v; want the signing key pinned", rec.AgentKey, err)
	}
	if err := e.st.PutSignal(ctx, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "500", Detail: "forged"}); err != nil {
		t.Fatal(err)
	}
	if pr := poolReport(t, pass(t, c), "cold"); len(pr.Promoted) != 0 {
		t.Fatalf("promoted %v on a forged, unsigned registration", pr.Promoted)
	}
	reg := store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "500"}
	reg.Sign(id, key, e.clock.Now())
	if err := e.st.PutSignal(ctx, id, reg); err != nil {
		t.Fatal(err)
	}
	if pr := poolReport(t, pass(t, c), "cold"); !slices.Equal(pr.Promoted, []string{id}) {
		t.Errorf("promoted %v on the agent's signed registration, want %s", pr.Promoted, id)
	}
}

// agentKey is the signing key of instance id's played agent, made at its first use.
func (e *env) agentKey(t testing.TB, id string) ed25519.PrivateKey {
	t.Helper()
	k, ok := e.keys.Load(id)
	if !ok {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k, _ = e.keys.LoadOrStore(id, key)
	}
	return k.(ed25519.PrivateKey)
}

// pinKey pins the key of instance id's played agent in its record, as its warm-up does.
func (e *env) pinKey(t testing.TB, id string) {
	t.Helper()
	pub := e.agentKey(t, id).Public().(ed25519.PublicKey)
	if err := e.st.PinAgentKey(context.Background(), id, base64.StdEncoding.EncodeToString(pub)); err != nil {
		t.Errorf("PinAgentKey %s: %v", id, err)
	}
}

// agentSignal writes sig as instance id's agent does: signed with the instance's own key (made at
// its first signal), dated sig.At (the test's clock when zero).
func (e *env) agentSignal(t testing.TB, id string, sig store.SignalRecord) {
	t.Helper()
	if sig.At.IsZero() {
		sig.At = e.clock.Now()
	}
	sig.Sign(id, e.agentKey(t, id), sig.At)
	if err := e.st.PutSignal(context.Background(), id, sig); err != nil {
		t.Fatalf("PutSignal %s %s: %v", id, sig.Signal, err)
	}
}

// TestConvergePoolsOnlyPinnedWarmUps: a warm-up report that pins no key (unsigned: no agent since
// signing writes one) does not make its instance hot, so no job is handed to an instance whose agent
// would not start its runner (agent/pin.go) or whose later reports nothing attributes. The old
// convergence believed it while no key was pinned and pooled the instance.
func TestConvergePoolsOnlyPinnedWarmUps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("pinned", 2, 0, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	ctx := t.Context()
	pass(t, c)
	warming := e.records(t, "pinned")[store.StateWarming]
	if len(warming) != 2 {
		t.Fatalf("warming %d instances, want 2", len(warming))
	}
	signed, unsigned := warming[0].ID, warming[1].ID
	e.agentSignal(t, signed, store.SignalRecord{Signal: store.SignalPreRunnerOK})
	if err := e.st.PutSignal(ctx, unsigned, store.SignalRecord{Signal: store.SignalPreRunnerOK, At: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	pr := poolReport(t, pass(t, c), "pinned")
	if !slices.Equal(pr.Readied, []string{signed}) || !slices.Contains(pr.Errored, unsigned) {
		t.Fatalf("readied %v, errored %v; want only %s hot and %s out", pr.Readied, pr.Errored, signed, unsigned)
	}
	for _, in := range e.records(t, "pinned")[store.StateReady] {
		if in.AgentKey == "" {
			t.Errorf("hot instance %s has no pinned key", in.ID)
		}
	}
}

// TestWorkerHandsJobsOnlyToPinnedInstances: a hot instance whose record pins no key (written before
// its agent's key could be pinned) is not handed a pool job; the job is cold-started, and the worker
// pins the cold start's key at its agent's first signed report, within a poll rather than at the next
// convergence pass, so its agent starts the runner soon. The old worker claimed the unpinned instance,
// and nothing pinned a cold start's key before convergence.
func TestWorkerHandsJobsOnlyToPinnedInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	spec := e.spec("solo", 1, 0, "v1-solo")
	legacy := e.warmWith(t, spec, store.StateReady, 1, false)
	tg := &targets{}
	tg.set(spec)
	catalog := warmpool.NewCatalog(tg.get, time.Nanosecond, nil)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	sender := e.hook(t, catalog, jobs)
	w := e.worker(t, catalog, jobs)
	queueJob(t, e, sender, 1, "pool=solo")
	// Served under the test's context, which outlives the batch as a serving worker's does.
	var got []pooljob.Served
	for deadline := time.Now().Add(20 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
		rep, err := w.Once(ctx)
		if err != nil {
			t.Logf("Once: %v", err)
		}
		got = append(got, rep.Served...)
	}
	if len(got) != 1 || got[0].Source != warmpool.SourceCreated || got[0].InstanceID == legacy[0].ID {
		t.Fatalf("served %+v; want the job cold-started, not on the unpinned hot instance %s", got, legacy[0].ID)
	}
	if rec, err := e.st.Get(ctx, legacy[0].ID); err != nil || rec.State != store.StateReady {
		t.Errorf("unpinned hot instance: %+v (err %v), want still ready", rec, err)
	}
	cold := got[0].InstanceID
	e.agentSignal(t, cold, store.SignalRecord{Signal: store.SignalPreRunnerOK})
	want := base64.StdEncoding.EncodeToString(e.agentKey(t, cold).Public().(ed25519.PublicKey))
	deadline := time.Now().Add(15 * time.Second)
	for {
		rec, err := e.st.Get(ctx, cold)
		if err == nil && rec.AgentKey == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cold start %s: agent key %q (err %v), want its agent's pinned without a convergence pass", cold, rec.AgentKey, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConvergePromotesNoUnpinnedRegistration: a cold-started job instance whose first report is an
// unsigned registration (a job's, written while no key was pinned) is not promoted: a registration
// counts only signed by a pinned key. The old convergence believed any report while no key was
// pinned.
func TestConvergePromotesNoUnpinnedRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := &targets{}
	tg.set(e.spec("cold", 0, 0, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	id := e.coldJobInstance(t)
	forged := store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "500", At: e.clock.Now()}
	if err := e.st.PutSignal(t.Context(), id, forged); err != nil {
		t.Fatal(err)
	}
	if pr := poolReport(t, pass(t, c), "cold"); len(pr.Promoted) != 0 {
		t.Fatalf("promoted %v on an unsigned registration with no key pinned", pr.Promoted)
	}
	e.agentSignal(t, id, store.SignalRecord{Signal: store.SignalRegistered, RunID: warmpool.JobRunPrefix + "500"})
	if pr := poolReport(t, pass(t, c), "cold"); !slices.Equal(pr.Promoted, []string{id}) {
		t.Errorf("promoted %v on the agent's signed registration, want %s", pr.Promoted, id)
	}
}
