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
