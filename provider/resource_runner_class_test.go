// Acceptance tests of runnerpool_runner_class (items in a state table on DynamoDB Local).
package provider

import (
	"errors"
	"fmt"
	"strings"
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

// classConfig is a table and a runner class in it.
func classConfig(t *testing.T, table, class, extra string) string {
	if !strings.Contains(extra, "cpu ") {
		extra = "  cpu = 2\n" + extra
	}
	return tableConfig(t, table, "  force_destroy = true") + fmt.Sprintf(`
resource "runnerpool_runner_class" "small" {
  table      = runnerpool_state_table.main.name
  name       = %q
  image      = "ami-0123456789abcdef0"
  memory_mib = 4096
  subnets    = ["subnet-0123456789abcdef0"]
  queue_url  = "https://sqs.us-east-1.amazonaws.com/123456789012/runnerpool-small"
%s
}
`, class, extra)
}

// itemGone is a CheckDestroy for a configuration item (the table may be gone too).
func itemGone(t *testing.T, table string, kind store.ConfigKind, name string) func(*terraform.State) error {
	return func(*terraform.State) error {
		_, err := store.New(stacktest.Shared(t).DynamoDB(), table).GetConfig(t.Context(), kind, name)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("%s %s still readable after destroy: %v", kind, name, err)
	}
}

func TestAccRunnerClass(t *testing.T) {
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "tf")
	class := uniqueName(t, "small")
	addr := "runnerpool_runner_class.small"
	repo := func() *declared.Repository { return declared.NewRepository(store.New(db, table)) }
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             itemGone(t, table, store.ConfigRunnerClass, class),
		Steps: []resource.TestStep{
			{
				Config: classConfig(t, table, class, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(table+"/"+class)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("max_runtime"), knownvalue.StringExact("6h")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("volume_type"), knownvalue.StringExact("gp3")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("labels"), knownvalue.Null()),
				},
				Check: func(*terraform.State) error {
					rc, v, err := repo().GetRunnerClass(t.Context(), class)
					if err != nil {
						return err
					}
					if v != 1 || rc.CPU != 2 || rc.IdleTime.Std() != 10*time.Minute || rc.UsageClass != "on-demand" || rc.Volume.SizeGiB != 30 {
						return fmt.Errorf("stored runner class = %+v (version %d)", rc, v)
					}
					return nil
				},
			},
			{
				Config: classConfig(t, table, class, `
  cpu                     = 4
  instance_types          = ["c7i.*", "m7i.large"]
  usage_class             = "spot"
  volume_size_gib         = 100
  volume_iops             = 6000
  volume_throughput_mibps = 500
  labels                  = ["linux", "x64"]
  max_runtime             = "90m"
  pre_runner_script       = "#!/bin/bash\napt-get install -y jq\n"
  tags                    = { team = "ci", "cost-center" = "42" }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(2)),
					// The configuration's spelling is kept; the table stores the short form (1h30m).
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("max_runtime"), knownvalue.StringExact("90m")),
				},
				Check: func(*terraform.State) error {
					rc, _, err := repo().GetRunnerClass(t.Context(), class)
					if err != nil {
						return err
					}
					if rc.CPU != 4 || rc.MaxRuntime.Std() != 90*time.Minute || len(rc.InstanceTypes) != 2 || rc.Volume.IOPS != 6000 ||
						rc.Tags["team"] != "ci" || rc.Tags["cost-center"] != "42" {
						return fmt.Errorf("stored runner class = %+v", rc)
					}
					return nil
				},
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     table + "/" + class,
				ImportStateVerify: true,
				// Import reads the stored short form "1h30m" of the configured "90m".
				ImportStateVerifyIgnore: []string{"max_runtime"},
			},
			{
				// Changed behind Terraform's back: the plan shows the difference and the apply wins
				// with the version it read.
				PreConfig: func() {
					rc, v, err := repo().GetRunnerClass(t.Context(), class)
					if err != nil {
						t.Fatal(err)
					}
					rc.CPU = 8
					if _, err := repo().PutRunnerClass(t.Context(), rc, v); err != nil {
						t.Fatal(err)
					}
				},
				Config: classConfig(t, table, class, `
  cpu                     = 4
  instance_types          = ["c7i.*", "m7i.large"]
  usage_class             = "spot"
  volume_size_gib         = 100
  volume_iops             = 6000
  volume_throughput_mibps = 500
  labels                  = ["linux", "x64"]
  max_runtime             = "90m"
  pre_runner_script       = "#!/bin/bash\napt-get install -y jq\n"
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("cpu"), knownvalue.Int64Exact(4)),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(4)),
				},
			},
			{
				PreConfig: func() {
					if err := repo().DeleteRunnerClass(t.Context(), class); err != nil {
						t.Fatalf("deleting the runner class out of band: %v", err)
					}
				},
				Config: classConfig(t, table, class, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(1)),
				},
			},
		},
	})
}

func TestAccRunnerClassPlanValidation(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	cases := []struct {
		extra string
		want  []string
	}{
		{`  instance_types = ["c7i.*", ""]`, []string{"Invalid instance type pattern", `instance_types = ["c7i.*", ""]`, "instance type pattern is empty"}},
		{`  instance_types = ["C7I.LARGE"]`, []string{"Invalid instance type pattern", `"C7I.LARGE"`}},
		{`  volume_iops = 9000`, []string{"Invalid volume performance", "volume_iops = 9000", "at most 500 IOPS per GiB (6000 for 12 GiB)"}},
		{`  max_runtime = "6 hours"`, []string{"Invalid max runtime", `max_runtime = "6 hours"`}},
		{`  usage_class = "reserved"`, []string{"Invalid usage class", `usage_class = "reserved"`}},
		{`  labels = ["a,b"]`, []string{"Invalid label", `labels = ["a,b"]`}},
		// Instance metadata tags (the claim notice) forbid spaces and "/" in tag keys.
		{`  tags = { "cost center" = "1" }`, []string{"Invalid tag key", `"cost center"`, "no spaces or /"}},
		{`  tags = { "kubernetes.io/cluster" = "x" }`, []string{"Invalid tag key", "falls back to reading its record"}},
	}
	var steps []resource.TestStep
	for _, tc := range cases {
		extra := tc.extra
		if tc.want[0] == "Invalid volume performance" {
			extra += "\n  volume_size_gib = 12"
		}
		steps = append(steps, resource.TestStep{
			Config:      classConfig(t, table, "small", extra),
			PlanOnly:    true,
			ExpectError: errorLike(tc.want...),
		})
	}
	resource.ParallelTest(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: steps})
}
