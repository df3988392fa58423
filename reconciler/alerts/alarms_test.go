package alerts_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v4"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics/emf"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/exampletf"
)

// TestAlarmsCoverAlerts: examples/complete turns every alert of runnerpool.rules.yml into a
// CloudWatch alarm (alarms.tf; the autoscale alert one per warm pool), each on metrics the
// reconciler writes as embedded metric format lines (emf.Alerting: the name and the dimensions it
// keeps) in the namespace the task's environment gives it, with every metric in the alarm's
// expression, and notifying alarm_topic_arn when it fires and when it clears.
func TestAlarmsCoverAlerts(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("runnerpool.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	const topic = "arn:aws:sns:eu-west-1:123456789012:runnerpool-alerts"
	m, err := exampletf.Load("../../examples/complete", exampletf.Inputs{
		Account: "123456789012", Partition: "aws", Region: "eu-west-1", VarFile: "terraform.tfvars.example",
		Vars: map[string]cty.Value{"alarm_topic_arn": cty.StringVal(topic)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if u := m.Unresolved(); len(u) > 0 {
		t.Fatalf("unresolved:\n%s", strings.Join(u, "\n"))
	}
	namespace := m.Local("metrics_namespace").AsString()
	env := m.Local("reconciler_environment").AsValueMap()
	if env["RUNNERPOOL_EMF_NAMESPACE"].AsString() != namespace || env["RUNNERPOOL_EMF_INTERVAL"].AsString() != "60s" {
		t.Errorf("the task does not write embedded metric format lines every 60s in %s: %v", namespace, env)
	}
	written := map[string]emf.Series{}
	for _, s := range emf.Alerting {
		written[s.MetricName()] = s
	}
	alarms := m.Local("alarms").AsValueMap()
	resources := m.Resource("resource", "aws_cloudwatch_metric_alarm", "alert").AsValueMap()
	for key, a := range alarms {
		for id, q := range a.GetAttr("metrics").AsValueMap() {
			name := q.GetAttr("name").AsString()
			s, ok := written[name]
			if !ok {
				t.Errorf("alarm %s reads %s, which the reconciler does not write (emf.Alerting)", key, name)
			}
			for dim := range q.GetAttr("dimensions").AsValueMap() {
				if !slices.Contains(s.Dimensions, dim) {
					t.Errorf("alarm %s reads %s by %s, a dimension the reconciler does not write", key, name, dim)
				}
			}
			if expr := a.GetAttr("expression").AsString(); expr == "" && len(a.GetAttr("metrics").AsValueMap()) != 1 {
				t.Errorf("alarm %s: no expression over several metrics", key)
			} else if expr != "" && !regexp.MustCompile(`\b`+id+`\b`).MatchString(expr) {
				t.Errorf("alarm %s: metric %s is not in its expression", key, id)
			}
		}
		r, ok := resources[key]
		if !ok {
			t.Errorf("alarm %s has no aws_cloudwatch_metric_alarm", key)
			continue
		}
		for _, attr := range []string{"alarm_actions", "ok_actions"} {
			if got := r.GetAttr(attr); got.LengthInt() != 1 || got.Index(cty.NumberIntVal(0)).AsString() != topic {
				t.Errorf("alarm %s: %s %#v, want [%s]", key, attr, got, topic)
			}
		}
	}
	var alerts int
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts++
			n := 0
			for key := range alarms {
				if key == r.Alert || strings.HasPrefix(key, r.Alert+"-") {
					n++
				}
			}
			if n == 0 {
				t.Errorf("alert %s has no CloudWatch alarm in examples/complete/alarms.tf", r.Alert)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts")
	}
	// The dimension every alarm adds is the one the reconciler writes on every line.
	src, err := os.ReadFile("../../examples/complete/alarms.tf")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "merge({ "+emf.DeploymentDimension+" = var.deployment_id }") {
		t.Errorf("alarms.tf does not add the dimension %s = var.deployment_id", emf.DeploymentDimension)
	}
}
