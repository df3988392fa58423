// Acceptance tests of runnerpool_state_table against DynamoDB Local.
package provider

import (
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func tableConfig(t *testing.T, name, extra string) string {
	return providerConfig(t) + fmt.Sprintf(`
resource "runnerpool_state_table" "main" {
  name = %q
%s
}
`, name, extra)
}

// tableGone is a CheckDestroy: the table must not exist any more.
func tableGone(t *testing.T, name string) func(*terraform.State) error {
	return func(*terraform.State) error {
		_, err := stacktest.Shared(t).DynamoDB().DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		var nf *ddbtypes.ResourceNotFoundException
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("table %s still exists after destroy (DescribeTable: %v)", name, err)
	}
}

func TestAccStateTable(t *testing.T) {
	st := stacktest.Shared(t)
	db := st.DynamoDB()
	name := stacktest.UniqueName(t, "tf")
	addr := "runnerpool_state_table.main"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             tableGone(t, name),
		Steps: []resource.TestStep{
			{
				Config: tableConfig(t, name, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(name)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("billing_mode"), knownvalue.StringExact("PAY_PER_REQUEST")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("ttl_enabled"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("ttl_attribute"), knownvalue.StringExact("ttl")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("arn"), knownvalue.StringRegexp(regexp.MustCompile(`:table/`+name+`$`))),
				},
				Check: func(*terraform.State) error {
					// The table has the product's schema: the store works on it.
					s := store.New(db, name)
					if _, err := s.Create(t.Context(), store.Instance{ID: "i-0probe", State: store.StateWarming, Pool: "p",
						Threshold: time.Now().Add(time.Hour)}); err != nil {
						return fmt.Errorf("store on the created table: %w", err)
					}
					_, err := s.Transition(t.Context(), "i-0probe", store.Change{From: []store.State{store.StateWarming}, To: store.StateTerminated})
					return err
				},
			},
			{
				// In place: billing mode, capacities, deletion protection and time to live.
				Config: tableConfig(t, name, `
  billing_mode        = "PROVISIONED"
  read_capacity       = 5
  write_capacity      = 3
  deletion_protection = true
  ttl_enabled         = false
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("billing_mode"), knownvalue.StringExact("PROVISIONED")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("read_capacity"), knownvalue.Int64Exact(5)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("write_capacity"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("deletion_protection"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("ttl_enabled"), knownvalue.Bool(false)),
				},
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
			{
				// A protected table is not destroyed: removing it from the configuration fails.
				Config:      providerConfig(t),
				ExpectError: errorLike("Table is protected against deletion", "deletion_protection = false"),
			},
			{
				Config: tableConfig(t, name, `
  billing_mode = "PAY_PER_REQUEST"
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
			},
			{
				// Deleted out of band: the next plan re-creates it.
				PreConfig: func() {
					if _, err := db.DeleteTable(t.Context(), &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
						t.Fatalf("deleting the table out of band: %v", err)
					}
				},
				Config: tableConfig(t, name, `
  billing_mode = "PAY_PER_REQUEST"
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
				}},
			},
			{
				// A table with live instances is not destroyed without force_destroy.
				PreConfig: func() {
					if _, err := store.New(db, name).Create(t.Context(), store.Instance{ID: "i-0live", State: store.StateWarming,
						Pool: "p", Threshold: time.Now().Add(time.Hour)}); err != nil {
						t.Fatalf("writing a live instance: %v", err)
					}
				},
				Config:      providerConfig(t),
				ExpectError: errorLike("Table still holds live instances", "1 live instance record(s), for example i-0live (warming)"),
			},
			{
				Config: tableConfig(t, name, `
  force_destroy = true
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
			},
			// The test's destroy then deletes it, live instance and all; CheckDestroy verifies.
		},
	})
}

func TestAccStateTablePlanValidation(t *testing.T) {
	name := stacktest.UniqueName(t, "tf")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config:      tableConfig(t, name, `  billing_mode = "PROVISIONED"`),
				PlanOnly:    true,
				ExpectError: errorLike("Missing capacity", "read_capacity is required when billing_mode is PROVISIONED"),
			},
			{
				Config:      tableConfig(t, name, `  read_capacity = 5`),
				PlanOnly:    true,
				ExpectError: errorLike("Capacity without PROVISIONED", "read_capacity = 5"),
			},
			{
				Config:      tableConfig(t, "x", ``),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid table name", `name = "x"`),
			},
		},
	})
}
