package demo_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/test/demo"
)

// syncBuffer is a bytes.Buffer safe to read while the demo writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestDemo runs `make demo ARGS=-keep`'s walkthrough and checks its summary line: the second
// workflow reuses every runner the first one created, nothing is orphaned and nothing
// double-claimed. Then, with the stack kept up, the printed dashboard URL serves both runs, until
// the demo is stopped.
func TestDemo(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type result struct {
		sum demo.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := demo.Run(ctx, &out, demo.Options{JobDuration: 200 * time.Millisecond, Keep: true})
		done <- result{sum, err}
	}()
	kept := regexp.MustCompile(`demo: the stack stays up; dashboard at (http://127\.0\.0\.1:\d+) `)
	var dash string
	for dash == "" {
		select {
		case r := <-done:
			t.Fatalf("demo returned before keeping the stack up: %+v %v\n%s", r.sum, r.err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if m := kept.FindStringSubmatch(out.String()); m != nil {
			dash = m[1]
		}
	}
	resp, err := http.Get(dash + "/runs")
	if err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "9001") || !strings.Contains(string(body), "9002") {
		t.Errorf("dashboard /runs: %d, want both workflows:\n%s", resp.StatusCode, body)
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatalf("demo: %v\n%s", r.err, out.String())
	}
	want := demo.Summary{Provisioned: 4, Reused: 2, Created: 2, Released: 4}
	if r.sum != want {
		t.Errorf("summary = %+v, want %+v\n%s", r.sum, want, out.String())
	}
	const line = "demo: ok provisioned=4 reused=2 created=2 released=4 orphans=0 double_claims=0"
	if !strings.Contains(out.String(), line+"\n") {
		t.Errorf("no summary line:\n%s", out.String())
	}
	// The README's quick start quotes the line the demo ends with.
	if readme, err := os.ReadFile("../../README.md"); err != nil || !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), "`"+line+"`") {
		t.Errorf("README.md does not quote the demo's summary line %q (%v)", line, err)
	}
	if !strings.Contains(out.String(), "dashboard (read-only, no authentication: local only): "+dash) {
		t.Errorf("the dashboard URL is not in the timeline:\n%s", out.String())
	}
}
