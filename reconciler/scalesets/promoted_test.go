package scalesets_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// promotingStore is the state table as the pool worker sees it, with a convergence pass racing the
// completion: once armed, the first read of the instance finds it claimed, and the pass promotes
// it to running (its agent registered for the same run) before the worker writes.
type promotingStore struct {
	*store.Store
	mu    sync.Mutex
	armed string // the instance whose next read races
	raced bool
}

func (p *promotingStore) arm(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = id
}

func (p *promotingStore) Get(ctx context.Context, id string) (store.Instance, error) {
	rec, err := p.Store.Get(ctx, id)
	p.mu.Lock()
	race := err == nil && id == p.armed && !p.raced && rec.State == store.StateClaimed
	p.raced = p.raced || race
	p.mu.Unlock()
	if race {
		if _, err := p.Store.Transition(ctx, id, store.Change{
			From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: rec.RunID,
			Threshold: time.Now().Add(6 * time.Hour), Reason: "registered for " + rec.RunID,
		}); err != nil {
			return store.Instance{}, err
		}
	}
	return rec, err // as read: claimed
}

// TestCompletionEndsInstancePromotedMeanwhile: a job shorter than a convergence pass completes
// while its instance's record is still claimed, and the pass promotes the record to running (same
// run) between the completion's read and its write. The completion still ends the instance. Before,
// its write was conditional on the state read: it lost the race, the completion was deleted as
// handled, and the instance (its ephemeral runner gone, its agent restarting it every 30 s) ran
// until the running deadline the promotion gave it, the pool's max runtime (6 h by default): the
// bench's scale set phase, 1 run in 3 on a loaded machine.
func TestCompletionEndsInstancePromotedMeanwhile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.replica(t, "a")
	ps := &promotingStore{Store: e.st}
	w := e.workerOver(t, r.m, ps)
	hot := e.warm(t, store.StateReady, 1)[0]
	eventually(t, "a session", func() bool { return e.sessionOwner() == "a" })

	id := e.gh.QueueScaleSetJob(org, "api", 700, setName)
	served := onceUntil(t, w, func(rep pooljob.BatchReport) bool { return len(rep.Served) == 1 }).Served[0]
	if served.InstanceID != hot.ID {
		t.Fatalf("served %+v, want the hot instance %s", served, hot.ID)
	}
	st, _ := e.gh.ScaleSet(org, setName)
	run := warmpool.Job{JobID: served.JobID, ScaleSet: setName, ScaleSetID: st.ID, ScaleSetScope: org, ScaleSetJob: githubfake.ScaleSetJobID(id)}.RunKey()
	cred, err := e.st.ReadCredential(t.Context(), hot.ID, store.CredentialRegistration, run)
	if err != nil {
		t.Fatalf("the hot instance's credential: %v", err)
	}
	// Its agent's runner registers with the JIT configuration and runs the job at once.
	fr, err := fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: t.TempDir(), WorkDir: t.TempDir(), JobDuration: 10 * time.Millisecond, PollWait: 2 * time.Second, Logger: logger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fr.Register(t.Context(), cred, warmpool.RunnerName(hot.ID)); err != nil {
		t.Fatal(err)
	}
	rctx, stopRunner := context.WithCancel(t.Context())
	defer stopRunner()
	go func() { _ = fr.Run(rctx) }()
	eventually(t, "the job completed at GitHub", func() bool { j, _ := e.gh.Job(id); return j.Status == githubfake.JobCompleted })
	if rec, _ := e.st.Get(t.Context(), hot.ID); rec.State != store.StateClaimed {
		t.Fatalf("instance %s before the completion: %s, want claimed (no pass promoted it yet)", hot.ID, rec.State)
	}

	ps.arm(hot.ID)
	onceUntil(t, w, func(rep pooljob.BatchReport) bool { return len(rep.Completed) > 0 })
	rec, err := e.st.Get(t.Context(), hot.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !ps.raced {
		t.Fatal("the completion never read the instance: the race was not played")
	}
	if rec.State.Live() && rec.State != store.StateTerminating {
		t.Errorf("instance after its job completed: %s until %s, want ended", rec.State, rec.Threshold.Format(time.RFC3339))
	}
}
