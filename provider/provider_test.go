// Test setup of the provider package (environment for the acceptance tests, the provider served
// in-process), schema checks and provider configuration tests.
package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

// TestMain prepares the acceptance tests' environment, then runs the tests on the shared stack.
//
// The tests serve the provider in-process (terraform-plugin-testing's reattach mode) as
// runnerpool/runnerpool. They run with the CLI in TF_ACC_TERRAFORM_PATH: Terraform, or OpenTofu
// (detected from `version`, which makes the provider host registry.opentofu.org). Without
// TF_ACC_TERRAFORM_PATH they use `terraform` on PATH, else the build tools/tf/ensure-terraform.sh
// caches; they never download a CLI.
func TestMain(m *testing.M) {
	if err := accEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "provider tests:", err)
		os.Exit(1)
	}
	stacktest.Main(m)
}

func accEnv() (err error) {
	set := func(k, v string) {
		if e := os.Setenv(k, v); e != nil && err == nil {
			err = e
		}
	}
	setDefault := func(k, v string) {
		if os.Getenv(k) == "" {
			set(k, v)
		}
	}
	// The provider runs in this process and takes AWS credentials from the default chain: the
	// stack's dummy ones, and never a developer's profile or an instance role.
	setDefault("AWS_ACCESS_KEY_ID", stack.AccessKeyID)
	setDefault("AWS_SECRET_ACCESS_KEY", stack.SecretAccessKey)
	set("AWS_EC2_METADATA_DISABLED", "true")
	setDefault("TF_ACC_PROVIDER_NAMESPACE", "runnerpool")
	rc, absErr := filepath.Abs(filepath.Join("testdata", "cli.tfrc"))
	if absErr != nil {
		return absErr
	}
	set("TF_CLI_CONFIG_FILE", rc)
	set("TOFU_CLI_CONFIG_FILE", rc)
	if err != nil || os.Getenv("TF_ACC") == "" {
		return err
	}
	if os.Getenv("TF_ACC_TERRAFORM_PATH") == "" {
		bin, lookErr := exec.LookPath("terraform")
		if lookErr != nil {
			bin = filepath.Join(stack.ToolsCache(), "terraform-v1.5.7", "terraform")
			if _, statErr := os.Stat(bin); statErr != nil {
				return fmt.Errorf("TF_ACC is set but there is no terraform on PATH nor in %s: run tools/tf/ensure-terraform.sh terraform "+
					"(or set TF_ACC_TERRAFORM_PATH)", bin)
			}
		}
		set("TF_ACC_TERRAFORM_PATH", bin)
	}
	if os.Getenv("TF_ACC_PROVIDER_HOST") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, runErr := exec.CommandContext(ctx, os.Getenv("TF_ACC_TERRAFORM_PATH"), "version").Output()
		if runErr != nil {
			return fmt.Errorf("running %s version: %w", os.Getenv("TF_ACC_TERRAFORM_PATH"), runErr)
		}
		if strings.Contains(string(out), "OpenTofu") {
			// OpenTofu resolves runnerpool/runnerpool on its own registry.
			set("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
		}
	}
	return err
}

// testFactories serves the provider, with the clock now, to the CLI.
func testFactories(now func() time.Time) map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"runnerpool": providerserver.NewProtocol6WithError(newWithClock("test", now)()),
	}
}

var factories = testFactories(time.Now)

// providerConfig points the provider at the shared stack.
func providerConfig(t *testing.T) string {
	t.Helper()
	st := stacktest.Shared(t)
	return fmt.Sprintf(`
terraform {
  required_providers {
    runnerpool = {
      source = "runnerpool/runnerpool"
    }
  }
}

provider "runnerpool" {
  region        = %q
  deployment_id = "acc"
  endpoints {
    dynamodb = %q
    sqs      = %q
  }
}
`, stack.Region, st.Endpoints.DynamoDB, st.Endpoints.SQS)
}

