// Acceptance tests of runnerpool_pool_queue against fauxqs.
package provider

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func queueConfig(t *testing.T, runnerClass, extra string) string {
	return providerConfig(t) + fmt.Sprintf(`
resource "runnerpool_pool_queue" "small" {
  runner_class = %q
%s
}
`, runnerClass, extra)
}

func TestAccPoolQueue(t *testing.T) {
	q := stacktest.Shared(t).SQS()
	class := uniqueName(t, "queue")
	name := "acc-pool-" + class // the default name, with the tests' deployment_id "acc"
	addr := "runnerpool_pool_queue.small"
	var url string
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := q.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)}); !queueMissing(err) {
				return fmt.Errorf("queue %s still exists after destroy (GetQueueUrl: %v)", name, err)
			}
			// The scope queue the reconciler made (last step) goes with it.
			if left, err := pool.ListScopeQueues(t.Context(), q, url); err != nil || len(left) != 0 {
				return fmt.Errorf("scope queues after destroy: %v, %v; want none", left, err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: queueConfig(t, class, `
  tags = {
    team = "ci"
  }
`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("name"), knownvalue.StringExact(name)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("url"), knownvalue.StringRegexp(regexp.MustCompile(`/`+name+`$`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("visibility_timeout_seconds"), knownvalue.Int64Exact(30)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("encryption"), knownvalue.StringExact("sse-sqs")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("tags"), knownvalue.MapExact(map[string]knownvalue.Check{
						"team": knownvalue.StringExact("ci"),
					})),
				},
				Check: func(s *terraform.State) error {
					url = s.RootModule().Resources[addr].Primary.ID
					out, err := q.ListQueueTags(t.Context(), &sqs.ListQueueTagsInput{QueueUrl: aws.String(url)})
					if err != nil {
						return err
					}
					if out.Tags[tags.RunnerClass] != class || out.Tags[tags.Deployment] != "acc" || out.Tags["team"] != "ci" {
						return fmt.Errorf("queue tags = %v", out.Tags)
					}
					return nil
				},
			},
			{
				Config: queueConfig(t, class, `
  visibility_timeout_seconds = 60
  message_retention_seconds  = 3600
  encryption                 = "sse-kms"
  kms_master_key_id          = "alias/aws/sqs"
  tags = {
    team  = "platform"
    owner = "ci"
  }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("visibility_timeout_seconds"), knownvalue.Int64Exact(60)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("message_retention_seconds"), knownvalue.Int64Exact(3600)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("encryption"), knownvalue.StringExact("sse-kms")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("tags"), knownvalue.MapSizeExact(2)),
				},
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateVerify: true,
			},
			{
				// Import by name reads the runner class from the queue's tag.
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     name,
				ImportStateVerify: true,
			},
			{
				PreConfig: func() {
					if _, err := q.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
						t.Fatalf("deleting the queue out of band: %v", err)
					}
				},
				Config: queueConfig(t, class, `
  visibility_timeout_seconds = 60
  message_retention_seconds  = 3600
  encryption                 = "sse-kms"
  kms_master_key_id          = "alias/aws/sqs"
  tags = {
    team  = "platform"
    owner = "ci"
  }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
				}},
				// A release into a repository makes its scope queue, as the reconciler does.
				Check: func(s *terraform.State) error {
					url = s.RootModule().Resources[addr].Primary.ID
					scoped := pool.NewScopedQueue(q, url, pool.ScopeOptions{})
					if err := scoped.Put(t.Context(), pool.Message{InstanceID: "i-0123456789abcdef0", UsageClass: "on-demand", InstanceType: "c6i.large",
						Scope: "acme/api", Threshold: time.Now().Add(time.Hour)}, 0); err != nil {
						return err
					}
					if made, err := pool.ListScopeQueues(t.Context(), q, url); err != nil || len(made) != 1 {
						return fmt.Errorf("scope queues = %v, %v; want acme/api's", made, err)
					}
					return nil
				},
			},
		},
	})
}

func TestAccPoolQueuePlanValidation(t *testing.T) {
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config:      queueConfig(t, "small", `  encryption = "sse-kms"`),
				PlanOnly:    true,
				ExpectError: errorLike("Missing KMS key", `encryption = "sse-kms" needs kms_master_key_id`),
			},
			{
				Config:      queueConfig(t, "Small X64", `  visibility_timeout_seconds = -1`),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid runner class name", `runner_class = "Small X64"`, "Invalid visibility timeout", "visibility_timeout_seconds = -1"),
			},
			{
				Config:      queueConfig(t, "small", "  tags = {\n    \"runnerpool:pool\" = \"x\"\n  }"),
				PlanOnly:    true,
				ExpectError: errorLike("Reserved tag key"),
			},
		},
	})
}

// TestAccPoolQueueUnknownRunnerClass: a runner class known only at apply still gets the default name.
func TestAccPoolQueueUnknownRunnerClass(t *testing.T) {
	class := uniqueName(t, "late")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: providerConfig(t) + fmt.Sprintf(`
resource "terraform_data" "class" {
  input = %q
}

resource "runnerpool_pool_queue" "late" {
  runner_class = terraform_data.class.output
}
`, class),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectUnknownValue("runnerpool_pool_queue.late", tfjsonpath.New("name")),
			}},
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("runnerpool_pool_queue.late", tfjsonpath.New("name"), knownvalue.StringExact("acc-pool-"+class)),
			},
		}},
	})
}
