// Acceptance tests of runnerpool_scale_set.
package provider

import (
	"fmt"
	"regexp"
	"testing"

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

func TestAccScaleSet(t *testing.T) {
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "tf")
	class, pool, set := uniqueName(t, "small"), uniqueName(t, "pool"), uniqueName(t, "ss")
	addr := "runnerpool_scale_set.warm"
	cfg := func(body string) string {
		return poolConfig(t, table, class, pool, "") + fmt.Sprintf(`
resource "runnerpool_scale_set" "warm" {
  table     = runnerpool_state_table.main.name
  name      = %q
  warm_pool = runnerpool_warm_pool.small.name
%s
}
`, set, body)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             itemGone(t, table, store.ConfigScaleSet, set),
		Steps: []resource.TestStep{
			{Config: cfg(`  scope = "not a scope"`), ExpectError: regexp.MustCompile(`Invalid scope`)},
			{Config: cfg(`  scope       = "acme"
  max_runners = 0`), ExpectError: regexp.MustCompile(`Invalid max_runners`)},
			{
				Config: cfg(`  scope = "acme"`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("max_runners"), knownvalue.Int64Exact(10)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("labels"), knownvalue.Null()),
				},
				Check: func(*terraform.State) error {
					got, _, err := declared.NewRepository(store.New(db, table)).GetScaleSet(t.Context(), set)
					if err != nil || got.Scope != "acme" || got.WarmPool != pool || got.MaxRunners != 10 {
						return fmt.Errorf("stored scale set %+v, %v", got, err)
					}
					return nil
				},
			},
			{
				Config: cfg(`  scope       = "acme"
  max_runners = 3
  labels      = ["gpu-warm"]`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("max_runners"), knownvalue.Int64Exact(3)),
				},
			},
			{
				// Moving a scale set to another organization is a new scale set.
				Config: cfg(`  scope = "acme/app"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
				}},
			},
			{ResourceName: addr, ImportState: true, ImportStateVerify: true},
		},
	})
}