// TestSchemas checks every schema through the protocol server (which refuses invalid schemas) and
// that every attribute and block is documented: the MarkdownDescription is what tfplugindocs renders.
func TestSchemas(t *testing.T) {
	t.Parallel()
	resp := providerSchema(t)
	for _, d := range resp.Diagnostics {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			t.Errorf("schema: %s: %s", d.Summary, d.Detail)
		}
	}
	undocumented(t, "provider", resp.Provider.Block)
	if len(resp.ResourceSchemas) != 5 || len(resp.DataSourceSchemas) != 3 {
		t.Errorf("got %d resources and %d data sources, want 5 and 3", len(resp.ResourceSchemas), len(resp.DataSourceSchemas))
	}
	for name, s := range resp.ResourceSchemas {
		if s.Block.Description == "" {
			t.Errorf("%s has no description", name)
		}
		undocumented(t, name, s.Block)
	}
	for name, s := range resp.DataSourceSchemas {
		if s.Block.Description == "" {
			t.Errorf("%s has no description", name)
		}
		undocumented(t, name, s.Block)
	}
}

// TestSchemasSayReplacement: every attribute a configuration sets says whether changing it replaces
// the resource, and says it right (RequiresReplace, as Terraform gets it in the schema).
func TestSchemasSayReplacement(t *testing.T) {
	t.Parallel()
	resp := providerSchema(t)
	var block func(string, *tfprotov6.SchemaBlock)
	block = func(at string, b *tfprotov6.SchemaBlock) {
		for _, a := range b.Attributes {
			if !a.Required && !a.Optional {
				continue
			}
			forces, inPlace := strings.Contains(a.Description, forcesReplacement), strings.Contains(a.Description, updatedInPlace)
			if forces == inPlace {
				t.Errorf("%s%s: the description does not say whether a change replaces the resource: %q", at, a.Name, a.Description)
			}
		}
		for _, nb := range b.BlockTypes {
			block(at+nb.TypeName+".", nb.Block)
		}
	}
	for _, name := range []string{"runnerpool_state_table", "runnerpool_pool_queue", "runnerpool_runner_class", "runnerpool_warm_pool"} {
		s, ok := resp.ResourceSchemas[name]
		if !ok {
			t.Fatalf("no schema for %s", name)
		}
		block(name+".", s.Block)
	}
	rc := resp.ResourceSchemas["runnerpool_warm_pool"]
	for _, a := range rc.Block.Attributes {
		if a.Name == "runner_class" && !strings.Contains(a.Description, forcesReplacement) {
			t.Errorf("runnerpool_warm_pool.runner_class: %q, want it to force replacement", a.Description)
		}
	}
}

