// Acceptance tests of what a platform team's own Terraform ran into: renaming a runner class a warm
// pool uses, importing a duration spelled differently, retagging the table on DynamoDB Local, and a
// warm pool in a table that does not exist.
package provider

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// TestAccWarmPoolRunnerClassRename: renaming the class a pool uses replaces the pool, so the pool
// is destroyed before the old class and the apply succeeds (it failed "in use" when the pool was
// updated in place).
func TestAccWarmPoolRunnerClassRename(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	before, after, pool := uniqueName(t, "old"), uniqueName(t, "new"), uniqueName(t, "pool")
	body := "  schedule {\n    name = \"default\"\n    hot = 0\n    stopped = 1\n  }"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: poolConfig(t, table, before, pool, body)},
			{
				Config: poolConfig(t, table, after, pool, body),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("runnerpool_warm_pool.small", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("runnerpool_runner_class.small", plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("runnerpool_warm_pool.small", tfjsonpath.New("runner_class"), knownvalue.StringExact(after)),
				},
			},
		},
	})
}

// TestAccRunnerClassImportDurationByValue: a class written with idle_time "90m" is stored and read
// back as "1h30m"; imported, it plans no change against a configuration that says "90m".
func TestAccRunnerClassImportDurationByValue(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	class := uniqueName(t, "small")
	cfg := classConfig(t, table, class, "  idle_time = \"90m\"\n  max_runtime = \"120m\"")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: tableConfig(t, table, "  force_destroy = true")},
			{
				// The class exists in the table, written by someone else (as the provider would).
				PreConfig: func() {
					rc := declared.RunnerClass{
						Name: class, Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096, UsageClass: declared.UsageOnDemand,
						Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
						Subnets:    []string{"subnet-0123456789abcdef0"},
						MaxRuntime: declared.Duration(2 * time.Hour), IdleTime: declared.Duration(90 * time.Minute),
						QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/runnerpool-small",
					}
					if _, err := declared.NewRepository(store.New(stacktest.Shared(t).DynamoDB(), table)).PutRunnerClass(t.Context(), rc, 0); err != nil {
						t.Fatalf("PutRunnerClass: %v", err)
					}
				},
				Config: cfg + fmt.Sprintf(`
import {
  to = runnerpool_runner_class.small
  id = "%s/%s"
}
`, table, class),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("runnerpool_runner_class.small", plancheck.ResourceActionNoop),
				}},
			},
			{Config: cfg, PlanOnly: true},
		},
	})
}

// TestAccStateTableRetagOnDynamoDBLocal: changing the table's tags on an endpoint without the
// tagging API (DynamoDB Local) warns and keeps them in the state, as reading them does.
func TestAccStateTableRetagOnDynamoDBLocal(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: tableConfig(t, table, "  force_destroy = true\n  tags = { team = \"ci\" }")},
			{
				Config: tableConfig(t, table, "  force_destroy = true\n  tags = { team = \"platform\", cost = \"42\" }"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("runnerpool_state_table.main", tfjsonpath.New("tags"),
						knownvalue.MapExact(map[string]knownvalue.Check{"team": knownvalue.StringExact("platform"), "cost": knownvalue.StringExact("42")})),
				},
			},
		},
	})
}

// TestAccWarmPoolMissingTable: a warm pool in a table that does not exist says so (it said
// "Unknown runner class").
func TestAccWarmPoolMissingTable(t *testing.T) {
	table := stacktest.UniqueName(t, "missing")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: providerConfig(t) + fmt.Sprintf(`
resource "runnerpool_warm_pool" "p" {
  table        = %q
  name         = "p"
  runner_class = "small"
}
`, table),
			ExpectError: errorLike("State table not found", "does not exist"),
		}},
	})
}

// TestAccRunnerClassJobPosture: job_access "root" without a reuse restriction is refused at plan;
// with one it plans (the reconciler of this version then refuses to launch it).
func TestAccRunnerClassJobPosture(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	class := uniqueName(t, "root")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: classConfig(t, table, class, "  job_access = \"root\""), PlanOnly: true,
				ExpectError: errorLike("Contradictory job access and reuse", "a root job can forge what the agent reports")},
			{Config: classConfig(t, table, class, "  job_access = \"root\"\n  reuse = \"any-repository\""), PlanOnly: true,
				ExpectError: errorLike("Contradictory job access and reuse")},
			{Config: classConfig(t, table, class, "  job_access = \"docker\"\n  reuse = \"never\""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("runnerpool_runner_class.small", tfjsonpath.New("job_access"), knownvalue.StringExact("docker")),
					statecheck.ExpectKnownValue("runnerpool_runner_class.small", tfjsonpath.New("reuse"), knownvalue.StringExact("never")),
				}},
			{Config: classConfig(t, table, class, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("runnerpool_runner_class.small", tfjsonpath.New("job_access"), knownvalue.StringExact("user")),
				}},
		},
	})
}
