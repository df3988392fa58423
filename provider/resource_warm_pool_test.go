// Acceptance tests of runnerpool_warm_pool and the runnerpool_schedule data source.
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

// poolConfig is a table, a runner class and a warm pool with the given body.
func poolConfig(t *testing.T, table, class, pool, body string) string {
	return classConfig(t, table, class, "") + fmt.Sprintf(`
resource "runnerpool_warm_pool" "small" {
  table        = runnerpool_state_table.main.name
  name         = %q
  runner_class = runnerpool_runner_class.small.name
%s
}
`, pool, body)
}

// seedSchedules is the warm-pool example of the issue.
const seedSchedules = `
  environment = "dev"
  timezone    = "Europe/Paris"

  schedule {
    name    = "default"
    hot     = 1
    stopped = 2
  }
  schedule {
    name    = "nights"
    days    = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
    hot     = 0
    stopped = 2
    time_range {
      start = "22:00"
      end   = "06:00"
    }
  }
  schedule {
    name    = "weekends"
    days    = ["saturday", "sunday"]
    hot     = 0
    stopped = 1
  }
`

func TestAccWarmPool(t *testing.T) {
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "tf")
	class, pool := uniqueName(t, "small"), uniqueName(t, "pool")
	addr := "runnerpool_warm_pool.small"
	repo := func() *declared.Repository { return declared.NewRepository(store.New(db, table)) }
	updated := `
  timezone = "America/New_York"

  schedule {
    name    = "office"
    days    = ["monday", "tuesday", "wednesday", "thursday", "friday"]
    hot     = 3
    stopped = 1
    time_range {
      start = "08:00"
      end   = "12:00"
    }
    time_range {
      start = "13:00"
      end   = "18:30"
    }
  }
  schedule {
    name    = "default"
    hot     = 0
    stopped = 1
  }
`
	// A data source evaluating the stored pool: Friday 2025-03-28 22:30 in Paris is "nights".
	withSchedule := func(body, at string) string {
		return poolConfig(t, table, class, pool, body) + fmt.Sprintf(`
data "runnerpool_schedule" "at" {
  table = runnerpool_warm_pool.small.table
  pool  = runnerpool_warm_pool.small.name
  time  = %q
}
`, at)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             itemGone(t, table, store.ConfigWarmPool, pool),
		Steps: []resource.TestStep{
			{
				Config: withSchedule(seedSchedules, "2025-03-28T22:30:00+01:00"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("schedule").AtSliceIndex(0).AtMapKey("days"), knownvalue.Null()),
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("schedule"), knownvalue.StringExact("nights")),
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("stopped"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("hot"), knownvalue.Int64Exact(0)),
					// Saturday 06:00 in Paris: the night ends, the weekend begins.
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("next_change"), knownvalue.StringExact("2025-03-29T06:00:00+01:00")),
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("next_schedule"), knownvalue.StringExact("weekends")),
				},
			},
			{
				Config: withSchedule(updated, "2025-03-31T12:30:00-04:00"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("environment"), knownvalue.Null()),
					// Monday 12:30 in New York: between the office's two ranges.
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("schedule"), knownvalue.StringExact("default")),
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("default"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("data.runnerpool_schedule.at", tfjsonpath.New("next_change"), knownvalue.StringExact("2025-03-31T13:00:00-04:00")),
				},
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     table + "/" + pool,
				ImportStateVerify: true,
			},
			{
				PreConfig: func() {
					if err := repo().DeleteWarmPool(t.Context(), pool); err != nil {
						t.Fatalf("deleting the pool out of band: %v", err)
					}
				},
				Config: poolConfig(t, table, class, pool, updated),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
				}},
			},
			{
				// What the reconciler reads on its next cycle.
				Config: poolConfig(t, table, class, pool, updated),
				Check: func(*terraform.State) error {
					snap, err := repo().Load(t.Context())
					if err != nil {
						return err
					}
					p, ok := snap.WarmPools[pool]
					if !ok || len(snap.Problems) != 0 {
						return fmt.Errorf("pool %s not in the snapshot: %+v", pool, snap)
					}
					tg, err := snap.Target(pool, time.Date(2025, 3, 31, 14, 0, 0, 0, time.UTC)) // Monday 10:00 in New York
					if err != nil || tg.Schedule != "office" || tg.Hot != 3 || p.RunnerClass != class {
						return fmt.Errorf("target = %+v, %v", tg, err)
					}
					return nil
				},
			},
		},
	})
}

func TestAccWarmPoolPlanValidation(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	sched := func(body string) string {
		return poolConfig(t, table, "small", "pool", "  schedule {\n    name = \"x\"\n    hot = 1\n    stopped = 0\n"+body+"\n  }")
	}
	cases := []struct {
		config string
		want   []string
	}{
		{poolConfig(t, table, "small", "pool", `  timezone = "Europe/Pariss"`),
			[]string{"Invalid timezone", `timezone = "Europe/Pariss"`, `timezone "Europe/Pariss" is not a known IANA zone`}},
		{sched(`    days = ["monday", "Funday"]`), []string{"Invalid day", `days = ["monday", "Funday"]`, `day "Funday" is not a day name`}},
		{sched("    time_range {\n      start = \"22:00\"\n      end = \"25:00\"\n    }"),
			[]string{"Invalid schedule time", `end = "25:00"`, `time "25:00": hours go from 00 to 23`}},
		{sched("    time_range {\n      start = \"24:00\"\n      end = \"06:00\"\n    }"),
			[]string{"Invalid schedule time", `start = "24:00"`, "24:00 is allowed only as the end"}},
		{sched("    time_range {\n      start = \"06:00\"\n      end = \"06:00\"\n    }"),
			[]string{"Invalid time range", `end = "06:00"`, "time range 06:00-06:00 is empty"}},
		{poolConfig(t, table, "small", "pool", "  schedule {\n    name = \"x\"\n    hot = -1\n    stopped = 0\n  }"),
			[]string{"Invalid hot count", "hot = -1", "hot count -1: must be between 0 and 1000"}},
		{poolConfig(t, table, "small", "pool", "  schedule {\n    name = \"a\"\n    hot = 1\n    stopped = 0\n  }\n  schedule {\n    name = \"b\"\n    hot = 1\n    stopped = 0\n  }"),
			[]string{"Conflicting default schedules", `schedules "a" and "b" both have neither days nor time ranges`}},
		{poolConfig(t, table, "small", "pool", "  schedule {\n    name = \"a\"\n    days = [\"friday\"]\n    hot = 1\n    stopped = 0\n  }\n  schedule {\n    name = \"a\"\n    hot = 1\n    stopped = 0\n  }"),
			[]string{"Invalid schedule", `name = "a"`, `schedule name "a" is used by schedules 0 and 1`}},
	}
	var steps []resource.TestStep
	for _, tc := range cases {
		steps = append(steps, resource.TestStep{Config: tc.config, PlanOnly: true, ExpectError: errorLike(tc.want...)})
	}
	resource.ParallelTest(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: steps})
}

func TestAccWarmPoolUnknownRunnerClass(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: tableConfig(t, table, "  force_destroy = true") + `
resource "runnerpool_warm_pool" "p" {
  table        = runnerpool_state_table.main.name
  name         = "p"
  runner_class = "nonexistent"
}
`,
			ExpectError: errorLike("Unknown runner class", `runner_class = "nonexistent"`, `names a runner class that is not in table`),
		}},
	})
}
