// Package emf writes the reconciler's alerting metrics as CloudWatch embedded metric format (EMF)
// log lines: on ECS, stdout goes through the awslogs driver to CloudWatch Logs, which turns each line
// into CloudWatch metrics that alarms can watch (examples/complete/alarms.tf), with no scraper and
// no address to reach: a task's /metrics moves with every deployment.
//
// The format is AWS's "Specification: Embedded metric format"
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
// each line is one JSON object whose "_aws" member holds the Timestamp (milliseconds since the
// epoch) and CloudWatchMetrics, an array of metric directives (a Namespace, Dimensions as an array
// of dimension sets of at most 30 keys each, and at most 100 metric definitions); every dimension
// and metric a directive names is a member of the root object, a dimension's value a string and a
// metric's value a number or an array of at most 100 numbers. CloudWatch then aggregates the values
// of one metric and dimension set with the statistics an alarm asks for (Sum, Minimum, Maximum).
//
// What is written: the series of Alerting, read from the Prometheus registry at every flush. A
// gauge is written as it is; a counter, and a histogram's _count, as its increase since the
// previous flush, so a Sum over a period is the increase over that period across replicas. Every
// line carries the constant dimensions (the deployment) and a second dimension set with the labels
// a series keeps; the other labels (the replica, operations, repositories) are left out, so the
// number of CloudWatch metrics stays small and fixed.
package emf

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// DeploymentDimension is the dimension the reconciler adds to every line: its deployment id.
const DeploymentDimension = "Deployment"

// Series is one Prometheus series written as a CloudWatch metric of the same name.
type Series struct {
	// Name is the Prometheus metric; a histogram's count is Name "X_count" for histogram X.
	Name string
	// Dimensions are the labels kept as dimensions (beside the constant ones).
	Dimensions []string
	// LeaderOnly: written only while this replica's runnerpool_leader is 1 (a replica that lost the
	// lease keeps its last values of the gauges only the leader updates).
	LeaderOnly bool
	// Ratio names a second metric: the value written is Name's divided by Ratio's of the same labels
	// (skipped where it is 0), under the name Derived.
	Ratio string
	// Until: the value written is Name's (a Unix timestamp in seconds) minus the flush's time, under
	// the name Derived. CloudWatch's metric math has no clock, so the exporter subtracts.
	Until bool
	// Derived names the CloudWatch metric of a Ratio or Until series.
	Derived string
}

// MetricName is the CloudWatch metric name the series is written as.
func (s Series) MetricName() string {
	if s.Derived != "" {
		return s.Derived
	}
	return s.Name
}

// Alerting is what reconciler/alerts/runnerpool.rules.yml reads, in the shape its CloudWatch alarms
// (examples/complete/alarms.tf) need: TestAlarmsCoverAlerts (test/stack/exampletf) checks that
// every alarm's metric and dimensions are written here.
var Alerting = []Series{
	{Name: "runnerpool_leader"},
	{Name: "runnerpool_provision_duration_seconds_count", Dimensions: []string{"outcome"}},
	{Name: "runnerpool_registrations_refused_total", Dimensions: []string{"reason"}},
	{Name: "runnerpool_runner_oldest_behind_seconds"},
	{Name: "runnerpool_github_rate_limit_remaining", Ratio: "runnerpool_github_rate_limit", Derived: "runnerpool_github_rate_limit_remaining_ratio"},
	{Name: "runnerpool_github_token_expiry_timestamp_seconds", Until: true, Derived: "runnerpool_github_token_expiry_seconds_left"},
	{Name: "runnerpool_aws_calls_total", Dimensions: []string{"service", "result"}},
	{Name: "runnerpool_quota_refusals_total"},
	{Name: "runnerpool_autoscale_queue_time_p95_seconds", Dimensions: []string{"pool"}, LeaderOnly: true},
	{Name: "runnerpool_autoscale_queue_time_goal_seconds", Dimensions: []string{"pool"}},
	{Name: "runnerpool_autoscale_queue_time_jobs", Dimensions: []string{"pool"}, LeaderOnly: true},
}

// Limits of the specification.
const (
	maxDimensionKeys = 30  // keys in one dimension set
	maxValues        = 100 // values of one metric in one line
)

// Options configure an Exporter.
type Options struct {
	Gatherer   prometheus.Gatherer
	Namespace  string            // CloudWatch namespace, 1-255 characters
	Dimensions map[string]string // constant dimensions of every line (Deployment)
	Series     []Series          // default Alerting
	Out        io.Writer         // stdout on ECS (the awslogs driver)
	Now        func() time.Time
	Logger     *slog.Logger
}

// Exporter writes the series at every Flush. Safe for one flusher at a time.
type Exporter struct {
	o    Options
	mu   sync.Mutex
	prev map[string]float64 // counters' last values by series and labels
}

