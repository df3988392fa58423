package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// TestAccInstanceCaps: a runner class's max_instances is stored for the reconciler; at plan, a cap
// of 0 or below and a cap below the class's warm pools are refused, and so is a pool above its
// class's cap.
func TestAccInstanceCaps(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	class, pool := uniqueName(t, "small"), uniqueName(t, "pool")
	withCap := func(maxInstances string, hot, stopped int) string {
		body := fmt.Sprintf("  schedule {\n    name    = \"default\"\n    hot     = %d\n    stopped = %d\n  }\n", hot, stopped)
		return classConfig(t, table, class, "  max_instances = "+maxInstances+"\n") + `
resource "runnerpool_warm_pool" "small" {
  table        = runnerpool_state_table.main.name
  name         = "` + pool + `"
  runner_class = runnerpool_runner_class.small.name
` + body + `}
`
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             itemGone(t, table, store.ConfigRunnerClass, class),
		Steps: []resource.TestStep{
			{
				Config: withCap("5", 2, 3),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("runnerpool_runner_class.small", tfjsonpath.New("max_instances"), knownvalue.Int64Exact(5)),
				},
			},
			{Config: withCap("4", 2, 3), ExpectError: regexp.MustCompile(`(?s)Instance cap below the warm pools' targets.*keep up to 5 instances.*max_instances 4`)},
			{Config: withCap("5", 3, 3), ExpectError: regexp.MustCompile(`(?s)Warm pool above its runner class's instance cap.*keep up to 6 instances`)},
			{Config: withCap("0", 2, 3), ExpectError: regexp.MustCompile(`max instances 0: must be between 1 and`)},
			{Config: withCap("-2", 2, 3), ExpectError: regexp.MustCompile(`max instances -2: must be between 1 and`)},
			// The cap raised, then the pool: in one plan the pool is checked against the class as
			// stored in the table, so a cap is raised first.
			{Config: withCap("6", 2, 3)},
			{Config: withCap("6", 3, 3)},
		},
	})
}
