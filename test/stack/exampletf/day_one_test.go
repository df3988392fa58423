package exampletf_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
)

func loadWith(t *testing.T, vars map[string]cty.Value) *exampletf.Module {
	t.Helper()
	m, err := exampletf.Load("../../../examples/complete", exampletf.Inputs{
		Account: "123456789012", Partition: "aws", Region: "eu-west-1", VarFile: "terraform.tfvars.example", Vars: vars,
	})
	if err != nil {
		t.Fatal(err)
	}
	if u := m.Unresolved(); len(u) > 0 {
		t.Fatalf("unresolved:\n%s", strings.Join(u, "\n"))
	}
	return m
}

type statementDoc struct {
	Sid       string
	Action    any
	Resource  any
	Condition map[string]map[string]any
}

func policyStatements(t *testing.T, m *exampletf.Module, role, policy string) []statementDoc {
	t.Helper()
	pols, err := m.RolePolicies(role)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Statement []statementDoc }
	if err := json.Unmarshal([]byte(pols[policy]), &doc); err != nil {
		t.Fatalf("%s/%s: %v: %s", role, policy, err, pols[policy])
	}
	return doc.Statement
}

func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, x := range v {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

// TestExamplePrivateImage: with reconciler_image_credentials_secret_arn the task pulls its image with
// those credentials (repositoryCredentials; ghcr.io makes a new container package private, and ECS
// pulls anonymously otherwise), and the execution role may read that secret; without it, neither.
func TestExamplePrivateImage(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ghcr-pull-AbCdEf"
	for _, set := range []bool{false, true} {
		vars := map[string]cty.Value{}
		if set {
			vars["reconciler_image_credentials_secret_arn"] = cty.StringVal(arn)
		}
		m := loadWith(t, vars)
		var defs []map[string]any
		if err := json.Unmarshal([]byte(m.Resource("resource", "aws_ecs_task_definition", "reconciler").GetAttr("container_definitions").AsString()), &defs); err != nil {
			t.Fatal(err)
		}
		creds, has := defs[0]["repositoryCredentials"].(map[string]any)
		if has != set || (set && creds["credentialsParameter"] != arn) {
			t.Errorf("secret set %v: repositoryCredentials %v", set, defs[0]["repositoryCredentials"])
		}
		readable := false
		for _, s := range policyStatements(t, m, "execution", "task-secrets") {
			if s.Sid == "TaskSecrets" && strings.Contains(strings.Join(strs(s.Resource), ","), arn) {
				readable = true
			}
		}
		if readable != set {
			t.Errorf("secret set %v: the execution role may read it: %v", set, readable)
		}
	}
}

// TestExampleSecretsKMSKey: with secrets_kms_key_arn the ECS execution role may decrypt with that key
// through Secrets Manager only (it reads the task's secrets when it starts a task); without it, no
// KMS permission.
func TestExampleSecretsKMSKey(t *testing.T) {
	t.Parallel()
	const key = "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
	for _, set := range []bool{false, true} {
		vars := map[string]cty.Value{}
		if set {
			vars["secrets_kms_key_arn"] = cty.StringVal(key)
		}
		var decrypt *statementDoc
		for _, s := range policyStatements(t, loadWith(t, vars), "execution", "task-secrets") {
			if strings.Contains(strings.Join(strs(s.Action), ","), "kms:") {
				decrypt = &s
			}
		}
		if (decrypt != nil) != set {
			t.Fatalf("key set %v: a KMS statement %+v", set, decrypt)
		}
		if set {
			via := strs(decrypt.Condition["StringEquals"]["kms:ViaService"])
			if strings.Join(strs(decrypt.Action), ",") != "kms:Decrypt" || strings.Join(strs(decrypt.Resource), ",") != key || len(via) != 1 || via[0] != "secretsmanager.eu-west-1.amazonaws.com" {
				t.Errorf("the KMS statement %+v: want kms:Decrypt on the key through Secrets Manager", *decrypt)
			}
		}
	}
}

// TestExampleTrialSettings: deletion protection follows deletion_protection (on by default), the
// runner classes pass job_access and reuse on, a scale set its runner_group, and the load balancer
// lets a stopping task finish a provision as long as provision_timeout_seconds allows (its
// deregistration delay, 300 s by default, is at least the timeout, up to the load balancer's 3600).
func TestExampleTrialSettings(t *testing.T) {
	t.Parallel()
	if !loadWith(t, nil).Resource("resource", "runnerpool_state_table", "main").GetAttr("deletion_protection").True() {
		t.Error("the state table is not protected by default")
	}
	m := loadWith(t, map[string]cty.Value{
		"deletion_protection": cty.False,
		"runner_classes": cty.MapVal(map[string]cty.Value{"docker-x64": cty.ObjectVal(map[string]cty.Value{
			"image": cty.StringVal("ami-0123456789abcdef0"), "cpu": cty.NumberIntVal(2), "memory_mib": cty.NumberIntVal(4096),
			"instance_types": cty.ListVal([]cty.Value{cty.StringVal("c7i.*")}),
			"job_access":     cty.StringVal("docker"), "reuse": cty.StringVal("same-repository"),
		})}),
		"warm_pools": cty.MapValEmpty(cty.DynamicPseudoType),
		"scale_sets": cty.MapValEmpty(cty.DynamicPseudoType),
	})
	if m.Resource("resource", "runnerpool_state_table", "main").GetAttr("deletion_protection").True() {
		t.Error("deletion_protection = false leaves the table protected")
	}
	class := m.Resource("resource", "runnerpool_runner_class", "class").GetAttr("docker-x64")
	if class.GetAttr("job_access").AsString() != "docker" || class.GetAttr("reuse").AsString() != "same-repository" {
		t.Errorf("the runner class's job_access %#v, reuse %#v", class.GetAttr("job_access"), class.GetAttr("reuse"))
	}

	m = loadWith(t, map[string]cty.Value{"scale_sets": cty.MapVal(map[string]cty.Value{"small-x64-warm": cty.ObjectVal(map[string]cty.Value{
		"warm_pool": cty.StringVal("small-x64"), "scope": cty.StringVal("acme"), "runner_group": cty.StringVal("public-ci"),
	})})})
	if g := m.Resource("resource", "runnerpool_scale_set", "set").GetAttr("small-x64-warm").GetAttr("runner_group"); g.AsString() != "public-ci" {
		t.Errorf("the scale set's runner_group %#v", g)
	}

	for _, timeout := range []int64{600, 120, 3600} {
		m := loadWith(t, map[string]cty.Value{"provision_timeout_seconds": cty.NumberIntVal(timeout)})
		delay, _ := m.Resource("resource", "aws_lb_target_group", "reconciler").GetAttr("deregistration_delay").AsBigFloat().Int64()
		if delay < timeout || delay > 3600 {
			t.Errorf("provision timeout %d s: deregistration delay %d s", timeout, delay)
		}
	}
}

// TestExampleWarmPoolScope: the example's hot instances serve the sample workflow's provisions
// (RUNNERPOOL_WARM_POOL_SCOPE): the owner of allowed_repositories when they have one, warm_pool_scope
// when set, none when the repositories have several owners.
func TestExampleWarmPoolScope(t *testing.T) {
	t.Parallel()
	list := func(s ...string) cty.Value {
		var vs []cty.Value
		for _, x := range s {
			vs = append(vs, cty.StringVal(x))
		}
		return cty.ListVal(vs)
	}
	tests := []struct {
		name string
		vars map[string]cty.Value
		want string
	}{
		{"the tfvars example", nil, "acme"},
		{"repositories of one owner", map[string]cty.Value{"allowed_repositories": list("Acme/app", "acme/api")}, "acme"},
		{"several owners", map[string]cty.Value{"allowed_repositories": list("acme", "globex/app"), "scale_sets": cty.MapValEmpty(cty.DynamicPseudoType)}, ""},
		{"set", map[string]cty.Value{"warm_pool_scope": cty.StringVal("acme/app")}, "acme/app"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := loadWith(t, tc.vars).Local("reconciler_environment").AsValueMap()
			if got := env["RUNNERPOOL_WARM_POOL_SCOPE"].AsString(); got != tc.want {
				t.Errorf("RUNNERPOOL_WARM_POOL_SCOPE %q, want %q", got, tc.want)
			}
		})
	}
}

