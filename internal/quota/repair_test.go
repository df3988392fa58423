package quota_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// A run's reservation whose Settle never landed (12 transaction conflicts on a hot counter, or a
// crash) is pending past its deadline while the run's runners run. It used to be given back whole,
// so the repository could hold twice its limit for the run's lifetime. Repair settles it on the
// run's live records instead, whether it has refresh's listing or reads the run's records itself.
func TestRepairSettlesAPendingRunReservationOnItsLiveRecords(t *testing.T) {
	t.Parallel()
	for _, listed := range []bool{true, false} {
		t.Run(fmt.Sprintf("listing %v", listed), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			if err := e.a.Reserve(ctx, quota.Reservation{ID: "run#a", Run: "run-a", Amount: 3, Deadline: e.clock.Now().Add(time.Minute)}, repoLimit(10)); err != nil {
				t.Fatal(err)
			}
			record(t, e.st, "i-1", "run-a", "std")
			record(t, e.st, "i-2", "run-a", "std")
			record(t, e.st, "i-3", "run-b", "std") // another run's
			e.clock.Advance(2 * time.Minute)
			o := quota.RepairOptions{}
			if listed {
				live, err := e.st.LiveBrief(ctx)
				if err != nil {
					t.Fatal(err)
				}
				o.Live = live
			}
			rep, err := e.b.Repair(ctx, e.st, o)
			if err != nil || rep.Freed != 1 {
				t.Errorf("repair %+v (%v): want 1 unit freed, 2 kept for the run's runners", rep, err)
			}
			if n := counter(t, e.a, quota.RepositoryCounter("42")); n != 2 {
				t.Errorf("repository counter = %d, want 2", n)
			}
			r, err := e.a.Reservation(ctx, "run#a")
			if err != nil || !r.Settled || r.Amount != 2 || strings.Join(r.Instances, ",") != "i-1,i-2" {
				t.Errorf("reservation %+v (%v); want settled on i-1, i-2", r, err)
			}
		})
	}
}

// countingGets counts the GetItem calls of instance records.
type countingGets struct {
	*dynamodb.Client
	n atomic.Int64
}

func (c *countingGets) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.n.Add(1)
	return c.Client.GetItem(ctx, in, o...)
}

// Recounting from refresh's listing reads only what the listing does not show holding, or shows
// changed since (terminated in the same pass): it used to read every reserved instance, one after
// another, every pass (20,000 reads at 20,000 capped instances).
func TestRepairReadsOnlyWhatTheListingShowsChanged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const n = 40
	var ids []string
	for i := range n {
		id := fmt.Sprintf("i-%02d", i)
		record(t, e.st, id, "", "std")
		ids = append(ids, id)
	}
	caps := []quota.Limit{{Kind: quota.LimitDeployment, Counter: quota.DeploymentCounter, Max: 100}}
	if err := e.a.Reserve(ctx, quota.Reservation{ID: "fleet#1", Amount: n, Deadline: e.clock.Now().Add(time.Minute)}, caps); err != nil {
		t.Fatal(err)
	}
	if err := e.a.Settle(ctx, "fleet#1", ids); err != nil {
		t.Fatal(err)
	}
	live, err := e.st.LiveBrief(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The pass terminated one of them after listing it.
	if _, err := e.st.Transition(ctx, ids[7], store.Change{From: []store.State{store.StateCreated}, To: store.StateTerminated, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	gets := &countingGets{Client: e.db}
	st := store.New(gets, e.table, store.WithClock(e.clock.Now))
	rep, err := e.b.Repair(ctx, st, quota.RepairOptions{Live: live, Changed: []string{ids[7]}})
	if err != nil || rep.Freed != 1 {
		t.Errorf("repair %+v (%v): want the terminated instance's unit freed", rep, err)
	}
	if got := gets.n.Load(); got != 1 {
		t.Errorf("instance reads = %d, want 1 (only the instance the pass terminated)", got)
	}
	if c := counter(t, e.a, quota.DeploymentCounter); c != n-1 {
		t.Errorf("deployment counter = %d, want %d", c, n-1)
	}
}

// A pending instance-cap reservation is released at its deadline (10 min); its fleet's instances,
// launched a little after it was made, used to be adopted only at 15 min of age, so for minutes
// they counted on no counter and the caps let other fleets past them. With AdoptAfter the same
// deadline, an unpaid instance is adopted in the very Repair that releases the reservation.
func TestRepairAdoptsWhatAnExpiredCapReservationLaunched(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	caps := &quota.Caps{Ledger: e.a, MaxInstances: 5}
	if err := caps.Reserve(ctx, "crashed", "std", 2); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute) // the fleet call
	record(t, e.st, "i-1", "", "std")
	record(t, e.st, "i-2", "", "std")
	live, err := e.st.LiveBrief(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := quota.RepairOptions{Live: live, AdoptAfter: caps.PendingDeadline(), Adopt: caps.Adopt}
	// While the reservation may still be settled, its instances are left to it.
	if rep, err := e.b.Repair(ctx, e.st, o); err != nil || rep.Adopted != 0 || rep.Freed != 0 {
		t.Errorf("repair before the deadline %+v (%v): want nothing done", rep, err)
	}
	e.clock.Advance(caps.PendingDeadline() - time.Minute + time.Second) // just past the deadline: the instances are 9 min old
	rep, err := e.b.Repair(ctx, e.st, o)
	if err != nil || rep.Freed != 2 || rep.Adopted != 2 {
		t.Errorf("repair past the deadline %+v (%v): want the reservation released and both instances adopted", rep, err)
	}
	if c := counter(t, e.a, quota.DeploymentCounter); c != 2 {
		t.Errorf("deployment counter = %d, want 2 (never uncounted)", c)
	}
}
