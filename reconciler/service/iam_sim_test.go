// iam_sim_test.go checks the reconciler's role of examples/complete with an IAM simulator we did not
// write (test/stack/iamsim: @cloud-copilot/iam-simulate), on the role's policies as the example's
// .tf files evaluate them: each action a replica called (TestReconcilerCallsAllowedByIAMPolicy) on
// the resources the example gives it, what AWS authorises beside a CreateFleet, and the refusals.
package service_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/iamsim"
)

const (
	simAccount    = "123456789012"
	simRegion     = "eu-west-1"
	simDeployment = "ci-prod" // the tfvars example's
)

// reconcilerRole is the example evaluated: the reconciler role's policies and the ARNs of what it acts on.
type reconcilerRole struct {
	policies                          []iamsim.Policy
	table, classQueue, scopeQueue     string
	jobQueue                          string
	launchTemplate, subnet, runnerSG  string
	runnerRole, principal, instanceOf string
}

func loadReconcilerRole(t *testing.T, vars map[string]cty.Value) reconcilerRole {
	t.Helper()
	m, err := exampletf.Load("../../examples/complete", exampletf.Inputs{
		Account: simAccount, Partition: "aws", Region: simRegion, VarFile: "terraform.tfvars.example", Vars: vars,
	})
	if err != nil {
		t.Fatal(err)
	}
	if u := m.Unresolved(); len(u) > 0 {
		t.Fatalf("examples/complete does not evaluate whole:\n%s", strings.Join(u, "\n"))
	}
	docs, err := m.RolePolicies("reconciler")
	if err != nil {
		t.Fatal(err)
	}
	r := reconcilerRole{
		table:          m.Resource("resource", "runnerpool_state_table", "main").GetAttr("arn").AsString(),
		classQueue:     m.Resource("resource", "runnerpool_pool_queue", "class").GetAttr("small-x64").GetAttr("arn").AsString(),
		jobQueue:       m.Resource("resource", "aws_sqs_queue", "pool_jobs").GetAttr("arn").AsString(),
		launchTemplate: m.Resource("resource", "aws_launch_template", "runner").GetAttr("small-x64").GetAttr("arn").AsString(),
		runnerSG:       m.Resource("resource", "aws_security_group", "runner").GetAttr("arn").AsString(),
		runnerRole:     m.Resource("resource", "aws_iam_role", "runner").GetAttr("arn").AsString(),
		subnet:         arn("ec2", "subnet/subnet-0123456789abcdef0"), // the tfvars example's first runner subnet
		principal:      "arn:aws:sts::" + simAccount + ":assumed-role/runnerpool-" + simDeployment + "-reconciler/task",
		instanceOf:     arn("ec2", "instance/i-0"),
	}
	r.scopeQueue = r.classQueue + "-s-0123abcd"
	for name, doc := range docs {
		r.policies = append(r.policies, iamsim.Policy{Name: name, Policy: []byte(doc)})
	}
	return r
}

func arn(service, resource string) string {
	return fmt.Sprintf("arn:aws:%s:%s:%s:%s", service, simRegion, simAccount, resource)
}

// simCase is one request of the reconciler and whether the role must allow it.
type simCase struct {
	name string
	req  iamsim.Request
	want bool
}

func (r reconcilerRole) req(action, resource string, ctx map[string]any) iamsim.Request {
	return iamsim.Request{Action: action, Resource: resource, Principal: r.principal, Account: simAccount, Context: ctx}
}

// ownInstance is a request on an instance carrying the deployment's tag (deployment "" : no tag).
func (r reconcilerRole) onInstance(action, deployment string) iamsim.Request {
	ctx := map[string]any{}
	if deployment != "" {
		ctx["aws:ResourceTag/runnerpool:deployment"] = deployment
	}
	return r.req(action, r.instanceOf, ctx)
}

// requestsFor are the requests IAM authorises for one action the reconciler called, on the
// resources of the example it calls it on. An action this does not know fails the test: a new call
// must say what it touches before the example's policy can be checked for it.
func (r reconcilerRole) requestsFor(action string) ([]simCase, error) {
	allow := func(name string, q iamsim.Request) simCase { return simCase{action + " " + name, q, true} }
	switch service, op, _ := strings.Cut(action, ":"); {
	case service == "dynamodb" && op == "Query":
		return []simCase{allow("the table", r.req(action, r.table, nil)), allow("an index", r.req(action, r.table+"/index/idx_state", nil))}, nil
	case service == "dynamodb":
		return []simCase{allow("the table", r.req(action, r.table, nil))}, nil
	case action == "sqs:ListQueues":
		return []simCase{allow("", r.req(action, "*", nil))}, nil
	case action == "sqs:CreateQueue" || action == "sqs:DeleteQueue":
		return []simCase{allow("a scope queue", r.req(action, r.scopeQueue, nil))}, nil
	case service == "sqs":
		return []simCase{allow("the class queue", r.req(action, r.classQueue, nil)), allow("a scope queue", r.req(action, r.scopeQueue, nil)),
			allow("the pool-job queue", r.req(action, r.jobQueue, nil))}, nil
	case service == "ec2" && strings.HasPrefix(op, "Describe"):
		return []simCase{allow("", r.req(action, "*", nil))}, nil
	case action == "ec2:CreateLaunchTemplateVersion" || action == "ec2:DeleteLaunchTemplateVersions":
		return []simCase{allow("the class's template", r.req(action, r.launchTemplate, nil))}, nil
	case action == "ec2:CreateFleet":
		return r.fleetLaunch(), nil
	case action == "ec2:StartInstances" || action == "ec2:StopInstances" || action == "ec2:TerminateInstances" || action == "ec2:CreateTags":
		return []simCase{allow("on a tagged instance", r.onInstance(action, simDeployment))}, nil
	}
	return nil, fmt.Errorf("%s: no resource known for it here (add it to requestsFor)", action)
}

