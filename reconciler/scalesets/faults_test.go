//go:build faults

package scalesets_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestFaultListenerKill is `make faults`' scale-set step: the replica holding a scale set's
// session is killed at a random call to the Actions service or the job queue (before the call, or
// after it took effect with its answer lost), with jobs queued before and after the crash. The
// other replica takes over; the pool worker serves from the warm pool. Judged per run: every job
// served exactly once, no instance of the pool terminated (all were healthy), no job left queued,
// and the invariant checker finds nothing on the whole deployment. FAULTS_RUNS sets the runs
// (default 20), FAULTS_SEED the kill points.
func TestFaultListenerKill(t *testing.T) {
	runs := 20
	if s := os.Getenv("FAULTS_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FAULTS_RUNS=%q: want a positive number", s)
		}
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FAULTS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("scale-set-listener: FAULTS_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var mu sync.Mutex
	ok, healthyTerminated, stuck, crashed := 0, 0, 0, 0
	t.Run("runs", func(t *testing.T) {
		for i := range runs {
			at := 1 + rng.Int64N(12)
			shape := allShapes[i%2] // both shapes of the Actions service, alternately
			t.Run(fmt.Sprintf("run_%d_%s_call_%d", i+1, shape, at), func(t *testing.T) {
				t.Parallel()
				res := listenerKillRun(t, shape, at)
				mu.Lock()
				defer mu.Unlock()
				healthyTerminated += res.terminated
				stuck += res.stuck
				if res.crashed {
					crashed++
				}
				if !t.Failed() {
					ok++
				}
			})
		}
	})
	fmt.Printf("faults: step=scale-set-listener runs=%d ok=%d healthy_terminated=%d stuck_runs=%d crashed=%d\n",
		runs, ok, healthyTerminated, stuck, crashed)
	if crashed < runs/2 {
		t.Errorf("only %d of %d runs crashed the holder: the kill points miss the listener's calls", crashed, runs)
	}
}

type killResult struct {
	terminated, stuck int
	crashed           bool
}

func listenerKillRun(t *testing.T, shape githubfake.ScaleSetShape, at int64) killResult {
	e := newEnv(t, shape)
	pool := e.warm(t, store.StateReady, 4)
	cc, b, ids := e.crashThenTakeOver(t, at, 900)
	held := map[string][]string{}
	served := e.serveAll(t, e.worker(t, b.m), ids, func(s pooljob.Served) {
		if rec, err := e.st.Get(t.Context(), s.InstanceID); err == nil {
			held[rec.RunID] = append(held[rec.RunID], s.InstanceID)
		}
	})
	var res killResult
	res.crashed = cc.calls.Load() >= at
	for _, id := range ids {
		if served[id] != 1 {
			t.Errorf("job %d served %d times, want once", id, served[id])
		}
		if st := e.ledger(t, id); st != warmpool.JobServed {
			res.stuck++
			t.Errorf("job %d: ledger %q after serving, want served", id, st)
		}
	}
	for _, in := range pool {
		if rec, err := e.st.Get(t.Context(), in.ID); err == nil && !rec.State.Live() {
			res.terminated++
			t.Errorf("healthy instance %s ended: %s (%s)", in.ID, rec.State, rec.Reason)
		}
	}
	rep, err := invariant.Check(t.Context(), e.st, e.ec2, invariant.Options{DeploymentID: deployment, Held: held})
	if err != nil {
		t.Errorf("invariant check: %v", err)
	} else if !rep.OK() {
		t.Errorf("invariants: %s", rep.Summary())
	} else if len(rep.Instances) < len(pool) || len(rep.Records) < len(pool) {
		t.Errorf("the checker saw %d instances and %d records, want the pool's %d: it judged nothing", len(rep.Instances), len(rep.Records), len(pool))
	}
	return res
}
