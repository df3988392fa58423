// Acceptance test of runnerpool_user_data's runner pin: a version with its checksums, refused at plan
// time below GitHub's registration floor.
package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
)

func TestAccUserDataRunnerPin(t *testing.T) {
	addr := "data.runnerpool_user_data.boot"
	pinned := func(version, sums string) string {
		return providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table          = "runnerpool-prod"
  runner_version = "` + version + `"
` + sums + agentArtifacts + `
}
`
	}
	bothSums := `
  runner_sha256_x64   = "` + strings.Repeat("1a", 32) + `"
  runner_sha256_arm64 = "` + strings.Repeat("2b", 32) + `"
`
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				// At cc50e7d runner_version was read-only and the renderer installed 2.319.0.
				Config:      pinned("2.328.0", bothSums),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid runner version", "below GitHub's minimum runner version "+runnerversion.Floor),
			},
			{
				Config:      pinned("2.340.0", `  runner_sha256_x64 = "`+strings.Repeat("1a", 32)+`"`+"\n"),
				PlanOnly:    true,
				ExpectError: errorLike("Missing runner checksum", "runner_sha256_arm64 is required with runner_version"),
			},
			{
				Config: pinned("2.340.0", bothSums),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("runner_version"), knownvalue.StringExact("2.340.0")),
				},
				Check: func(s *terraform.State) error {
					r := s.RootModule().Resources[addr].Primary.Attributes["rendered"]
					for _, want := range []string{"readonly RUNNER_VERSION='2.340.0'", strings.Repeat("1a", 32), strings.Repeat("2b", 32)} {
						if !strings.Contains(r, want) {
							return fmt.Errorf("rendered user data lacks %q", want)
						}
					}
					return nil
				},
			},
			{
				// Unpinned, the script installs the compiled-in release, which GitHub registers.
				Config: providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table = "runnerpool-prod"
` + agentArtifacts + `
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("runner_version"), knownvalue.StringExact(runnerversion.Default.Version)),
				},
			},
		},
	})
}
