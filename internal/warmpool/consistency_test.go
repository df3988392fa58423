// Warm-pool scale-in of instances EC2 does not show yet (the EC2 server's ConsistencyDelay).
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

// TestScaleInOfWarmingInstancesEC2DoesNotShowYet: a pool's target drops while the instances just
// launched for it are warming and EC2's API does not show them yet. TerminateInstances answers
// NotFound, which EC2 says does not mean they are terminated: their records stay terminating
// while they run (they are not reported gone), and refresh, once EC2 shows them, terminates them
// and ends their records. No instance is left running without a live record.
func TestScaleInOfWarmingInstancesEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.ec2srv.SetConsistencyDelay(time.Hour)
	tg := &targets{}
	tg.set(e.spec("young", 0, 2, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	created := poolReport(t, pass(t, c), "young").Created
	if len(created) != 2 {
		t.Fatalf("created %v, want 2", created)
	}
	slices.Sort(created)

	tg.set(e.spec("young", 0, 0, "v1-a"))
	pr := poolReport(t, pass(t, c), "young")
	if len(pr.Excess) != 0 {
		t.Errorf("excess reported gone: %v; want none while EC2 does not show them", pr.Excess)
	}
	for _, id := range created {
		rec, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != store.StateTerminating || e.ec2State(t, id) != "running" {
			t.Errorf("%s: record %s, EC2 %s; want terminating and running", id, rec.State, e.ec2State(t, id))
		}
	}

	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.ghURL, Token: e.gh.PAT(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e.ec2srv.MakeVisible()
	rep, err := refresh.New(e.st, e.ec2, gh, pool.StaticResolver{}, refresh.Options{
		DeploymentID: deployment, Scopes: []string{"acme"}, Queues: []*pool.Queue{e.queue}, SQS: e.sqs, Now: e.clock.Now, Logger: quiet,
	}).Run(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if !slices.Equal(rep.Expiry.Terminated, created) {
		t.Errorf("refresh terminated %v, want %v", rep.Expiry.Terminated, created)
	}
	for _, id := range created {
		rec, err := e.st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st := e.ec2State(t, id); rec.State != store.StateTerminated || (st != "terminated" && st != "shutting-down") {
			t.Errorf("%s after refresh: record %s, EC2 %s; want both terminated", id, rec.State, st)
		}
	}
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
	ctx := t.Context()
	e.ec2srv.SetConsistencyDelay(time.Hour)
	tg := &targets{}
	tg.set(e.spec("cold", 0, 1, "v1-a"))
	c := e.converger(t, tg.get, poolsize.Options{})
	created := poolReport(t, pass(t, c), "cold").Created
	if len(created) != 1 {
		t.Fatalf("created %v, want 1", created)
	}
	id := created[0]
	// noneUnrecorded checks that every instance EC2 runs has a live record, and that no record
	// is ended while its instance runs.
	noneUnrecorded := func(when string) {
		t.Helper()
		for _, v := range e.ec2srv.Instances() {
			if v.State != "running" && v.State != "pending" && v.State != "stopped" {
				continue
			}
			if rec, err := e.st.Get(ctx, v.ID); err != nil || !rec.State.Live() {
				t.Errorf("%s: %s is %s in EC2 with record %s (err %v); want a live record", when, v.ID, v.State, rec.State, err)
			}
		}
	}

	e.warmUp(t, "cold", nil, nil)
	e.clock.Add(30 * time.Second)
	pr := poolReport(t, pass(t, c), "cold")
	if pr.StopCalls == 0 || len(pr.StoppedNow) != 0 || len(pr.Excess) != 0 {
		t.Errorf("stop calls %d, stopped %v, excess gone %v; want a refused stop and nothing gone while EC2 does not show %s", pr.StopCalls, pr.StoppedNow, pr.Excess, id)
	}
	rec, err := e.st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != store.StateTerminating || e.ec2State(t, id) != "running" {
		t.Errorf("%s: record %s, EC2 %s; want terminating and running", id, rec.State, e.ec2State(t, id))
	}
	noneUnrecorded("after the refused stop")

	gh, err := ghaccess.New(ghaccess.Config{APIURL: e.ghURL, Token: e.gh.PAT(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e.ec2srv.MakeVisible(id)
	rep, err := refresh.New(e.st, e.ec2, gh, pool.StaticResolver{}, refresh.Options{
		DeploymentID: deployment, Scopes: []string{"acme"}, Queues: []*pool.Queue{e.queue}, SQS: e.sqs, Now: e.clock.Now, Logger: quiet,
	}).Run(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if !slices.Contains(rep.Expiry.Terminated, id) {
		t.Errorf("refresh terminated %v, want %s among them", rep.Expiry.Terminated, id)
	}
	if rec, err = e.st.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := e.ec2State(t, id); rec.State != store.StateTerminated || (st != "terminated" && st != "shutting-down") {
		t.Errorf("%s after refresh: record %s, EC2 %s; want both terminated", id, rec.State, st)
	}
	noneUnrecorded("after refresh")
}
