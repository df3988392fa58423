package scalesets_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/stack/githubfake"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func onceUntil(t *testing.T, w *warmpool.Worker, ok func(warmpool.BatchReport) bool) warmpool.BatchReport {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		rep, err := w.Once(t.Context())
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("Once: %v", err)
		}
		if ok(rep) {
			return rep
		}
	}
	t.Fatal("no batch came as expected")
	return warmpool.BatchReport{}
}

// TestScaleSetJobsServedFromThePool: scale set jobs go through the pool worker like webhook jobs:
// the hot instance first, then the stopped one (started), then a cold start; each gets a JIT runner
// of the scale set. The hot instance's agent registers with it and its runner takes a job of the
// scale set; JobCompleted ends the instance through the completion path, and the capacity the
// listener announces counts the instances serving the scale set.
func TestScaleSetJobsServedFromThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(t, "a")
	w := e.worker(t, r.m)
	hot := e.warm(t, store.StateReady, 1)
	stopped := e.warm(t, store.StateStopped, 1)
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })

	var ids []int64
	for i := range 3 {
		ids = append(ids, e.gh.QueueScaleSetJob(org, "api", int64(600+i), setName))
	}
	bySource := map[string]warmpool.Served{}
	for deadline := time.Now().Add(30 * time.Second); len(bySource) < 3 && time.Now().Before(deadline); {
		rep, err := w.Once(t.Context())
		if err != nil {
			t.Logf("Once: %v", err)
		}
		for _, s := range rep.Served {
			bySource[s.Source] = s
		}
	}
	if bySource[warmpool.SourceHot].InstanceID != hot[0].ID || bySource[warmpool.SourceStarted].InstanceID != stopped[0].ID || bySource[warmpool.SourceCreated].InstanceID == "" {
		t.Fatalf("served %+v: want the hot instance, then the stopped one, then a cold start", bySource)
	}
	eventually(t, "the capacity announced to count the three instances", func() bool {
		st, _ := e.gh.ScaleSet(org, setName)
		return st.MaxCapacity == e.set.MaxRunners-3
	})

	// The hot instance's agent: its credential is a JIT configuration of the scale set.
	served := bySource[warmpool.SourceHot]
	st, _ := e.gh.ScaleSet(org, setName)
	run := warmpool.Job{JobID: served.JobID, ScaleSet: setName, ScaleSetID: st.ID, ScaleSetScope: org}.RunKey()
	cred, err := e.st.ReadCredential(t.Context(), hot[0].ID, store.CredentialRegistration, run)
	if err != nil || !cred.JIT {
		t.Fatalf("hot instance's credential %+v, %v: want a JIT configuration for %s", cred, err, run)
	}
	rc := githubfake.NewRunnerClient(e.ghURL, nil)
	reg, err := rc.Register(t.Context(), githubfake.RegisterOptions{JITConfig: cred.Token})
	if err != nil || reg.Name != warmpool.RunnerName(hot[0].ID) {
		t.Fatalf("register with the scale set's JIT config: %+v, %v", reg, err)
	}
	if err := rc.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	job, err := rc.NextJob(t.Context(), 10*time.Second)
	if err != nil || job == nil {
		t.Fatalf("the scale set runner got no job: %v", err)
	}
	if err := rc.Complete(t.Context(), job.ID, "success"); err != nil {
		t.Fatal(err)
	}
	// JobCompleted names the hot instance's runner: the worker ends it (no recycling in this pool).
	onceUntil(t, w, func(r warmpool.BatchReport) bool { return len(r.Completed) > 0 })
	if rec, _ := e.st.Get(t.Context(), hot[0].ID); rec.State != store.StateTerminated {
		t.Errorf("hot instance after its job completed: %s, want terminated", rec.State)
	}
	if got := e.ledger(t, job.ID); got != warmpool.JobCompleted {
		t.Errorf("ledger of the completed job %d: %q", job.ID, got)
	}
}
