// Acceptance tests of runnerpool_warm_pool's autoscale block: stored in the pool's item, read back
// (import, drift), validated at plan, and absent without the block.
package provider

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

const autoscaleSchedules = `
  schedule {
    name    = "office"
    days    = ["monday", "tuesday", "wednesday", "thursday", "friday"]
    hot     = 40
    stopped = 10
    time_range {
      start = "07:00"
      end   = "20:00"
    }
  }
  schedule {
    name    = "default"
    hot     = 5
    stopped = 2
  }
`

func TestAccWarmPoolAutoscale(t *testing.T) {
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "tf")
	class, pool := uniqueName(t, "small"), uniqueName(t, "pool")
	addr := "runnerpool_warm_pool.small"
	repo := func() *declared.Repository { return declared.NewRepository(store.New(db, table)) }
	block := func(goal, extra string) string {
		return autoscaleSchedules + fmt.Sprintf("\n  autoscale {\n    queue_time_p95 = %q\n%s\n  }\n", goal, extra)
	}
	stored := func(want *declared.Autoscale) resource.TestCheckFunc {
		return func(*terraform.State) error {
			p, _, err := repo().GetWarmPool(t.Context(), pool)
			if err != nil {
				return err
			}
			if (p.Autoscale == nil) != (want == nil) || (want != nil && *p.Autoscale != *want) {
				return fmt.Errorf("stored autoscale %+v, want %+v", p.Autoscale, want)
			}
			return nil
		}
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             itemGone(t, table, store.ConfigWarmPool, pool),
		Steps: []resource.TestStep{
			{
				Config: poolConfig(t, table, class, pool, block("5s", "    min_hot = 2\n    budget_per_hour = 4.5")),
				Check:  stored(&declared.Autoscale{QueueTimeP95: declared.Duration(5 * time.Second), MinHot: 2, BudgetPerHour: 4.5}),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("autoscale").AtMapKey("queue_time_p99"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("autoscale").AtMapKey("queue_time_p95"), knownvalue.StringExact("5s")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("autoscale").AtMapKey("min_stopped"), knownvalue.Int64Exact(0)),
				},
			},
			{
				// The same goal spelled differently plans nothing.
				Config: poolConfig(t, table, class, pool, block("5000ms", "    min_hot = 2\n    budget_per_hour = 4.5")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionNoop),
				}},
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     table + "/" + pool,
				ImportStateVerify: true,
			},
			{
				// Drift: the goal changed in the table out of band; the plan puts it back.
				PreConfig: func() {
					p, v, err := repo().GetWarmPool(t.Context(), pool)
					if err != nil {
						t.Fatal(err)
					}
					p.Autoscale.QueueTimeP95 = declared.Duration(time.Minute)
					if _, err := repo().PutWarmPool(t.Context(), p, v); err != nil {
						t.Fatal(err)
					}
				},
				Config: poolConfig(t, table, class, pool, block("5s", "    min_hot = 2\n    budget_per_hour = 4.5")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: stored(&declared.Autoscale{QueueTimeP95: declared.Duration(5 * time.Second), MinHot: 2, BudgetPerHour: 4.5}),
			},
			{
				// A tail goal is stored with the block, and a different spelling plans nothing.
				Config: poolConfig(t, table, class, pool, block("5s", "    queue_time_p99 = \"30s\"\n    min_hot = 2\n    budget_per_hour = 4.5")),
				Check:  stored(&declared.Autoscale{QueueTimeP95: declared.Duration(5 * time.Second), QueueTimeP99: declared.Duration(30 * time.Second), MinHot: 2, BudgetPerHour: 4.5}),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("autoscale").AtMapKey("queue_time_p99"), knownvalue.StringExact("30s")),
				},
			},
			{
				Config: poolConfig(t, table, class, pool, block("5s", "    queue_time_p99 = \"30000ms\"\n    min_hot = 2\n    budget_per_hour = 4.5")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionNoop),
				}},
			},
			{
				// Without the block, the pool is stored as before: no autoscale key.
				Config: poolConfig(t, table, class, pool, autoscaleSchedules),
				Check:  stored(nil),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("autoscale"), knownvalue.Null()),
				},
			},
		},
	})
}

func TestAccWarmPoolAutoscalePlanValidation(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	withBlock := func(body string) string {
		return poolConfig(t, table, "small", "pool", autoscaleSchedules+"\n  autoscale {\n"+body+"\n  }\n")
	}
	cases := []struct {
		config string
		want   []string
	}{
		{withBlock(`    queue_time_p95 = "5 seconds"`), []string{"Invalid queue_time_p95", `queue_time_p95 = "5 seconds"`}},
		{withBlock(`    queue_time_p95 = "2h"`), []string{"Invalid queue_time_p95", "must be between 1s and 1h0m0s"}},
		{withBlock(`    min_hot = 1`), []string{"Missing queue-time goal", "needs queue_time_p95"}},
		{withBlock("    queue_time_p95 = \"5s\"\n    queue_time_p99 = \"2s\""), []string{"Tail goal below the queue-time goal", "queue_time_p99 2s is below queue_time_p95 5s"}},
		{withBlock("    queue_time_p95 = \"5s\"\n    queue_time_p99 = \"soon\""), []string{"Invalid queue_time_p99"}},
		{withBlock("    queue_time_p95 = \"5s\"\n    budget_per_hour = -2"), []string{"Invalid budget", "budget_per_hour = -2"}},
		{withBlock("    queue_time_p95 = \"5s\"\n    min_stopped = 3"), []string{"Autoscale minimum above a schedule's maximum", "min_stopped 3 is above schedule 1's count 2"}},
	}
	var steps []resource.TestStep
	for _, tc := range cases {
		steps = append(steps, resource.TestStep{Config: tc.config, PlanOnly: true, ExpectError: errorLike(tc.want...)})
	}
	resource.ParallelTest(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: steps})
}
