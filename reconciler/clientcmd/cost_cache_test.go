package clientcmd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/clientcmd"
)

// TestPrintCostCache: `runnerpool status --cost` prints the runner cache's cost (storage and
// requests, per repository) apart from the instances', as the dashboard's cost page does.
func TestPrintCostCache(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	rep := history.Build(t.Context(), nil, nil, time.Minute, nil, t0, t0.Add(30*24*time.Hour))
	c := history.PriceCache([]history.CacheUsage{{Repository: "acme/web", Gets: 10000, Puts: 1000, Bytes: 2e9}}, 30*24*time.Hour, history.DefaultCachePrices)
	rep.Cache = &c
	var out strings.Builder
	clientcmd.PrintCost(&out, rep)
	// 2 GB for 30 days at $0.023: $0.046; 1,000 puts at $0.005 and 10,000 gets at $0.0004 per 1,000: $0.009.
	for _, want := range []string{"runner cache $0.0550: storage $0.0460, requests $0.009000 (prices: s3-standard-us-east-1)", "acme/web", "2.00", "10000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
