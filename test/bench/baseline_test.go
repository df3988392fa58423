package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseBaseline(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, wantErr string
		want              map[string]float64
	}{
		{name: "figures and about", in: "# cc50e7d, quiet\n\nconvergence_pass_ms_20000_instances\t626\nclaim_notice_p50_ms\t34.0\n",
			want: map[string]float64{"convergence_pass_ms_20000_instances": 626, "claim_notice_p50_ms": 34}},
		{name: "no tab", in: "claim_notice_p50_ms 34\n", wantErr: "want NAME<TAB>VALUE"},
		{name: "not a number", in: "claim_notice_p50_ms\tfast\n", wantErr: "claim_notice_p50_ms"},
		{name: "twice", in: "a\t1\na\t2\n", wantErr: "given twice"},
		{name: "empty", in: "# only words\n", wantErr: "no figures"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, err := ParseBaseline([]byte(c.in))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ParseBaseline error = %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.want {
				if b.Figures[k] != v {
					t.Errorf("%s = %v, want %v", k, b.Figures[k], v)
				}
			}
		})
	}
}

// The committed baseline parses, and a report written beside it sets its figures beside the run's.
func TestReportShowsBeforeAndAfter(t *testing.T) {
	t.Parallel()
	if _, err := readBaseline(filepath.Join("..", "..", "bench")); err != nil {
		t.Fatalf("the committed baseline: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, BaselineFile), []byte("# before: commit abc on this machine\nclaim_notice_p50_ms\t20\ngone_figure\t3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Command: "runnerpool-bench -report bench"}
	o.defaults()
	r := &Result{Options: o, Started: time.Now(), Duration: time.Minute}
	r.add(Figure{Name: "claim_notice_p50_ms", Value: 15, Unit: "ms"})
	if err := writeReport(dir, r); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Before and after", "before: commit abc on this machine", "| `claim_notice_p50_ms` | 20 | 15 | -25 % |", "| `gone_figure` | 3 | not in this run | |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestReportShowsEveryWeek(t *testing.T) {
	t.Parallel()
	o := Options{Command: "runnerpool-bench -report bench"}
	o.defaults()
	r := &Result{Options: o, Started: time.Now(), Duration: time.Minute, Weeks: []WeekRow{
		{Week: "asia", Class: "pool=ci", Jobs: 21424, FixedIdle: 5775.94,
			History: WeekPolicy{P95: 27 * time.Second, SlowPct: 5.06, Ratio: 1.01}, Self: WeekPolicy{P95: 2 * time.Second, SlowPct: 4.9, Ratio: 0.9}},
	}}
	md := r.Markdown()
	for _, want := range []string{"## Autoscale: every week", "| asia | `pool=ci` | 21424 | 5776 | 27s, 5.06 %, 1.01 | 2s, 4.90 %, 0.90 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
