package alerts_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v4"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var metricName = regexp.MustCompile(`\brunnerpool_[a-z0-9_]+\b`)

// TestAlertMetricsExist: every runnerpool metric a rule names is registered by the reconciler's
// metrics (a histogram's _count, _sum and _bucket series by the histogram), so a renamed metric
// cannot silence an alert; and every alert has a unit test.
func TestAlertMetricsExist(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("runnerpool.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("runnerpool.rules_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	reg := metrics.New(metrics.Options{}).Registry()
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no unit test in runnerpool.rules_test.yml", r.Alert)
			}
			for _, name := range metricName.FindAllString(r.Expr, -1) {
				if !registered(reg, name) {
					t.Errorf("alert %s: the reconciler exports no metric %s", r.Alert, name)
				}
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alert rules")
	}
}

// registered reports whether reg has a metric named name (or the histogram it is a series of): a
// probe gauge of that name is refused only when the name is taken.
func registered(reg *prometheus.Registry, name string) bool {
	for _, n := range []string{name, strings.TrimSuffix(name, "_count"), strings.TrimSuffix(name, "_sum"), strings.TrimSuffix(name, "_bucket")} {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "probe"})
		if err := reg.Register(probe); err != nil {
			return true
		}
		reg.Unregister(probe)
	}
	return false
}
