// iam_sim_test.go checks the runner role of examples/complete with an IAM simulator we did not write
// (test/stack/iamsim: @cloud-copilot/iam-simulate), on the role's policies as the example's .tf
// files evaluate them: the agent's calls and the refusals of iam_test.go, and self-termination.
package agent_test

import (
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/iamsim"
)

// The account, region and deployment the simulated requests are made in (the deployment is the
// tfvars example's).
const (
	simAccount    = "123456789012"
	simRegion     = "us-east-1"
	simDeployment = "ci-prod"
)

// runnerRolePolicies evaluates examples/complete and returns the runner role's inline policies, and
// the state table's ARN.
func runnerRolePolicies(t *testing.T) ([]iamsim.Policy, string) {
	t.Helper()
	m, err := exampletf.Load("../../examples/complete", exampletf.Inputs{
		Account: simAccount, Partition: "aws", Region: simRegion, VarFile: "terraform.tfvars.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := m.RolePolicies("runner")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("examples/complete attaches no policy to aws_iam_role.runner")
	}
	var pols []iamsim.Policy
	for name, doc := range docs {
		pols = append(pols, iamsim.Policy{Name: name, Policy: []byte(doc)})
	}
	table := m.Resource("resource", "runnerpool_state_table", "main").GetAttr("arn").AsString()
	return pols, table
}

// simRequest is the request of a case as the simulator takes it: signed by the role session EC2
// names after the instance, on the state table, with the case's condition keys.
func simRequest(r request, table string) iamsim.Request {
	ctx := map[string]any{}
	for k, v := range r.context() {
		switch k {
		case "dynamodb:LeadingKeys", "dynamodb:Attributes":
			ctx[k] = v // multi-valued keys
		default:
			ctx[k] = v[0]
		}
	}
	return iamsim.Request{Action: r.action, Resource: table, Account: simAccount, Context: ctx,
		Principal: "arn:aws:sts::" + simAccount + ":assumed-role/runnerpool-" + simDeployment + "-runner/" + instanceID(r.sourceARN)}
}

func instanceID(arn string) string {
	return arn[len(store.InstanceARNPrefix(simRegion, simAccount)):]
}

// simulateCases runs every case through the simulator and checks its decision.
func simulateCases(t *testing.T, cases []policyCase) {
	t.Helper()
	pols, table := runnerRolePolicies(t)
	reqs := make([]iamsim.Request, len(cases))
	for i, tc := range cases {
		reqs[i] = simRequest(tc.r, table)
	}
	checkSimulated(t, pols, reqs, func(i int) (string, bool) { return cases[i].name, cases[i].want })
}

// checkSimulated asks the simulator and compares each decision with the wanted one.
func checkSimulated(t *testing.T, pols []iamsim.Policy, reqs []iamsim.Request, want func(int) (string, bool)) {
	t.Helper()
	decisions, err := iamsim.Simulate(t.Context(), pols, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range decisions {
		name, allow := want(i)
		if got := d == iamsim.Allowed; got != allow {
			t.Errorf("simulator: %s: %s, want allowed=%v", name, d, allow)
		}
	}
}

// TestExampleRunnerTerminatesOnlyItselfInSimulator: the runner role lets an instance terminate
// itself when it carries the deployment's tag, never another instance nor an instance of another
// deployment, as the independent simulator evaluates the example's TerminateSelf statement.
func TestExampleRunnerTerminatesOnlyItselfInSimulator(t *testing.T) {
	t.Parallel()
	pols, _ := runnerRolePolicies(t)
	prefix := store.InstanceARNPrefix(simRegion, simAccount)
	self := prefix + "i-0abc"
	terminate := func(target, deployment string) iamsim.Request {
		ctx := map[string]any{"ec2:SourceInstanceARN": self, "ec2:InstanceID": instanceID(target),
			"aws:EC2InstanceSourceVPC": "vpc-0runners", "aws:EC2InstanceSourcePrivateIPv4": "10.0.1.17"}
		if deployment != "" {
			ctx["aws:ResourceTag/runnerpool:deployment"] = deployment
		}
		return iamsim.Request{Action: "ec2:TerminateInstances", Resource: target, Account: simAccount, Context: ctx,
			Principal: "arn:aws:sts::" + simAccount + ":assumed-role/runnerpool-" + simDeployment + "-runner/i-0abc"}
	}
	cases := []struct {
		name string
		r    iamsim.Request
		want bool
	}{
		{"terminate itself", terminate(self, simDeployment), true},
		{"terminate another instance of the deployment", terminate(prefix+"i-0other", simDeployment), false},
		{"terminate itself without the deployment tag", terminate(self, ""), false},
		{"terminate itself tagged for another deployment", terminate(self, "other"), false},
		{"stop itself", func() iamsim.Request { r := terminate(self, simDeployment); r.Action = "ec2:StopInstances"; return r }(), false},
	}
	reqs := make([]iamsim.Request, len(cases))
	for i, tc := range cases {
		reqs[i] = tc.r
	}
	checkSimulated(t, pols, reqs, func(i int) (string, bool) { return cases[i].name, cases[i].want })
}

// TestExampleRunnerShipsLogsOnlyToItsGroupInSimulator: the runner role may add log streams and events
// to the deployment's instance log group, /runnerpool/<deployment>/instances, and nothing else of
// CloudWatch Logs: no other group, no reading, no deleting.
func TestExampleRunnerShipsLogsOnlyToItsGroupInSimulator(t *testing.T) {
	t.Parallel()
	pols, _ := runnerRolePolicies(t)
	group := "arn:aws:logs:" + simRegion + ":" + simAccount + ":log-group:/runnerpool/" + simDeployment + "/instances"
	other := "arn:aws:logs:" + simRegion + ":" + simAccount + ":log-group:/aws/lambda/payments"
	logs := func(action, resource string) iamsim.Request {
		return iamsim.Request{Action: action, Resource: resource, Account: simAccount,
			Principal: "arn:aws:sts::" + simAccount + ":assumed-role/runnerpool-" + simDeployment + "-runner/i-0abc"}
	}
	cases := []struct {
		name string
		r    iamsim.Request
		want bool
	}{
		{"create its stream", logs("logs:CreateLogStream", group+":log-stream:i-0abc/bootstrap"), true},
		{"put its events", logs("logs:PutLogEvents", group+":log-stream:i-0abc/journal"), true},
		{"put events in another group", logs("logs:PutLogEvents", other+":log-stream:x"), false},
		{"read the group's events", logs("logs:GetLogEvents", group+":log-stream:i-0other/journal"), false},
		{"delete the group", logs("logs:DeleteLogGroup", group), false},
	}
	reqs := make([]iamsim.Request, len(cases))
	for i, tc := range cases {
		reqs[i] = tc.r
	}
	checkSimulated(t, pols, reqs, func(i int) (string, bool) { return cases[i].name, cases[i].want })
}