// fleetLaunch is what AWS authorises for one instant CreateFleet from a class's launch template: the
// fleet call, RunInstances on every resource the launch uses, tags on create, the role passed.
func (r reconcilerRole) fleetLaunch() []simCase {
	tagged := map[string]any{"aws:RequestTag/runnerpool:deployment": simDeployment, "aws:TagKeys": []string{"runnerpool:deployment"}}
	c := func(name string, q iamsim.Request) simCase { return simCase{"CreateFleet: " + name, q, true} }
	out := []simCase{
		c("the fleet", r.req("ec2:CreateFleet", arn("ec2", "fleet/*"), nil)),
		c("its launch template", r.req("ec2:CreateFleet", r.launchTemplate, nil)),
		c("RunInstances of a tagged instance", r.req("ec2:RunInstances", r.instanceOf, tagged)),
		c("RunInstances from the launch template", r.req("ec2:RunInstances", r.launchTemplate, nil)),
		c("RunInstances in a runner subnet", r.req("ec2:RunInstances", r.subnet, nil)),
		c("RunInstances with the runners' security group", r.req("ec2:RunInstances", r.runnerSG, nil)),
		c("RunInstances of an image", r.req("ec2:RunInstances", "arn:aws:ec2:"+simRegion+"::image/ami-0123456789abcdef0", nil)),
		c("RunInstances of a volume", r.req("ec2:RunInstances", arn("ec2", "volume/*"), nil)),
		c("RunInstances of a network interface", r.req("ec2:RunInstances", arn("ec2", "network-interface/*"), nil)),
		c("tags on the new instance", r.req("ec2:CreateTags", r.instanceOf, map[string]any{"ec2:CreateAction": "CreateFleet"})),
		c("tags on its volume", r.req("ec2:CreateTags", arn("ec2", "volume/vol-0"), map[string]any{"ec2:CreateAction": "RunInstances"})),
		c("the runner role passed to EC2", r.req("iam:PassRole", r.runnerRole, map[string]any{"iam:PassedToService": "ec2.amazonaws.com"})),
	}
	return out
}

// refusals are what the reconciler's role must never allow.
func (r reconcilerRole) refusals() []simCase {
	deny := func(name string, q iamsim.Request) simCase { return simCase{name, q, false} }
	return []simCase{
		deny("terminate an instance of another deployment", r.onInstance("ec2:TerminateInstances", "other")),
		deny("stop an untagged instance", r.onInstance("ec2:StopInstances", "")),
		deny("tag an instance of another deployment", r.onInstance("ec2:CreateTags", "other")),
		deny("launch an instance without the deployment's tag", r.req("ec2:RunInstances", r.instanceOf, nil)),
		deny("launch in another subnet", r.req("ec2:RunInstances", arn("ec2", "subnet/subnet-0elsewhere"), nil)),
		deny("pass the runner role to another service", r.req("iam:PassRole", r.runnerRole, map[string]any{"iam:PassedToService": "lambda.amazonaws.com"})),
		deny("pass another role", r.req("iam:PassRole", "arn:aws:iam::"+simAccount+":role/admin", map[string]any{"iam:PassedToService": "ec2.amazonaws.com"})),
		deny("read another table", r.req("dynamodb:GetItem", arn("dynamodb", "table/other"), nil)),
		deny("receive from another queue", r.req("sqs:ReceiveMessage", arn("sqs", "other"), nil)),
	}
}

