package servicetest

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
)

// Example evaluates the example module in dir (examples/complete) with its tfvars example and vars,
// in the environment's account and region, its deployment id the environment's (the instances the
// environment launches carry it), the GitHub App the GitHub fake's, and the resources a provider
// would create answered by the local stack: the state table, the pool queues, the pool-job queue,
// the launch template. It fails the test when the module does not evaluate whole.
func (e *Env) Example(t testing.TB, dir string, vars map[string]cty.Value) *exampletf.Module {
	t.Helper()
	in := exampletf.Inputs{Account: Account, Partition: "aws", Region: Region, VarFile: "terraform.tfvars.example", Vars: map[string]cty.Value{}}
	for k, v := range vars {
		in.Vars[k] = v
	}
	def := exampletf.DefaultComputed(in)
	in.Computed = func(mode, typ string, attrs map[string]cty.Value) map[string]cty.Value {
		out := def(mode, typ, attrs)
		switch mode + " " + typ {
		case "resource runnerpool_state_table":
			out["name"] = cty.StringVal(e.Table)
		case "resource runnerpool_pool_queue":
			out["url"] = cty.StringVal(e.QueueURL)
		case "resource aws_sqs_queue":
			out["url"] = cty.StringVal(e.JobQueueURL)
		case "resource aws_launch_template":
			out["id"] = cty.StringVal(e.LaunchTemplate)
		}
		return out
	}
	m, err := exampletf.Load(dir, in)
	if err != nil {
		t.Fatal(err)
	}
	app := m.Variable("github_app")
	if app == cty.NilVal || app.IsNull() {
		t.Fatalf("%s's tfvars example sets no github_app (the App's id and private key secret)", dir)
	}
	in.Vars["deployment_id"] = cty.StringVal(Deployment)
	in.Vars["github_app"] = cty.ObjectVal(map[string]cty.Value{
		"id": cty.NumberIntVal(e.GitHub.AppID()), "private_key_secret_arn": app.GetAttr("private_key_secret_arn"),
	})
	if m, err = exampletf.Load(dir, in); err != nil {
		t.Fatal(err)
	}
	if u := m.Unresolved(); len(u) > 0 {
		t.Fatalf("%s does not evaluate whole:\n%s", dir, strings.Join(u, "\n"))
	}
	return m
}
