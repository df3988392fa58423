package demo_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/demo"
)

// TestDemo runs `make demo`'s walkthrough and checks its summary line: the second workflow reuses
// every runner the first one created, nothing is orphaned and nothing double-claimed.
func TestDemo(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	sum, err := demo.Run(t.Context(), &out, demo.Options{JobDuration: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := demo.Summary{Provisioned: 4, Reused: 2, Created: 2, Released: 4}
	if sum != want {
		t.Errorf("summary = %+v, want %+v\n%s", sum, want, out.String())
	}
	last := strings.TrimSpace(out.String())
	last = last[strings.LastIndex(last, "\n")+1:]
	if last != "demo: ok provisioned=4 reused=2 created=2 released=4 orphans=0 double_claims=0" {
		t.Errorf("last line = %q", last)
	}
}