// providerSchema is the provider's schema as Terraform gets it, through the protocol server.
func providerSchema(t *testing.T) *tfprotov6.GetProviderSchemaResponse {
	t.Helper()
	resp, err := providerserver.NewProtocol6(New("test")())().GetProviderSchema(t.Context(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// undocumented fails the test for attributes or nested blocks without a description, recursively.
func undocumented(t *testing.T, where string, b *tfprotov6.SchemaBlock) {
	t.Helper()
	var attrs func(string, []*tfprotov6.SchemaAttribute)
	attrs = func(at string, as []*tfprotov6.SchemaAttribute) {
		for _, a := range as {
			if a.Description == "" {
				t.Errorf("%s: attribute %s%s has no MarkdownDescription", where, at, a.Name)
			}
			if a.NestedType != nil {
				attrs(at+a.Name+".", a.NestedType.Attributes)
			}
		}
	}
	var block func(string, *tfprotov6.SchemaBlock)
	block = func(at string, b *tfprotov6.SchemaBlock) {
		attrs(at, b.Attributes)
		for _, nb := range b.BlockTypes {
			if nb.Block.Description == "" {
				t.Errorf("%s: block %s%s has no MarkdownDescription", where, at, nb.TypeName)
			}
			block(at+nb.TypeName+".", nb.Block)
		}
	}
	block("", b)
}

// errorLike matches the CLI's rendering of a diagnostic, which wraps lines: each part is quoted,
// spaces in it match any whitespace, and parts may be separated by anything.
func errorLike(parts ...string) *regexp.Regexp {
	for i, p := range parts {
		parts[i] = strings.Join(strings.Fields(regexp.QuoteMeta(p)), `\s+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(parts, ".*"))
}

// uniqueName is a runner class or pool name (lower-case) unique to this run: tests share one stack.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

func TestAccProviderConfiguration(t *testing.T) {
	st := stacktest.Shared(t)
	data := `
data "runnerpool_pool_status" "x" {
  table = "runnerpool-none"
}
`
	cfg := func(body string) string {
		return "provider \"runnerpool\" {\n" + body + "\n}\n" + data
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config:      cfg(`  region = "Europe"`),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid region", `region = "Europe"`),
			},
			{
				Config:      cfg(`  deployment_id = "CI_Prod"`),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid deployment id", `deployment_id = "CI_Prod"`),
			},
			{
				Config:      cfg("  region = \"us-east-1\"\n  assume_role {\n    session_name = \"x1\"\n  }"),
				PlanOnly:    true,
				ExpectError: errorLike("Missing role ARN", "The assume_role block needs role_arn."),
			},
			{
				Config:      cfg("  region = \"us-east-1\"\n  assume_role {\n    role_arn = \"arn:aws:iam::123456789012:role/x\"\n    duration = \"13h\"\n  }"),
				PlanOnly:    true,
				ExpectError: errorLike("Invalid session duration", "must be between 15m0s and 12h0m0s"),
			},
			{
				Config:      cfg("  region = \"us-east-1\"\n  profile = \"runnerpool-no-such-profile\""),
				PlanOnly:    true,
				ExpectError: errorLike("Cannot configure AWS access", "runnerpool-no-such-profile"),
			},
			{
				// The endpoints block reaches the stack: the table does not exist there.
				Config:      cfg(fmt.Sprintf("  region = \"us-east-1\"\n  endpoints {\n    dynamodb = %q\n  }", st.Endpoints.DynamoDB)),
				ExpectError: errorLike("Cannot list live instances", "runnerpool-none", "not found"),
			},
		},
	})
}

// secretLike matches attribute names that would carry a credential.
var secretLike = regexp.MustCompile(`(?i)(token|secret|password|passphrase|private_key|credential|api_key|access_key|jitconfig)`)

// TestNoSecretsInState: no resource or data source takes or returns a secret, so none reaches
// Terraform state or plan output. Instances get their per-claim credentials through their own items
// in the state table, from the reconciler; the GitHub credentials and the webhook secret are the
// reconciler's settings, never Terraform's. A schema change that adds a sensitive or credential-like
// attribute fails here, and docs/security.md's line must be revisited with it.
func TestNoSecretsInState(t *testing.T) {
	t.Parallel()
	resp := providerSchema(t)
	var attrs func(where string, as []*tfprotov6.SchemaAttribute)
	attrs = func(where string, as []*tfprotov6.SchemaAttribute) {
		for _, a := range as {
			if a.Sensitive || secretLike.MatchString(a.Name) {
				t.Errorf("%s%s (sensitive %v) looks like a secret: it would be stored in Terraform state", where, a.Name, a.Sensitive)
			}
			if a.NestedType != nil {
				attrs(where+a.Name+".", a.NestedType.Attributes)
			}
		}
	}
	var block func(where string, b *tfprotov6.SchemaBlock)
	block = func(where string, b *tfprotov6.SchemaBlock) {
		attrs(where, b.Attributes)
		for _, nb := range b.BlockTypes {
			block(where+nb.TypeName+".", nb.Block)
		}
	}
	n := 0
	for name, s := range resp.ResourceSchemas {
		block(name+".", s.Block)
		n++
	}
	for name, s := range resp.DataSourceSchemas {
		block("data."+name+".", s.Block)
		n++
	}
	if n != 8 {
		t.Errorf("checked %d resources and data sources, want 8", n)
	}
}
