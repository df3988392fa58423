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

// TestAccRunnerClassCache: the cache block switches the class's cache on with GitHub's own limits
// by default (10 GiB a repository, 7 days unused), takes its own limits in place, and removing it
// stores no block (off).
func TestAccRunnerClassCache(t *testing.T) {
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "tf")
	class := uniqueName(t, "cached")
	addr := "runnerpool_runner_class.small"
	stored := func(want *declared.Cache) func(*terraform.State) error {
		return func(*terraform.State) error {
			rc, _, err := declared.NewRepository(store.New(db, table)).GetRunnerClass(t.Context(), class)
			if err != nil {
				return err
			}
			if (rc.Cache == nil) != (want == nil) || (want != nil && *rc.Cache != *want) {
				return fmt.Errorf("stored cache block = %+v, want %+v", rc.Cache, want)
			}
			return nil
		}
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             itemGone(t, table, store.ConfigRunnerClass, class),
		Steps: []resource.TestStep{
			{
				Config: classConfig(t, table, class, "  cache {}"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cache").AtMapKey("enabled"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cache").AtMapKey("repository_limit_gib"), knownvalue.Int64Exact(10)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cache").AtMapKey("max_age"), knownvalue.StringExact("168h")),
				},
				Check: stored(&declared.Cache{Enabled: true, RepositoryLimitGiB: 10, MaxAge: declared.Duration(7 * 24 * time.Hour)}),
			},
			{
				Config: classConfig(t, table, class, "  cache {\n    repository_limit_gib = 2\n    max_age = \"72h\"\n  }"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: stored(&declared.Cache{Enabled: true, RepositoryLimitGiB: 2, MaxAge: declared.Duration(72 * time.Hour)}),
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     table + "/" + class,
				ImportStateVerify: true,
			},
			{
				Config: classConfig(t, table, class, "  cache {\n    enabled = false\n  }"),
				Check:  stored(&declared.Cache{Enabled: false, RepositoryLimitGiB: 10, MaxAge: declared.Duration(7 * 24 * time.Hour)}),
			},
			{
				Config:      classConfig(t, table, class, "  cache {\n    max_age = \"10m\"\n  }"),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid cache max age", "between 1h0m0s and 2160h0m0s"),
			},
			{
				Config:      classConfig(t, table, class, "  cache {\n    repository_limit_gib = 0\n  }"),
				PlanOnly:    true,
				ExpectError: errorLike("repository limit"),
			},
			{
				Config: classConfig(t, table, class, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cache"), knownvalue.Null()),
				},
				Check: stored(nil),
			},
		},
	})
}
