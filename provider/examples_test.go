// Plans every documentation example against the provider.
package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// exampleTable is the table name the examples use; the test swaps in a table of its own.
const exampleTable = "runnerpool-ci-prod"

// TestAccExamples plans every resource and data source example (the documentation's Example Usage)
// against the provider, so an example that no longer matches the schema, or fails validation, fails
// here rather than in a reader's terraform plan. Data sources read a table holding the pool the
// examples name. Resources that belong to other providers (the launch template of the user data
// example) are cut off.
func TestAccExamples(t *testing.T) {
	if os.Getenv(resource.EnvTfAcc) == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc)")
	}
	st := stacktest.Shared(t)
	table := stacktest.UniqueName(t, "tf")
	if err := store.CreateTable(t.Context(), st.DynamoDB(), table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		_, _ = st.DynamoDB().DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	repo := declared.NewRepository(store.New(st.DynamoDB(), table))
	rc := declared.RunnerClass{
		Name: "small-x64", Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096,
		Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
		UsageClass: declared.UsageOnDemand, Subnets: []string{"subnet-0123456789abcdef0"},
		MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(10 * time.Minute),
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/ci-prod-pool-small-x64",
	}
	if _, err := repo.PutRunnerClass(t.Context(), rc, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.PutWarmPool(t.Context(), declared.WarmPool{Name: "small-x64", RunnerClass: "small-x64", Timezone: "Europe/Paris",
		Schedules: []schedule.Schedule{{Name: "default", Hot: 1, Stopped: 2}}}, 0); err != nil {
		t.Fatal(err)
	}

	files, err := filepath.Glob(filepath.Join("..", "examples", "*", "runnerpool_*", "*.tf"))
	if err != nil || len(files) < 7 {
		t.Fatalf("found %d example files (%v), want one per resource and data source", len(files), err)
	}
	for _, f := range files {
		kind := filepath.Base(filepath.Dir(filepath.Dir(f)))
		t.Run(kind+"/"+filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			example := string(raw)
			if i := strings.Index(example, `resource "aws_`); i >= 0 {
				example = example[:i]
			}
			example = strings.ReplaceAll(example, exampleTable, table)
			step := resource.TestStep{Config: providerConfig(t) + example}
			if kind == "resources" {
				// Planning is the check; applying the examples would need their AMIs and subnets.
				step.PlanOnly, step.ExpectNonEmptyPlan = true, true
			}
			resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: []resource.TestStep{step}})
		})
	}
}
