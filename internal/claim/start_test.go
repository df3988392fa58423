// Stopped warm instances: claimed conditionally (two starters never take the same one), started with
// one StartInstances per 50, a refused batch retried one by one, an instance still stopping waited
// for; and hot (ready) instances claimed from the pool like idle ones.
package claim_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

// warm launches n instances and records them as warm-pool instances in state (stopped ones are
// stopped in EC2; wait says whether to wait until EC2 reports them stopped).
func (e *env) warm(t testing.TB, n int, state store.State, wait bool) []store.Instance {
	t.Helper()
	ctx := context.Background()
	out, err := e.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: ec2types.InstanceTypeC6iLarge,
		MinCount: aws.Int32(int32(n)), MaxCount: aws.Int32(int32(n)),
	})
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	recs := make([]store.Instance, len(out.Instances))
	var wg sync.WaitGroup
	for i, inst := range out.Instances {
		wg.Go(func() {
			id := aws.ToString(inst.InstanceId)
			if _, err := e.st.Create(ctx, store.Instance{
				ID: id, State: store.StateWarming, Threshold: time.Now().Add(time.Hour), UsageClass: "on-demand",
				InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "linux", Pool: "p", Scope: "acme", Zone: "us-east-1a",
			}); err != nil {
				t.Errorf("Create: %v", err)
				return
			}
			// A hot instance warms up into its pool, marked pooled (poolsize.Converger does the same).
			rec, err := e.st.Transition(ctx, id, store.Change{From: []store.State{store.StateWarming}, To: state, Threshold: time.Now().Add(time.Hour).Truncate(time.Second), MarkPooled: state == store.StateReady})
			if err != nil {
				t.Errorf("to %s: %v", state, err)
			}
			recs[i] = rec
		})
	}
	wg.Wait()
	if state == store.StateStopped {
		var all []string
		for _, r := range recs {
			all = append(all, r.ID)
		}
		for chunk := range slices.Chunk(all, 50) {
			if _, err := e.ec2.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: chunk}); err != nil {
				t.Fatalf("StopInstances: %v", err)
			}
		}
		for _, id := range all {
			for v, _ := e.ec2srv.Instance(id); wait && v.State != "stopped"; v, _ = e.ec2srv.Instance(id) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return recs
}

// countingStart counts StartInstances calls and their ids.
type countingStart struct {
	claim.StartAPI
	mu    sync.Mutex
	calls []int
}

func (c *countingStart) StartInstances(ctx context.Context, in *ec2.StartInstancesInput, o ...func(*ec2.Options)) (*ec2.StartInstancesOutput, error) {
	c.mu.Lock()
	c.calls = append(c.calls, len(in.InstanceIds))
	c.mu.Unlock()
	return c.StartAPI.StartInstances(ctx, in, o...)
}

func runs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestClaimAndStartRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cands := e.warm(t, 55, store.StateStopped, true)
	opts := testOptions()
	results := make([]claim.StartResult, 2)
	starts := make([]*countingStart, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		starts[i] = &countingStart{StartAPI: e.ec2}
		_, reg := e.claimer(opts)
		s := claim.NewStarter(e.st, starts[i], reg, opts)
		wg.Go(func() {
			var err error
			results[i], err = s.ClaimAndStart(t.Context(), cands, runs(fmt.Sprintf("run%d", i), 30), time.Now().Add(5*time.Minute))
			if err != nil {
				t.Errorf("starter %d: %v", i, err)
			}
		})
	}
	wg.Wait()

	owner := map[string]string{}
	total, unserved := 0, 0
	for i, res := range results {
		for _, in := range res.Started {
			if prev, dup := owner[in.ID]; dup {
				t.Errorf("instance %s claimed by %s and %s", in.ID, prev, in.RunID)
			}
			owner[in.ID] = in.RunID
			if rec := e.record(t, in.ID); rec.State != store.StateClaimed || rec.RunID != in.RunID {
				t.Errorf("record of %s: %s run %q", in.ID, rec.State, rec.RunID)
			}
			if v, _ := e.ec2srv.Instance(in.ID); v.State != "running" && v.State != "pending" {
				t.Errorf("started %s is %s", in.ID, v.State)
			}
		}
		total += len(res.Started)
		unserved += len(res.Unserved)
		if want := (len(res.Started) + 49) / 50; len(starts[i].calls) != want || res.StartCalls != want {
			t.Errorf("starter %d started %d with calls %v (reported %d), want %d", i, len(res.Started), starts[i].calls, res.StartCalls, want)
		}
	}
	if total != 55 || unserved != 5 {
		t.Errorf("started %d, unserved %d; want 55 and 5", total, unserved)
	}
}

func TestClaimAndStartFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	opts := testOptions()
	opts.StartWait = time.Second
	_, reg := e.claimer(opts)
	api := &countingStart{StartAPI: e.ec2}
	s := claim.NewStarter(e.st, api, reg, opts)

	// One of four was terminated behind the table's back: the batch is refused, the others start.
	cands := e.warm(t, 4, store.StateStopped, true)
	if _, err := e.ec2.TerminateInstances(t.Context(), &ec2.TerminateInstancesInput{InstanceIds: []string{cands[2].ID}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimAndStart(t.Context(), cands, runs("bad", 4), time.Now().Add(5*time.Minute))
	if err != nil {
		t.Fatalf("ClaimAndStart: %v", err)
	}
	if len(res.Started) != 3 || len(res.StartFailed) != 1 || len(res.Discarded) != 1 || res.Discarded[0].InstanceID != cands[2].ID {
		t.Fatalf("result %+v; want 3 started and the terminated one discarded", res)
	}
	if rec := e.record(t, cands[2].ID); rec.State != store.StateTerminated {
		t.Errorf("discarded record %s", rec.State)
	}

	// An instance still stopping is waited for rather than given up.
	stopping := e.warm(t, 1, store.StateStopped, false)
	if v, _ := e.ec2srv.Instance(stopping[0].ID); v.State != "stopping" {
		t.Fatalf("instance is %s, want stopping", v.State)
	}
	res, err = s.ClaimAndStart(t.Context(), stopping, runs("slow", 1), time.Now().Add(5*time.Minute))
	if err != nil || len(res.Started) != 1 || res.StartCalls < 2 {
		t.Fatalf("stopping instance: %+v, %v; want started after retries", res, err)
	}

	// Nothing left: every run is unserved, and a claimed record is never taken again.
	res, err = s.ClaimAndStart(t.Context(), cands, runs("late", 2), time.Now().Add(5*time.Minute))
	if err != nil || len(res.Started) != 0 || len(res.Unserved) != 2 || res.Lost != 4 || res.StartCalls != 0 {
		t.Errorf("exhausted: %+v, %v", res, err)
	}
}

// A hot warm-pool instance (ready, announced in the pool) is claimed like an idle one.
func TestClaimNTakesHotInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hot := e.warm(t, 2, store.StateReady, false)
	for _, in := range hot {
		if err := e.q.Put(t.Context(), claim.MessageOf(in), 0); err != nil {
			t.Fatal(err)
		}
	}
	e.agents(t, nil, hot, claimtest.Behaviour{})
	c, _ := e.claimer(testOptions())
	run := runID("hot")
	res, err := c.ClaimN(t.Context(), claim.Request{
		RunID: run, Scope: "acme/api", Count: 2, Queue: e.q,
		Filter: pool.Filter{UsageClass: "on-demand", MinCPU: 2, Scope: "acme/api"},
	})
	if err != nil || len(res.Claimed) != 2 {
		t.Fatalf("ClaimN = %+v, %v; want both hot instances", res, err)
	}
	for _, cl := range res.Claimed {
		if rec := e.record(t, cl.Instance.ID); rec.State != store.StateClaimed || rec.RunID != run || rec.Pool != "p" {
			t.Errorf("record %+v", rec)
		}
	}
}
