package clientcmd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/clientcmd"
)

// TestStatusCostUsage: --cost needs a table and a known window, and says so before any AWS call.
func TestStatusCostUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"no table", []string{"--cost"}, nil, "--cost needs --table"},
		{"bad window", []string{"--cost", "--table", "t", "--window", "3d"}, nil, `window "3d"`},
		{"bad price file", []string{"--cost", "--price-file", "/nonexistent/prices.json"}, map[string]string{"RUNNERPOOL_TABLE": "t"}, "reading price file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut strings.Builder
			err := clientcmd.Status(context.Background(), tt.args, func(k string) string { return tt.env[k] }, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("status %v: %v, want %q", tt.args, err, tt.wantErr)
			}
			if tt.name != "bad price file" && !errors.Is(err, clientcmd.ErrUsage) {
				t.Errorf("status %v: %v is not a usage error", tt.args, err)
			}
		})
	}
}

// TestPrintCost: the tables carry every line with its price source, and savings are claimed only
// against an observed cold start.
func TestPrintCost(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	price := func(_ context.Context, typ, _, _ string) (float64, string) {
		if typ == "c6i.large" {
			return 0.36, "price-file"
		}
		return 0, history.PriceUnknown
	}
	runs := []history.Run{
		{Provision: history.Provision{RunKey: "1:1:1", Repository: "acme/api", RunnerClass: "linux", StartedAt: t0, Status: "succeeded", Steps: history.Steps{Total: time.Minute},
			Runners: []history.Runner{{InstanceType: "c6i.large", Source: history.SourceCreated}}}, ReleasedAt: t0.Add(100 * time.Second)},
		{Provision: history.Provision{RunKey: "1:2:1", Repository: "acme/web", RunnerClass: "linux", StartedAt: t0, Status: "succeeded", Steps: history.Steps{Total: time.Second},
			Runners: []history.Runner{{InstanceType: "m7i.large", Source: history.SourceReused}}}, ReleasedAt: t0.Add(10 * time.Second)},
	}
	var out strings.Builder
	clientcmd.PrintCost(&out, history.Build(t.Context(), runs, nil, time.Minute, price, t0, t0.Add(time.Hour)))
	for _, want := range []string{
		"total $0.010000 for 1m50s instance time over 2 runs (prices: price-file + unknown); 10s unpriced",
		"saved by reuse $0.0000 and 59s of waiting: 1 reused, 0 started runners against a cold start of 1m0s",
		"acme/api", "acme/web", "WAITING (POOLS, IDLE RUNNERS)", "(none)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
