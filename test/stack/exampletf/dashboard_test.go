package exampletf_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// TestExampleDashboardBehindOIDC: what the example's README says of the dashboard. With
// dashboard_host empty nothing routes to it; set, the one listener rule that forwards to it
// authenticates with the load balancer's authenticate-oidc first, and refuses a plan without
// dashboard_oidc; and every security group rule that admits the dashboard's port 8081 admits it
// from the load balancer's security group only.
func TestExampleDashboardBehindOIDC(t *testing.T) {
	t.Parallel()
	if loadWith(t, nil).Local("dashboard").True() {
		t.Error("the dashboard is routed with dashboard_host empty")
	}
	m := loadWith(t, map[string]cty.Value{"dashboard_host": cty.StringVal("runnerpool-dashboard.example.com")})
	if !m.Local("dashboard").True() {
		t.Error("dashboard_host set: the dashboard is not routed")
	}
	failed, err := m.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(failed, "\n"), "dashboard_oidc is required") {
		t.Errorf("dashboard_host without dashboard_oidc passes the checks: %q", failed)
	}

	rule := m.Block("resource", "aws_lb_listener_rule", "dashboard")
	if rule == nil {
		t.Fatal("no aws_lb_listener_rule.dashboard")
	}
	var actions []string
	for _, b := range rule.Body.Blocks {
		if b.Type == "action" {
			actions = append(actions, attrSource(t, b, "type"))
		}
	}
	if strings.Join(actions, ",") != `"authenticate-oidc","forward"` {
		t.Errorf("the dashboard rule's actions %v, want authenticate-oidc first, then forward", actions)
	}
	// The target group is forwarded to by that rule only (the ECS service registers the tasks in it).
	files, err := filepath.Glob("../../../examples/complete/*.tf")
	if err != nil || len(files) == 0 {
		t.Fatalf("the example's files: %v, %v", files, err)
	}
	for _, f := range files {
		n := strings.Count(string(mustRead(t, f)), "aws_lb_target_group.dashboard")
		want := map[string]int{"dashboard.tf": 1, "reconciler.tf": 1}[filepath.Base(f)]
		if n != want {
			t.Errorf("%s names aws_lb_target_group.dashboard %d times, want %d (the rule; the service's registration)", f, n, want)
		}
	}

	for _, sg := range []string{"alb", "reconciler", "runner"} {
		b := m.Block("resource", "aws_security_group", sg)
		if b == nil {
			t.Fatalf("no aws_security_group.%s", sg)
		}
		for _, in := range ingressBlocks(b) {
			from, to := port(t, in, "from_port"), port(t, in, "to_port")
			if from > 8081 || to < 8081 {
				continue
			}
			if src := attrSource(t, in, "security_groups"); src != "[aws_security_group.alb.id]" || attrSource(t, in, "cidr_blocks") != "" {
				t.Errorf("aws_security_group.%s admits %d-%d from %q, cidr_blocks %q; want the load balancer's group only",
					sg, from, to, src, attrSource(t, in, "cidr_blocks"))
			}
		}
	}
}

// ingressBlocks are a security group's ingress blocks, the content of its dynamic ones included.
func ingressBlocks(b *hclsyntax.Block) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, nb := range b.Body.Blocks {
		switch {
		case nb.Type == "ingress":
			out = append(out, nb)
		case nb.Type == "dynamic" && len(nb.Labels) == 1 && nb.Labels[0] == "ingress":
			for _, c := range nb.Body.Blocks {
				if c.Type == "content" {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func port(t *testing.T, b *hclsyntax.Block, name string) int64 {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		t.Fatalf("an ingress block without %s", name)
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.Number {
		t.Fatalf("%s is not a literal port: %v", name, diags)
	}
	n, _ := v.AsBigFloat().Int64()
	return n
}

// TestExampleMetricsPortNeverForwarded: the tasks' internal port 9090 (/metrics, /healthz, /readyz:
// metrics name repositories and their spend) is the load balancer's health check port and no
// target group's traffic port, so nothing is forwarded to it; the example's README says so.
func TestExampleMetricsPortNeverForwarded(t *testing.T) {
	t.Parallel()
	m := loadWith(t, map[string]cty.Value{"dashboard_host": cty.StringVal("runnerpool-dashboard.example.com")})
	for _, name := range []string{"reconciler", "dashboard"} {
		b := m.Block("resource", "aws_lb_target_group", name)
		if b == nil {
			t.Fatalf("no aws_lb_target_group.%s", name)
		}
		if p := attrSource(t, b, "port"); p == "9090" || p == "" {
			t.Errorf("aws_lb_target_group.%s forwards to port %q", name, p)
		}
	}
	var health string
	for _, b := range m.Block("resource", "aws_lb_target_group", "reconciler").Body.Blocks {
		if b.Type == "health_check" {
			health = attrSource(t, b, "port")
		}
	}
	if health != `"9090"` {
		t.Errorf("the API's health check port %s, want 9090", health)
	}
	files, _ := filepath.Glob("../../../examples/complete/*.tf")
	all := 0
	for _, f := range files {
		all += strings.Count(string(mustRead(t, f)), `resource "aws_lb_target_group"`)
	}
	if all != 2 {
		t.Errorf("%d target groups in the example, want the API's and the dashboard's", all)
	}
}
