package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// providerConfig is a configuration of runnerpool resources, the provider pinned to the release and
// pointed at the local stack (as the provider's acceptance tests point it, provider/provider_test.go).
const providerConfig = `terraform {
  required_providers {
    runnerpool = {
      source  = "runnerpool/runnerpool"
      version = "%s"
    }
  }
}

provider "runnerpool" {
  region        = %q
  deployment_id = "rehearsal"
  endpoints {
    dynamodb = %q
    sqs      = %q
  }
}

resource "runnerpool_state_table" "main" {
  name          = "rehearsal"
  force_destroy = true
}

resource "runnerpool_runner_class" "small" {
  table      = runnerpool_state_table.main.name
  name       = "small"
  image      = "ami-0123456789abcdef0"
  cpu        = 2
  memory_mib = 4096
  subnets    = ["subnet-0123456789abcdef0"]
  queue_url  = "https://sqs.us-east-1.amazonaws.com/123456789012/runnerpool-small"
}
`

// providerMirrorStep installs the provider from the release host as docs/guides/local-build.md says
// (its "provider-mirror" block: the zip and SHA256SUMS downloaded and checked, a filesystem mirror,
// a CLI configuration that takes runnerpool/runnerpool from it only, a lock file from
// `terraform providers lock -fs-mirror`), then runs init, plan, apply and destroy against a local
// stack started here.
func providerMirrorStep(ctx context.Context, r *R) error {
	tfOut, err := r.run(ctx, r.Root, r.Env(), "tools/tf/ensure-terraform.sh", "terraform")
	if err != nil {
		return err
	}
	tf := strings.TrimSpace(lastLine(tfOut))
	st, err := stack.Start(ctx, stack.Options{NodeDir: filepath.Join(r.Checkout, "test", "stack", "node")})
	if err != nil {
		return fmt.Errorf("local stack: %w", err)
	}
	defer func() { _ = st.Close() }()

	dir := filepath.Join(r.Work, "provider")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The guide's block installs the zip under PROVIDER_VERSION.
	const version = "0.0.1"
	cfg := fmt.Sprintf(providerConfig, version, stack.Region, st.Endpoints.DynamoDB, st.Endpoints.SQS)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(cfg), 0o644); err != nil {
		return err
	}
	block, err := guideBlock(r.Root, "provider-mirror")
	if err != nil {
		return err
	}
	env := r.Env(append(st.Env(), "PATH="+filepath.Dir(tf)+":"+os.Getenv("PATH"), "TF_IN_AUTOMATION=1", "PLATFORM=linux_amd64", "PROVIDER_VERSION="+version)...)
	if _, err := r.bash(ctx, dir, env, block); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, ".terraform.lock.hcl")); err != nil {
		return fmt.Errorf("the guide's block wrote no lock file: %w", err)
	}
	env = append(env, "TF_CLI_CONFIG_FILE="+filepath.Join(dir, "runnerpool.tfrc"))
	for _, args := range [][]string{
		{"init", "-input=false"},
		{"plan", "-input=false", "-out=plan"},
		{"apply", "-input=false", "plan"},
		{"destroy", "-input=false", "-auto-approve"},
	} {
		if _, err := r.run(ctx, dir, env, tf, args...); err != nil {
			return err
		}
	}
	return nil
}
