package emf_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics/emf"
)

// checkSpec checks one line against AWS's "Specification: Embedded metric format"
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
// the line is one JSON object; its "_aws" member has exactly Timestamp (a whole number of
// milliseconds since the epoch) and CloudWatchMetrics (an array of MetricDirective objects); a
// directive has Namespace (1-255 characters), Dimensions (an array of DimensionSets: arrays of at
// most 30 strings, each the name of a root member whose value is a string) and Metrics (an array of
// at most 100 MetricDefinitions: Name, optionally Unit and StorageResolution; each Name a root member
// whose value is a number or an array of at most 100 numbers); the specification's objects have no
// other members. It fails t and returns the root object.
func checkSpec(t *testing.T, line []byte) map[string]any {
	t.Helper()
	root, problems := specProblems(line)
	for _, p := range problems {
		t.Errorf("%s: %s", p, line)
	}
	if root == nil {
		t.FailNow()
	}
	return root
}

// specProblems is checkSpec's check: what the line breaks of the specification.
func specProblems(line []byte) (map[string]any, []string) {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return nil, []string{"not a JSON object: " + err.Error()}
	}
	if dec.More() {
		fail("data after the object")
	}
	meta, ok := root["_aws"].(map[string]any)
	if !ok {
		fail("no _aws object")
		return root, problems
	}
	for k := range meta {
		if k != "Timestamp" && k != "CloudWatchMetrics" {
			fail("_aws has the member %q the specification does not define", k)
		}
	}
	ts, ok := meta["Timestamp"].(json.Number)
	if _, err := ts.Int64(); !ok || err != nil {
		fail("Timestamp %v is not a whole number of milliseconds", meta["Timestamp"])
	}
	directives, ok := meta["CloudWatchMetrics"].([]any)
	if !ok || len(directives) == 0 {
		fail("CloudWatchMetrics is not a non-empty array")
	}
	for _, d := range directives {
		dir, ok := d.(map[string]any)
		if !ok {
			fail("a directive is not an object")
			continue
		}
		for k := range dir {
			if k != "Namespace" && k != "Dimensions" && k != "Metrics" {
				fail("a directive has the member %q", k)
			}
		}
		if ns, ok := dir["Namespace"].(string); !ok || len(ns) < 1 || len(ns) > 255 {
			fail("Namespace %v", dir["Namespace"])
		}
		sets, ok := dir["Dimensions"].([]any)
		if !ok {
			fail("Dimensions is not an array")
		}
		for _, s := range sets {
			set, ok := s.([]any)
			if !ok || len(set) > 30 {
				fail("a dimension set %v is not an array of at most 30 keys", s)
				continue
			}
			for _, k := range set {
				name, ok := k.(string)
				if v, isString := root[name].(string); !ok || !isString || v == "" {
					fail("dimension %v: its root member %v is not a non-empty string", k, root[name])
				}
			}
		}
		defs, ok := dir["Metrics"].([]any)
		if !ok || len(defs) == 0 || len(defs) > 100 {
			fail("Metrics is not an array of 1-100 definitions")
		}
		for _, md := range defs {
			def, ok := md.(map[string]any)
			if !ok {
				fail("a metric definition is not an object")
				continue
			}
			for k := range def {
				if k != "Name" && k != "Unit" && k != "StorageResolution" {
					fail("a metric definition has the member %q", k)
				}
			}
			name, _ := def["Name"].(string)
			if len(name) < 1 || len(name) > 1024 {
				fail("metric name %q", name)
			}
			switch v := root[name].(type) {
			case json.Number:
			case []any:
				if len(v) > 100 {
					fail("metric %s has %d values (at most 100)", name, len(v))
				}
				for _, x := range v {
					if _, ok := x.(json.Number); !ok {
						fail("metric %s value %v is not a number", name, x)
					}
				}
			default:
				fail("metric %s: its root member %v is not a number or an array of numbers", name, root[name])
			}
		}
	}
	return root, problems
}

type headerTransport http.Header

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header(h), Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
}

