// example_ecs_test.go checks what examples/complete's ECS service and load balancer promise and no
// local run can show (there is no ECS here): a failed deployment rolls back, a stopping task gets
// its drain, a dead one is replaced, and the load balancer lets a cold provision finish.
package service_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
)

// literalAttr is a nested block's literal attribute (cty.NilVal when absent or not literal).
func literalAttr(b *hclsyntax.Block, name string) cty.Value {
	a, ok := b.Body.Attributes[name]
	if !ok {
		return cty.NilVal
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		return cty.NilVal
	}
	return v
}

func nested(b *hclsyntax.Block, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, c := range b.Body.Blocks {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// TestExampleECSServiceRollsBackDrainsAndChecksHealth: the reconciler's ECS service has a deployment
// circuit breaker that rolls back; the container's stop timeout covers RUNNERPOOL_DRAIN_TIMEOUT; the
// container checks its health with the image's own binary (no curl in a distroless image) on the
// internal port, where the target group checks /readyz too; the load balancer's idle timeout is
// above the provision timeout and it may reach the dashboard's identity provider on 443.
func TestExampleECSServiceRollsBackDrainsAndChecksHealth(t *testing.T) {
	t.Parallel()
	m, err := exampletf.Load("../../examples/complete", exampletf.Inputs{
		Account: simAccount, Partition: "aws", Region: simRegion, VarFile: "terraform.tfvars.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := m.Block("resource", "aws_ecs_service", "reconciler")
	if svc == nil {
		t.Fatal("no aws_ecs_service.reconciler")
	}
	cb := nested(svc, "deployment_circuit_breaker")
	if len(cb) != 1 || !literalAttr(cb[0], "enable").RawEquals(cty.True) || !literalAttr(cb[0], "rollback").RawEquals(cty.True) {
		t.Error("the ECS service has no deployment_circuit_breaker with enable = true and rollback = true")
	}
	if !literalAttr(svc, "wait_for_steady_state").RawEquals(cty.True) {
		t.Error("the ECS service does not wait for a steady state: apply would report success before a rollback")
	}

	var defs []struct {
		StopTimeout int `json:"stopTimeout"`
		HealthCheck struct {
			Command []string `json:"command"`
		} `json:"healthCheck"`
		Environment []struct{ Name, Value string }
	}
	td := m.Resource("resource", "aws_ecs_task_definition", "reconciler")
	if err := json.Unmarshal([]byte(td.GetAttr("container_definitions").AsString()), &defs); err != nil || len(defs) != 1 {
		t.Fatalf("container definitions: %v", err)
	}
	env := map[string]string{}
	for _, e := range defs[0].Environment {
		env[e.Name] = e.Value
	}
	drain, err := time.ParseDuration(env["RUNNERPOOL_DRAIN_TIMEOUT"])
	if err != nil {
		t.Fatalf("RUNNERPOOL_DRAIN_TIMEOUT %q: %v (the task must say its drain)", env["RUNNERPOOL_DRAIN_TIMEOUT"], err)
	}
	// Fargate allows at most 120 s; the drain needs its time plus 30 s for what it cancels to roll
	// back (docs/upgrading.md).
	if stop := time.Duration(defs[0].StopTimeout) * time.Second; stop < drain+30*time.Second || stop > 120*time.Second {
		t.Errorf("stopTimeout %s: want at least the drain %s plus 30 s, at most Fargate's 120 s", stop, drain)
	}
	metricsPort := env["RUNNERPOOL_METRICS_LISTEN"]
	if !strings.HasPrefix(metricsPort, ":") {
		t.Fatalf("RUNNERPOOL_METRICS_LISTEN %q: /metrics must have its own port", metricsPort)
	}
	cmd := strings.Join(defs[0].HealthCheck.Command, " ")
	if want := "CMD /ko-app/runnerpool healthcheck -url http://127.0.0.1" + metricsPort + "/healthz"; cmd != want {
		t.Errorf("health check %q, want %q", cmd, want)
	}

	tg := m.Block("resource", "aws_lb_target_group", "reconciler")
	hc := nested(tg, "health_check")
	if len(hc) != 1 || literalAttr(hc[0], "port").AsString() != strings.TrimPrefix(metricsPort, ":") || literalAttr(hc[0], "path").AsString() != "/readyz" {
		t.Errorf("the target group's health check is not /readyz on the internal port %s", metricsPort)
	}
	// /metrics is never behind the public listener: no target group forwards to its port.
	for _, name := range []string{"reconciler", "dashboard"} {
		if b := m.Block("resource", "aws_lb_target_group", name); b != nil {
			if p := literalAttr(b, "port"); p != cty.NilVal && p.RawEquals(cty.NumberIntVal(9090)) {
				t.Errorf("target group %s forwards to the internal port 9090", name)
			}
		}
	}

	provision, err := time.ParseDuration(env["RUNNERPOOL_PROVISION_TIMEOUT"])
	if err != nil {
		t.Fatalf("RUNNERPOOL_PROVISION_TIMEOUT %q: %v", env["RUNNERPOOL_PROVISION_TIMEOUT"], err)
	}
	idle, _ := m.Resource("resource", "aws_lb", "api").GetAttr("idle_timeout").AsBigFloat().Int64()
	if time.Duration(idle)*time.Second <= provision {
		t.Errorf("the load balancer's idle timeout %d s is not above the provision timeout %s", idle, provision)
	}
	egress443 := false
	for _, e := range nested(m.Block("resource", "aws_security_group", "alb"), "egress") {
		from, to := literalAttr(e, "from_port"), literalAttr(e, "to_port")
		if from != cty.NilVal && to != cty.NilVal && from.RawEquals(cty.NumberIntVal(443)) && to.RawEquals(cty.NumberIntVal(443)) {
			egress443 = true
		}
	}
	if !egress443 {
		t.Error("the load balancer's security group has no egress to 443: its OIDC authentication cannot reach the identity provider")
	}
}

// TestExampleReusesDynamoDBEndpoint: a route table takes one route per prefix list, so with
// dynamodb_gateway_endpoint_id the example creates no DynamoDB gateway endpoint of its own (apply
// would fail on a second one); without it, it creates exactly one.
func TestExampleReusesDynamoDBEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   string
		want int
	}{{"", 1}, {"vpce-0123456789abcdef0", 0}} {
		m, err := exampletf.Load("../../examples/complete", exampletf.Inputs{
			Account: simAccount, Partition: "aws", Region: simRegion, VarFile: "terraform.tfvars.example",
			Vars: map[string]cty.Value{"dynamodb_gateway_endpoint_id": cty.StringVal(tc.id)},
		})
		if err != nil {
			t.Fatal(err)
		}
		ep := m.Resource("resource", "aws_vpc_endpoint", "dynamodb")
		if ep == cty.NilVal || !ep.Type().IsTupleType() || ep.LengthInt() != tc.want {
			t.Errorf("dynamodb_gateway_endpoint_id %q: aws_vpc_endpoint.dynamodb is %#v, want %d instance(s)", tc.id, ep, tc.want)
		}
	}
}
