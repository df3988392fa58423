// quota_repair_ms_20000_instances, measured beside the "refresh 20000" phase's passes: the quota
// repair that follows each refresh pass, over the same records, every one of them capped.
package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// fleetSize is how many instances one settled cap reservation pays for in the measurement (a
// fleet of CreateFleet's usual batch).
const fleetSize = 50

// quotaRepair settles instance-cap reservations (fleets of fleetSize) on every record of ids in the
// ledger over db's table, then times quota.Ledger.Repair from the last refresh pass's listing, as
// the reconciler runs it after each pass (reconciler/service/quota.go).
func (h *harness) quotaRepair(ctx context.Context, res *Result, db quota.DynamoDBAPI, st *store.Store, table string, ids []string, pass refresh.Report, counter *awslimit.Counter) error {
	ledger := quota.New(db, table, quota.Options{})
	limits := []quota.Limit{{Kind: quota.LimitDeployment, Counter: quota.DeploymentCounter}, {Kind: quota.LimitRunnerClass, Counter: quota.ClassCounter("default")}}
	h.say("  settling %d cap reservations of %d instances", (len(ids)+fleetSize-1)/fleetSize, fleetSize)
	for start := 0; start < len(ids); start += fleetSize {
		fleet := ids[start:min(start+fleetSize, len(ids))]
		id := fmt.Sprintf("fleet#bench-%d", start)
		if err := ledger.Reserve(ctx, quota.Reservation{ID: id, Amount: len(fleet), Deadline: time.Now().Add(time.Hour)}, limits); err != nil {
			return fmt.Errorf("reserving %s: %w", id, err)
		}
		if err := ledger.Settle(ctx, id, fleet); err != nil {
			return fmt.Errorf("settling %s: %w", id, err)
		}
	}
	o := quota.RepairOptions{Live: pass.Listing, AdoptAfter: quota.DefaultPendingDeadline,
		Changed: slices.Concat(pass.Expiry.Terminated, pass.Expiry.AlreadyGone)}
	const runs = 3
	var took []float64
	counter.Reset()
	for range runs {
		t := time.Now()
		rep, err := ledger.Repair(ctx, st, o)
		d := time.Since(t)
		if err != nil {
			return fmt.Errorf("quota repair: %w", err)
		}
		if rep.Freed+rep.Adopted+rep.Reset != 0 {
			return fmt.Errorf("quota repair not steady: %+v", rep)
		}
		took = append(took, ms(d))
	}
	calls := counter.Counts()
	slices.Sort(took)
	res.add(Figure{Name: "quota_repair_ms_20000_instances", Value: Percentile(took, 50), Unit: "ms",
		How: fmt.Sprintf("median of %d quota repairs (quota.Ledger.Repair, as after each refresh pass) over the %d live records of the refresh 20000 phase, each paid for by one of %d settled cap reservations of %d instances, from the refresh pass's brief listing; %s requests per repair (%s); goal: within the refresh pass's own 2 s",
			runs, len(pass.Listing), (len(ids)+fleetSize-1)/fleetSize, fleetSize, formatValue(float64(total(calls))/runs), perPassCalls(calls, runs))})
	h.say("  quota repair over %d records: median %.0f ms, %s requests per repair", len(pass.Listing), Percentile(took, 50), formatValue(float64(total(calls))/runs))
	return nil
}
