// Acceptance tests of the data sources.
package provider

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

const agentArtifacts = `
  agent_x64 = {
    url    = "https://releases.example.com/runnerpool/v1.2.3/runnerpool_linux_amd64"
    sha256 = "abababababababababababababababababababababababababababababababab"
  }
  agent_arm64 = {
    url    = "https://releases.example.com/runnerpool/v1.2.3/runnerpool_linux_arm64"
    sha256 = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
  }
`

func TestAccUserData(t *testing.T) {
	addr := "data.runnerpool_user_data.boot"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table = "runnerpool-prod"
  arch  = "arm64"
}
`,
				PlanOnly:    true,
				ExpectError: errorLike("Missing agent binary", `agent_arm64 is required unless arch = "x64"`),
			},
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table = "runnerpool-prod"
  arch  = "x64"
  agent_x64 = {
    url    = "http://insecure.example.com/runnerpool"
    sha256 = "abc"
  }
}
`,
				PlanOnly:    true,
				ExpectError: errorLike("Invalid SHA-256", `"abc": want 64 hexadecimal digits`),
			},
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table = "runnerpool-prod"
  arch  = "x64"
  agent_x64 = {
    url    = "http://insecure.example.com/runnerpool"
    sha256 = "abababababababababababababababababababababababababababababababab"
  }
}
`,
				PlanOnly:    true,
				ExpectError: errorLike("Invalid agent URL", `"http://insecure.example.com/runnerpool": want an https:// URL`),
			},
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table             = "runnerpool-prod"
  pre_runner_script = "#!/bin/bash\napt-get install -y jq\n"
` + agentArtifacts + `
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("runner_version"), knownvalue.StringExact(userdata.RunnerVersion)),
				},
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources[addr].Primary.Attributes
					want, err := userdata.Render(userdata.Params{
						Table: "runnerpool-prod", Region: "us-east-1", PreRunnerScript: "#!/bin/bash\napt-get install -y jq\n",
						AgentX64:   userdata.Artifact{URL: "https://releases.example.com/runnerpool/v1.2.3/runnerpool_linux_amd64", SHA256: strings.Repeat("ab", 32)},
						AgentARM64: userdata.Artifact{URL: "https://releases.example.com/runnerpool/v1.2.3/runnerpool_linux_arm64", SHA256: strings.Repeat("cd", 32)},
					})
					if err != nil {
						return err
					}
					// The region defaults to the provider's.
					if a["rendered"] != want {
						return fmt.Errorf("rendered user data differs from userdata.Render with the provider's region")
					}
					if got, _ := base64.StdEncoding.DecodeString(a["rendered_base64"]); string(got) != want {
						return fmt.Errorf("rendered_base64 is not the base64 of rendered")
					}
					// Instance keys default to ARNs, the reconciler's default.
					if !strings.Contains(a["rendered"], " -instance-keys arn") {
						return fmt.Errorf("rendered user data does not pass -instance-keys arn to the agent")
					}
					return nil
				},
			},
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table         = "runnerpool-prod"
  instance_keys = "name"
` + agentArtifacts + `
}
`,
				PlanOnly:    true,
				ExpectError: errorLike("Invalid instance keys", `"name" is not one of "arn", "id"`),
			},
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table     = "runnerpool-prod"
  log_group = "/runnerpool/prod instances"
` + agentArtifacts + `
}
`,
				PlanOnly:    true,
				ExpectError: errorLike("Invalid log group", `want 1-512 characters`),
			},
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table     = "runnerpool-prod"
  log_group = "/runnerpool/prod/instances"
` + agentArtifacts + `
}
`,
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources[addr].Primary.Attributes
					if want := "ExecStart=" + userdata.AgentPath + " logs -log-group /runnerpool/prod/instances -region us-east-1 "; !strings.Contains(a["rendered"], want) {
						return fmt.Errorf("rendered user data does not start the log shipping unit (%q)", want)
					}
					return nil
				},
			},
			{
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table         = "runnerpool-prod"
  instance_keys = "id"
` + agentArtifacts + `
}
`,
				Check: func(s *terraform.State) error {
					if r := s.RootModule().Resources[addr].Primary.Attributes["rendered"]; !strings.Contains(r, " -instance-keys id") {
						return fmt.Errorf("instance_keys = \"id\" not passed to the agent")
					}
					return nil
				},
			},
			{
				// By default jobs are blocked from instance metadata; the opt-out renders no block.
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table                     = "runnerpool-prod"
  allow_job_metadata_access = true
` + agentArtifacts + `
}
data "runnerpool_user_data" "default" {
  table = "runnerpool-prod"
` + agentArtifacts + `
}
`,
				Check: func(s *terraform.State) error {
					allowed := s.RootModule().Resources[addr].Primary.Attributes["rendered"]
					blocked := s.RootModule().Resources["data.runnerpool_user_data.default"].Primary.Attributes["rendered"]
					if strings.Contains(allowed, "block-job-metadata") {
						return fmt.Errorf("allow_job_metadata_access = true still renders the metadata block")
					}
					if !strings.Contains(blocked, "--uid-owner runner -j REJECT") || !strings.Contains(blocked, "DOCKER-USER") {
						return fmt.Errorf("the default user data does not block jobs from instance metadata")
					}
					return nil
				},
			},
		},
	})
}

func TestAccPoolStatus(t *testing.T) {
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "tf")
	cfg := tableConfig(t, table, "  force_destroy = true")
	status := `
