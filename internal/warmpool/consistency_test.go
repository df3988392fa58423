// Warm-pool scale-in and stops of instances EC2 does not show yet (the EC2 server's ConsistencyDelay).
package warmpool_test

import (
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// unseenPool turns the EC2 server's ConsistencyDelay on and creates pool name (hot 0, stopped
// as given) with one pass: the instances it returns (sorted) run while EC2 does not show them.
func unseenPool(t *testing.T, e *env, name string, stopped int) (*targets, *poolsize.Converger, []string) {
	t.Helper()
	e.ec2srv.SetConsistencyDelay(time.Hour)
	tg := &targets{}
	tg.set(e.spec(name, 0, stopped, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	created := poolReport(t, pass(t, c), name).Created
	if len(created) != stopped {
		t.Fatalf("created %v, want %d", created, stopped)
	}
	slices.Sort(created)
	return tg, c, created
}

// wantStates checks the records of ids and their instances in EC2 (any of ec2States).
func wantStates(t *testing.T, e *env, ids []string, rec store.State, ec2States ...string) {
	t.Helper()
	for _, id := range ids {
		got, err := e.st.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st := e.ec2State(t, id); got.State != rec || !slices.Contains(ec2States, st) {
			t.Errorf("%s: record %s, EC2 %s; want %s and %v", id, got.State, st, rec, ec2States)
		}
	}
}

// refreshShown makes ids visible in EC2's API and runs one refresh pass.
func refreshShown(t *testing.T, e *env, ids ...string) refresh.Report {
	t.Helper()
	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.ghURL, Token: e.gh.PAT(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e.ec2srv.MakeVisible(ids...)
	rep, err := refresh.New(e.st, e.ec2, gh, pool.StaticResolver{}, refresh.Options{
		DeploymentID: deployment, Scopes: []string{"acme"}, Queues: []*pool.Queue{e.queue}, SQS: e.sqs, Now: e.clock.Now, Logger: quiet,
	}).Run(t.Context())
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	return rep
}

// TestScaleInOfWarmingInstancesEC2DoesNotShowYet: a pool's target drops while the instances just
// launched for it are warming and EC2's API does not show them yet. TerminateInstances answers
// NotFound, which EC2 says does not mean they are terminated: their records stay terminating
// while they run (they are not reported gone), and refresh, once EC2 shows them, terminates them
// and ends their records. No instance is left running without a live record.
func TestScaleInOfWarmingInstancesEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg, c, created := unseenPool(t, e, "young", 2)

	tg.set(e.spec("young", 0, 0, "v1-a"))
	pr := poolReport(t, pass(t, c), "young")
	if len(pr.Excess) != 0 {
		t.Errorf("excess reported gone: %v; want none while EC2 does not show them", pr.Excess)
	}
	wantStates(t, e, created, store.StateTerminating, "running")

	rep := refreshShown(t, e)
	if !slices.Equal(rep.Expiry.Terminated, created) {
		t.Errorf("refresh terminated %v, want %v", rep.Expiry.Terminated, created)
	}
	wantStates(t, e, created, store.StateTerminated, "terminated", "shutting-down")
}

// TestStopOfAWarmedInstanceEC2DoesNotShowYet: an instance warms up while EC2's API does not show
// it yet, so the StopInstances that would put it in the stopped pool answers NotFound, which EC2
// says does not mean it is gone. The pool treats it as one EC2 will not stop: its termination
// meets the same NotFound, and its record stays terminating while it runs (it is not reported
// gone). Refresh, once EC2 shows it, terminates it and ends the record. At no point does an
// instance run without a live record, or a record end while its instance runs.
func TestStopOfAWarmedInstanceEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, c, created := unseenPool(t, e, "cold", 1)
	// noneUnrecorded checks that every instance EC2 runs (or holds stopped) has a live record.
	noneUnrecorded := func(when string) {
		t.Helper()
		for _, v := range e.ec2srv.Instances() {
			if v.State != "running" && v.State != "pending" && v.State != "stopped" {
				continue
			}
			if rec, err := e.st.Get(t.Context(), v.ID); err != nil || !rec.State.Live() {
				t.Errorf("%s: %s is %s in EC2 with record %s (err %v); want a live record", when, v.ID, v.State, rec.State, err)
			}
		}
	}

	e.warmUp(t, "cold", nil, nil)
	e.clock.Add(30 * time.Second)
	pr := poolReport(t, pass(t, c), "cold")
	if pr.StopCalls == 0 || len(pr.StoppedNow) != 0 || len(pr.Excess) != 0 {
		t.Errorf("stop calls %d, stopped %v, excess gone %v; want a refused stop and nothing gone while EC2 does not show %v", pr.StopCalls, pr.StoppedNow, pr.Excess, created)
	}
	wantStates(t, e, created, store.StateTerminating, "running")
	noneUnrecorded("after the refused stop")

	rep := refreshShown(t, e, created...)
	if !slices.Contains(rep.Expiry.Terminated, created[0]) {
		t.Errorf("refresh terminated %v, want %s among them", rep.Expiry.Terminated, created[0])
	}
	wantStates(t, e, created, store.StateTerminated, "terminated", "shutting-down")
	noneUnrecorded("after refresh")
}
