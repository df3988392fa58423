// Unit tests of the benchmark's pure parts: percentiles, the figure lines, the picture and the
// report. (The benchmark itself is `make bench`: it starts the whole local stack.)
package bench

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		q    float64
		want float64
	}{{0, 1}, {10, 1}, {50, 5}, {90, 9}, {99, 10}, {100, 10}}
	for _, tc := range tests {
		if got := Percentile(s, tc.q); got != tc.want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}

func TestFigureString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f    Figure
		want string
	}{
		{Figure{Name: "orphans", Value: 0}, "bench: orphans=0"},
		{Figure{Name: "claim_notice_p50_ms", Value: 55.04}, "bench: claim_notice_p50_ms=55.0"},
		{Figure{Name: "api_calls_per_reused_runner", Value: 11.125}, "bench: api_calls_per_reused_runner=11.1"},
		{Figure{Name: "x", Value: 0.456}, "bench: x=0.46"},
		{Figure{Name: "provision_throughput_per_min", Value: 596.24}, "bench: provision_throughput_per_min=596"},
		{Figure{Name: "y", Missing: "no warm pools"}, "bench: y=n/a (no warm pools)"},
	}
	for _, tc := range tests {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.f, got, tc.want)
		}
	}
}

func TestWritePNG(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	panels := []Panel{{Samples: []float64{1, 2, 2, 3, 50, 51, 52, 400}, Color: ColNotice}, {Color: ColOverhead}}
	if err := WritePNG(&b, panels); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if got := img.Bounds().Size(); got.X != panelW || got.Y != 2*panelH {
		t.Fatalf("picture %v, want %dx%d", got, panelW, 2*panelH)
	}
	// The bars are drawn: the first panel holds pixels of its colour.
	found := false
	for y := 0; y < panelH && !found; y++ {
		for x := 0; x < panelW; x++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r>>8 == uint32(ColNotice.R) && g>>8 == uint32(ColNotice.G) && bl>>8 == uint32(ColNotice.B) {
				found = true
				break
			}
		}
	}
	if !found {
		t.Error("no bar drawn in the first panel")
	}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	o := Options{Command: "runnerpool-bench -report bench"}
	o.defaults()
	r := &Result{Options: o, Started: time.Now(), Duration: time.Minute, Notice: []float64{10, 20}, WarmOverhead: []float64{100},
		Calls: map[string]map[string]int{"reused": {"DynamoDB.GetItem": 3, "EC2.CreateTags": 1}}, Runners: map[string]int{"reused": 2}}
	r.add(Figure{Name: "claim_notice_p50_ms", Value: 15, Unit: "ms", How: "claim to notice"})
	r.add(Figure{Name: "start_calls_per_50_started", Missing: "no warm pools", Unit: "calls"})
	md := r.Markdown()
	for _, want := range []string{
		"`claim_notice_p50_ms` | 15 ms | claim to notice",
		"`start_calls_per_50_started` | n/a | not measured: no warm pools",
		"![latency histograms](latency.png)",
		"**reused**: 4 calls, 2 per runner (2 runners): `DynamoDB.GetItem` 3, `EC2.CreateTags` 1",
		"runnerpool-bench -report bench",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