// New checks the options against the specification's limits.
func New(o Options) (*Exporter, error) {
	if o.Series == nil {
		o.Series = Alerting
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if n := len(o.Namespace); n < 1 || n > 255 || strings.HasPrefix(o.Namespace, "AWS/") {
		return nil, fmt.Errorf("emf namespace %q: 1-255 characters, not AWS/", o.Namespace)
	}
	for k, v := range o.Dimensions {
		if k == "" || v == "" {
			return nil, fmt.Errorf("emf dimension %q=%q: name and value must not be empty", k, v)
		}
	}
	for _, s := range o.Series {
		if len(o.Dimensions)+len(s.Dimensions) > maxDimensionKeys {
			return nil, fmt.Errorf("emf series %s: more than %d dimensions", s.Name, maxDimensionKeys)
		}
	}
	return &Exporter{o: o, prev: map[string]float64{}}, nil
}

// Run flushes every interval until ctx ends.
func (e *Exporter) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.Flush(); err != nil {
				e.o.Logger.Warn("writing embedded metric format lines", "err", err)
			}
		}
	}
}

// Flush gathers the registry and writes one line per series and set of kept label values.
func (e *Exporter) Flush() error {
	fams, err := e.o.Gatherer.Gather()
	if err != nil {
		return fmt.Errorf("gathering metrics: %w", err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	now := e.o.Now()
	leading := gaugeValue(byName["runnerpool_leader"]) == 1
	e.mu.Lock()
	defer e.mu.Unlock()
	var lines [][]byte
	for _, s := range e.o.Series {
		if s.LeaderOnly && !leading {
			continue
		}
		for _, g := range e.group(s, byName, now) {
			for chunk := range slices.Chunk(g.values, maxValues) {
				line, err := e.line(s, g.dims, chunk, now)
				if err != nil {
					return err
				}
				lines = append(lines, line)
			}
		}
	}
	for _, l := range lines {
		if _, err := e.o.Out.Write(append(l, '\n')); err != nil {
			return fmt.Errorf("writing an embedded metric format line: %w", err)
		}
	}
	return nil
}

type group struct {
	dims   map[string]string
	values []float64
}

// group reads a series' samples and groups their values by the kept labels' values.
func (e *Exporter) group(s Series, byName map[string]*dto.MetricFamily, now time.Time) []group {
	name, count := s.Name, false
	fam := byName[name]
	if fam == nil && strings.HasSuffix(name, "_count") {
		if f := byName[strings.TrimSuffix(name, "_count")]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
			fam, count = f, true
		}
	}
	if fam == nil {
		return nil
	}
	var denominators map[string]float64
	if s.Ratio != "" {
		denominators = map[string]float64{}
		if d := byName[s.Ratio]; d != nil {
			for _, m := range d.GetMetric() {
				denominators[labelKey(m)] = sampleValue(d.GetType(), m)
			}
		}
	}
	groups := map[string]*group{}
	for _, m := range fam.GetMetric() {
		v := sampleValue(fam.GetType(), m)
		if count {
			v = float64(m.GetHistogram().GetSampleCount())
		}
		key := name + "\x00" + labelKey(m)
		switch {
		case count || fam.GetType() == dto.MetricType_COUNTER:
			prev := e.prev[key]
			e.prev[key] = v
			if v >= prev { // a smaller value: the counter restarted from 0
				v -= prev
			}
		case s.Ratio != "":
			d := denominators[labelKey(m)]
			if d == 0 {
				continue
			}
			v /= d
		case s.Until:
			v -= float64(now.UnixMilli()) / 1000
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		dims := map[string]string{}
		for _, l := range s.Dimensions {
			dims[l] = "none" // a dimension's value must not be empty
		}
		for _, lp := range m.GetLabel() {
			if _, kept := dims[lp.GetName()]; kept && lp.GetValue() != "" {
				dims[lp.GetName()] = lp.GetValue()
			}
		}
		gk := fmt.Sprint(sortedPairs(dims))
		g := groups[gk]
		if g == nil {
			g = &group{dims: dims}
			groups[gk] = g
		}
		g.values = append(g.values, v)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]group, 0, len(keys))
	for _, k := range keys {
		out = append(out, *groups[k])
	}
	return out
}

// line is one EMF document: the constant dimensions alone and with the kept ones.
func (e *Exporter) line(s Series, dims map[string]string, values []float64, now time.Time) ([]byte, error) {
	root := map[string]any{}
	constant := make([]string, 0, len(e.o.Dimensions))
	for k, v := range e.o.Dimensions {
		root[k] = v
		constant = append(constant, k)
	}
	sort.Strings(constant)
	sets := [][]string{constant}
	if len(s.Dimensions) > 0 {
		sets = append(sets, append(slices.Clone(constant), s.Dimensions...))
	}
	for k, v := range dims {
		root[k] = v
	}
	name := s.MetricName()
	if len(values) == 1 {
		root[name] = values[0]
	} else {
		root[name] = values
	}
	root["_aws"] = map[string]any{
		"Timestamp": now.UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  e.o.Namespace,
			"Dimensions": sets,
			"Metrics":    []any{map[string]any{"Name": name}},
		}},
	}
	b, err := json.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("encoding the embedded metric format line of %s: %w", name, err)
	}
	return b, nil
}

func sampleValue(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

// gaugeValue is the largest value of a gauge family; NaN when absent.
func gaugeValue(f *dto.MetricFamily) float64 {
	v := math.NaN()
	for _, m := range f.GetMetric() {
		if g := m.GetGauge().GetValue(); math.IsNaN(v) || g > v {
			v = g
		}
	}
	return v
}

func labelKey(m *dto.Metric) string {
	var b strings.Builder
	for _, lp := range m.GetLabel() {
		b.WriteString(lp.GetName() + "=" + lp.GetValue() + "\x00")
	}
	return b.String()
}

func sortedPairs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