data "runnerpool_pool_status" "web" {
  table = runnerpool_state_table.main.name
  pool  = "web"
}
data "runnerpool_pool_status" "all" {
  table = runnerpool_state_table.main.name
}
`
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: func(*terraform.State) error {
					s := store.New(db, table)
					// Pool status lists instances through the state index, whatever their keys: i-03 is
					// keyed by its ARN, as a reconciler with RUNNERPOOL_INSTANCE_KEYS=arn writes it.
					arnKeyed := store.New(db, table, store.WithInstanceKeyPrefix(store.InstanceARNPrefix("us-east-1", "123456789012")))
					until := time.Now().Add(time.Hour)
					for _, in := range []store.Instance{
						{ID: "i-01", State: store.StateWarming, Pool: "web"},
						{ID: "i-02", State: store.StateWarming, Pool: "web"},
						{ID: "i-03", State: store.StateWarming, Pool: "api"},
						{ID: "i-04", State: store.StateCreated},
						{ID: "i-05", State: store.StateWarming, Pool: "web"},
					} {
						in.Threshold = until
						w := s
						if in.ID == "i-03" {
							w = arnKeyed
						}
						if _, err := w.Create(t.Context(), in); err != nil {
							return err
						}
					}
					if _, err := s.Transition(t.Context(), "i-02", store.Change{From: []store.State{store.StateWarming}, To: store.StateStopped}); err != nil {
						return err
					}
					_, err := s.Transition(t.Context(), "i-05", store.Change{From: []store.State{store.StateWarming}, To: store.StateTerminated})
					return err
				},
			},
			{
				Config: cfg + status,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.web", tfjsonpath.New("total"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.web", tfjsonpath.New("counts").AtMapKey("warming"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.web", tfjsonpath.New("counts").AtMapKey("stopped"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.web", tfjsonpath.New("counts").AtMapKey("idle"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.web", tfjsonpath.New("pools"), knownvalue.MapSizeExact(1)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.all", tfjsonpath.New("total"), knownvalue.Int64Exact(4)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.all", tfjsonpath.New("counts").AtMapKey("created"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.all", tfjsonpath.New("pools").AtMapKey("api").AtMapKey("warming"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("data.runnerpool_pool_status.all", tfjsonpath.New("pools").AtMapKey("").AtMapKey("created"), knownvalue.Int64Exact(1)),
				},
			},
		},
	})
}

func TestAccScheduleUnknownPool(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: tableConfig(t, table, "  force_destroy = true") + `
data "runnerpool_schedule" "x" {
  table = runnerpool_state_table.main.name
  pool  = "nope"
}
`,
			ExpectError: errorLike("Warm pool not found", `has no warm pool "nope"`),
		}},
	})
}

// TestAccScheduleNow checks the data source's default time is the provider's clock.
func TestAccScheduleNow(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	class, pool := uniqueName(t, "small"), uniqueName(t, "pool")
	// Sunday 2025-03-30 03:30 in Paris, just after the clocks sprang forward.
	now := func() time.Time { return time.Date(2025, 3, 30, 1, 30, 0, 0, time.UTC) }
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testFactories(now),
		Steps: []resource.TestStep{{
			Config: poolConfig(t, table, class, pool, seedSchedules) + `
data "runnerpool_schedule" "now" {
  table = runnerpool_warm_pool.small.table
  pool  = runnerpool_warm_pool.small.name
}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.runnerpool_schedule.now", tfjsonpath.New("local_time"), knownvalue.StringExact("2025-03-30T03:30:00+02:00")),
				statecheck.ExpectKnownValue("data.runnerpool_schedule.now", tfjsonpath.New("schedule"), knownvalue.StringExact("nights")),
				statecheck.ExpectKnownValue("data.runnerpool_schedule.now", tfjsonpath.New("next_change"), knownvalue.StringExact("2025-03-30T06:00:00+02:00")),
				statecheck.ExpectKnownValue("data.runnerpool_schedule.now", tfjsonpath.New("next_schedule"), knownvalue.StringExact("weekends")),
			},
		}},
	})
}
