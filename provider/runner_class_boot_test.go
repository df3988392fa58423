package provider

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// TestAccRunnerClassRegistrationWait: a class's own registration_wait reaches the table, where the
// reconciler takes it instead of what the image says (declared.RunnerClass.BootWait); unset again, it
// is gone; out of its bounds, plan refuses it.
func TestAccRunnerClassRegistrationWait(t *testing.T) {
	table := stacktest.UniqueName(t, "tf")
	class := uniqueName(t, "small")
	stored := func(want time.Duration) resource.TestCheckFunc {
		return func(*terraform.State) error {
			rc, _, err := declared.NewRepository(store.New(stacktest.Shared(t).DynamoDB(), table)).GetRunnerClass(t.Context(), class)
			if err != nil {
				return err
			}
			if rc.RegistrationWait.Std() != want {
				return fmt.Errorf("stored registration_wait %s, want %s", rc.RegistrationWait.Std(), want)
			}
			return nil
		}
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config:      classConfig(t, table, class, "  registration_wait = \"10s\""),
				ExpectError: regexp.MustCompile(`between 30s and 1h`),
			},
			{
				Config: classConfig(t, table, class, "  registration_wait = \"20m\""),
				Check:  stored(20 * time.Minute),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("runnerpool_runner_class.small", tfjsonpath.New("registration_wait"), knownvalue.StringExact("20m")),
				},
			},
			{
				Config: classConfig(t, table, class, ""),
				Check:  stored(0),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("runnerpool_runner_class.small", tfjsonpath.New("registration_wait"), knownvalue.Null()),
				},
			},
		},
	})
}