// checkReconcilerInSimulator simulates the cases and checks each decision.
func checkReconcilerInSimulator(t *testing.T, r reconcilerRole, cases []simCase) {
	t.Helper()
	reqs := make([]iamsim.Request, len(cases))
	for i, c := range cases {
		reqs[i] = c.req
	}
	decisions, err := iamsim.Simulate(t.Context(), r.policies, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range decisions {
		if got := d == iamsim.Allowed; got != cases[i].want {
			t.Errorf("simulator: %s: %s, want allowed=%v", cases[i].name, d, cases[i].want)
		}
	}
}

// simulateReconcilerCalls checks every called action, on the example's resources, and the refusals.
func simulateReconcilerCalls(t *testing.T, called []string) {
	t.Helper()
	r := loadReconcilerRole(t, nil)
	cases := r.refusals()
	for _, a := range called {
		cs, err := r.requestsFor(a)
		if err != nil {
			t.Error(err)
			continue
		}
		cases = append(cases, cs...)
	}
	checkReconcilerInSimulator(t, r, cases)
}

// TestExampleReconcilerRoleInSimulator: without a replica, what every launch needs (CreateFleet and
// what AWS authorises with it) and the refusals, in the independent simulator.
func TestExampleReconcilerRoleInSimulator(t *testing.T) {
	t.Parallel()
	r := loadReconcilerRole(t, nil)
	checkReconcilerInSimulator(t, r, append(r.fleetLaunch(), r.refusals()...))
}

// TestExampleReconcilerKMSInSimulator: with kms_key_arns, the reconciler may have EC2 create the
// grant an encrypted volume needs and use the key through EC2 or SQS, never directly; without it,
// no KMS permission at all.
func TestExampleReconcilerKMSInSimulator(t *testing.T) {
	t.Parallel()
	key := arn("kms", "key/1234abcd-12ab-34cd-56ef-1234567890ab")
	via := func(service string) map[string]any {
		return map[string]any{"kms:ViaService": service + "." + simRegion + ".amazonaws.com"}
	}
	grant := map[string]any{"kms:GrantIsForAWSResource": "true", "kms:ViaService": "ec2." + simRegion + ".amazonaws.com"}
	for _, tc := range []struct {
		name string
		keys []cty.Value
	}{{"with kms_key_arns", []cty.Value{cty.StringVal(key)}}, {"without", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := cty.ListValEmpty(cty.String)
			if len(tc.keys) > 0 {
				keys = cty.ListVal(tc.keys)
			}
			r := loadReconcilerRole(t, map[string]cty.Value{"kms_key_arns": keys})
			on := len(tc.keys) > 0
			cases := []simCase{
				{"EC2 creates a grant for a volume", r.req("kms:CreateGrant", key, grant), on},
				{"a grant not for an AWS resource", r.req("kms:CreateGrant", key, via("ec2")), false},
				{"a data key through EC2", r.req("kms:GenerateDataKeyWithoutPlaintext", key, via("ec2")), on},
				{"decrypt through SQS", r.req("kms:Decrypt", key, via("sqs")), on},
				{"decrypt directly", r.req("kms:Decrypt", key, nil), false},
				{"another key", r.req("kms:Decrypt", arn("kms", "key/other"), via("ec2")), false},
			}
			// The key's policy is KMS's default one, which lets the account's IAM policies decide
			// (AWS KMS Developer Guide, "Default key policy"): KMS allows nothing a key policy
			// does not, so a key whose policy does not delegate to IAM must name the role itself.
			for i := range cases {
				cases[i].req.ResourcePolicy = []byte(`{"Version":"2012-10-17","Statement":[{"Sid":"Enable IAM User Permissions","Effect":"Allow",` +
					`"Principal":{"AWS":"arn:aws:iam::` + simAccount + `:root"},"Action":"kms:*","Resource":"*"}]}`)
			}
			checkReconcilerInSimulator(t, r, cases)
		})
	}
}

// TestExampleExecutionRoleReadsOnlyTheTaskSecretsInSimulator: ECS's execution role may read the
// task's secrets (the App's private key, the webhook secret) and no other secret.
func TestExampleExecutionRoleReadsOnlyTheTaskSecretsInSimulator(t *testing.T) {
	t.Parallel()
	m, err := exampletf.Load("../../examples/complete", exampletf.Inputs{
		Account: simAccount, Partition: "aws", Region: simRegion, VarFile: "terraform.tfvars.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := m.RolePolicies("execution")
	if err != nil {
		t.Fatal(err)
	}
	r := reconcilerRole{principal: "arn:aws:sts::" + simAccount + ":assumed-role/runnerpool-" + simDeployment + "-execution/task"}
	for name, doc := range docs {
		r.policies = append(r.policies, iamsim.Policy{Name: name, Policy: []byte(doc)})
	}
	get := func(arn string) iamsim.Request { return r.req("secretsmanager:GetSecretValue", arn, nil) }
	checkReconcilerInSimulator(t, r, []simCase{
		{"the App's private key", get(m.Variable("github_app").GetAttr("private_key_secret_arn").AsString()), true},
		{"the webhook secret", get(m.Variable("webhook_secret_arn").AsString()), true},
		{"another secret", get(arn("secretsmanager", "secret:payments-db-AbCdEf")), false},
	})
}
