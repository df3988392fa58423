// Worker.Serve: the pool worker as a service runs it, with a graceful stop.
package warmpool_test

import (
	"context"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// TestServeStops: Serve serves jobs until stop ends; then it returns without waiting out its long
// poll (20 s here), while the work context, which would cut a batch short, was never cancelled.
func TestServeStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec("solo", 1, 0, "v1-solo")
	hot := e.warm(t, spec, store.StateReady, 1)
	catalog := warmpool.NewCatalog(warmpool.StaticTargets(spec), time.Minute, e.clock.Now)
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	gh := e.github(t)
	copts := claim.Options{Logger: quiet, Now: e.clock.Now}
	reg := claim.NewRegistrar(e.st, gh, e.calls, copts)
	w, err := pooljob.NewWorker(pooljob.WorkerConfig{
		Store: e.st, EC2: e.calls, Fleet: fleet.New(e.calls, fleet.Options{Logger: quiet}), Starter: claim.NewStarter(e.st, e.calls, reg, copts),
		Discarder: reg, GitHub: gh, Jobs: jobs, Pools: catalog, DeploymentID: deployment,
		WaitTime: 20 * time.Second, Now: e.clock.Now, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop, stopNow := context.WithCancel(t.Context())
	work, cancelWork := context.WithCancel(t.Context())
	defer cancelWork()
	done := make(chan error, 1)
	go func() { done <- w.Serve(stop, work) }()

	j := warmpool.Job{Action: warmpool.ActionQueued, JobID: 901, RunID: 902, Repository: "acme/api", Labels: []string{"pool=solo"}, Pool: "solo"}
	if _, err := jobs.Enqueue(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		run, err := e.st.GetRun(t.Context(), "pooljob:901")
		if err == nil && run.Status == warmpool.JobServed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not served by the running worker: %+v, %v", run, err)
		}
	}
	if rec, err := e.st.Get(t.Context(), hot[0].ID); err != nil || rec.RunID != j.RunKey() {
		t.Errorf("hot instance %+v, %v: want it claimed for %s", rec, err, j.RunKey())
	}

	// Idle in a 20 s long poll: stopping returns at once, not after the poll.
	stopNow()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after stop: it waited out its long poll")
	}
	if work.Err() != nil {
		t.Errorf("the work context was cancelled")
	}
}
