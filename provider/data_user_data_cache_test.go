package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
)

// TestAccUserDataCacheURL: runnerpool_user_data's cache_url reaches the agent of a class whose cache
// block is enabled (the reconciler re-renders the user data with the class, userdata.WithClass) as
// -cache-control-plane, and no other class's; a URL that is not one is refused at plan.
func TestAccUserDataCacheURL(t *testing.T) {
	addr := "data.runnerpool_user_data.boot"
	cfg := func(url string) string {
		return providerConfig(t) + `
data "runnerpool_user_data" "boot" {
  table     = "runnerpool-prod"
  cache_url = "` + url + `"
` + agentArtifacts + `
}
`
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config:      cfg("runnerpool.example.com"),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid cache URL"),
			},
			{
				Config: cfg("https://runnerpool.example.com"),
				Check: func(s *terraform.State) error {
					base := s.RootModule().Resources[addr].Primary.Attributes["rendered"]
					if strings.Contains(base, "-cache-control-plane") {
						return fmt.Errorf("the base user data starts the cache for every class")
					}
					on, err := userdata.WithClass(base, userdata.Class{Cache: true})
					if err != nil {
						return err
					}
					if !strings.Contains(on, " -cache-control-plane https://runnerpool.example.com") {
						return fmt.Errorf("a class with the cache on: its user data does not start the cache server")
					}
					off, err := userdata.WithClass(base, userdata.Class{})
					if err != nil {
						return err
					}
					if strings.Contains(off, "-cache-control-plane") {
						return fmt.Errorf("a class without the cache starts the cache server")
					}
					return nil
				},
			},
		},
	})
}