// TestExporterLines: the reconciler's own metrics come out as lines the specification accepts, one
// metric each, with the deployment alone and with the kept labels as dimension sets; counters and
// histogram counts as their increase since the previous flush; the GitHub budget as a ratio and the
// token's expiry as seconds left; the leader-only gauges only while this replica leads.
func TestExporterLines(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{Replica: "r1"})
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	e, err := emf.New(emf.Options{Gatherer: m.Registry(), Namespace: "Runnerpool", Dimensions: map[string]string{"Deployment": "ci-prod"}, Out: &out, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	gh := &http.Client{Transport: m.GitHubTransport(headerTransport{
		"X-Ratelimit-Limit": {"5000"}, "X-Ratelimit-Remaining": {"250"}, "X-Ratelimit-Resource": {"core"},
		"Github-Authentication-Token-Expiration": {now.Add(10 * 24 * time.Hour).Format("2006-01-02 15:04:05 MST")},
	})}
	resp, err := gh.Get("https://api.github.com/repos/acme/app/actions/runners")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	m.ObserveProvision("succeeded", time.Second, []string{"reused"})
	m.ObserveProvision("error", time.Second, []string{"created"})
	m.ObserveProvision("error", time.Second, []string{"reused"})
	m.RegistrationRefused("runner_version")
	m.AutoscaleQueue("small-x64", 90*time.Second, 25, time.Minute)

	flush := func() map[string][]map[string]any {
		t.Helper()
		out.Reset()
		if err := e.Flush(); err != nil {
			t.Fatal(err)
		}
		got := map[string][]map[string]any{}
		for _, l := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
			root := checkSpec(t, l)
			defs := root["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Metrics"].([]any)
			name := defs[0].(map[string]any)["Name"].(string)
			got[name] = append(got[name], root)
		}
		return got
	}
	num := func(v any) float64 {
		t.Helper()
		f, err := v.(json.Number).Float64()
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		return f
	}
	byDim := func(lines []map[string]any, dim, value string) map[string]any {
		t.Helper()
		for _, l := range lines {
			if l[dim] == value {
				return l
			}
		}
		t.Fatalf("no line with %s=%s in %v", dim, value, lines)
		return nil
	}

	got := flush()
	if _, ok := got["runnerpool_autoscale_queue_time_p95_seconds"]; ok {
		t.Error("a replica that does not lead wrote the leader-only p95")
	}
	if _, ok := got["runnerpool_autoscale_queue_time_goal_seconds"]; !ok {
		t.Error("no goal line")
	}
	leader := got["runnerpool_leader"]
	if len(leader) != 1 || num(leader[0]["runnerpool_leader"]) != 0 || leader[0]["Deployment"] != "ci-prod" {
		t.Errorf("leader lines %v", leader)
	}
	if dims := leader[0]["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"]; fmt.Sprint(dims) != "[[Deployment]]" {
		t.Errorf("leader's dimension sets %v, want [[Deployment]]", dims)
	}
	errLine := byDim(got["runnerpool_provision_duration_seconds_count"], "outcome", "error")
	if v, ok := errLine["runnerpool_provision_duration_seconds_count"].([]any); !ok || len(v) != 2 || num(v[0])+num(v[1]) != 2 {
		t.Errorf("error provisions %v, want two series of one each", errLine["runnerpool_provision_duration_seconds_count"])
	}
	if dims := errLine["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"]; fmt.Sprint(dims) != "[[Deployment] [Deployment outcome]]" {
		t.Errorf("provision count's dimension sets %v", dims)
	}
	if _, ok := errLine["source"]; ok {
		t.Error("a label that is not kept was written")
	}
	if v := num(byDim(got["runnerpool_registrations_refused_total"], "reason", "runner_version")["runnerpool_registrations_refused_total"]); v != 1 {
		t.Errorf("refused registrations %v, want 1", v)
	}
	if v := num(got["runnerpool_github_rate_limit_remaining_ratio"][0]["runnerpool_github_rate_limit_remaining_ratio"]); v != 0.05 {
		t.Errorf("budget ratio %v, want 0.05", v)
	}
	if v := num(got["runnerpool_github_token_expiry_seconds_left"][0]["runnerpool_github_token_expiry_seconds_left"]); v != 10*86400 {
		t.Errorf("token seconds left %v, want %d", v, 10*86400)
	}

	// The next flush: counters written as their increase since this one; leading now.
	m.RegistrationRefused("runner_version")
	m.RegistrationRefused("runner_version")
	m.SetLeader(true)
	got = flush()
	if v := num(byDim(got["runnerpool_registrations_refused_total"], "reason", "runner_version")["runnerpool_registrations_refused_total"]); v != 2 {
		t.Errorf("refused registrations since the last flush %v, want 2", v)
	}
	if v := got["runnerpool_provision_duration_seconds_count"]; len(v) == 0 {
		t.Error("no provision count lines (zero increases are written too)")
	} else if x := byDim(v, "outcome", "succeeded")["runnerpool_provision_duration_seconds_count"]; num(x) != 0 {
		t.Errorf("succeeded provisions since the last flush %v, want 0", x)
	}
	if v := got["runnerpool_autoscale_queue_time_p95_seconds"]; len(v) != 1 || num(v[0]["runnerpool_autoscale_queue_time_p95_seconds"]) != 90 || v[0]["pool"] != "small-x64" {
		t.Errorf("the leader's p95 lines %v", v)
	}
}

// TestCheckSpecRefuses: the spec check refuses what the specification forbids, so the test above
// cannot pass on lines CloudWatch would drop.
func TestCheckSpecRefuses(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["D"]],"Metrics":[{"Name":"m"}]}]},"m":1}`,         // D is not a member
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["D"]],"Metrics":[{"Name":"m"}]}]},"D":1,"m":1}`,   // D is not a string
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[[]],"Metrics":[{"Name":"m"}]}]},"m":"1"}`,          // m is not a number
		`{"_aws":{"Timestamp":1.5,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[[]],"Metrics":[{"Name":"m"}]}]},"m":1}`,          // not milliseconds
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"","Dimensions":[[]],"Metrics":[{"Name":"m"}]}]},"m":1}`,             // empty namespace
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[[]],"Metrics":[{"Name":"m","Kind":"x"}]}]},"m":1}`, // an unknown member
	} {
		if _, problems := specProblems([]byte(line)); len(problems) == 0 {
			t.Errorf("checkSpec accepted %s", line)
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []emf.Options{
		{Namespace: ""},
		{Namespace: "AWS/ECS"},
		{Namespace: "N", Dimensions: map[string]string{"Deployment": ""}},
	} {
		if _, err := emf.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