// TestExampleServiceReachesOutThroughNAT: the reconciler's tasks get no public address
// (assign_public_ip = false) in service_subnet_ids and call GitHub and AWS on 443, so those subnets
// need a route out (a NAT gateway); the runners' security group allows 443 and 80 out, and their
// private subnets need the same.
func TestExampleServiceReachesOutThroughNAT(t *testing.T) {
	t.Parallel()
	m := loadWith(t, nil)
	svc := m.Block("resource", "aws_ecs_service", "reconciler")
	var public string
	for _, b := range svc.Body.Blocks {
		if b.Type == "network_configuration" {
			public = attrSource(t, b, "assign_public_ip")
			if s := attrSource(t, b, "subnets"); s != "var.service_subnet_ids" {
				t.Errorf("the service's subnets %s", s)
			}
		}
	}
	if public != "false" {
		t.Errorf("assign_public_ip %q, want false", public)
	}
	ports := func(sg string) []string {
		var out []string
		for _, b := range m.Block("resource", "aws_security_group", sg).Body.Blocks {
			if b.Type == "egress" {
				out = append(out, attrSource(t, b, "from_port"))
			}
		}
		return out
	}
	if got := strings.Join(ports("reconciler"), ","); got != "443" {
		t.Errorf("the reconciler's egress ports %s, want 443", got)
	}
	if got := strings.Join(ports("runner"), ","); got != "443,80" {
		t.Errorf("the runners' egress ports %s, want 443,80", got)
	}
}

func attrSource(t *testing.T, b *hclsyntax.Block, name string) string {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		return ""
	}
	r := a.Expr.Range()
	return strings.TrimSpace(string(r.SliceBytes(mustRead(t, r.Filename))))
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
