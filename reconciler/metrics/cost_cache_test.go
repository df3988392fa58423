package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

// The runner cache's cost is exported beside the instances' as runnerpool_cost_usd{kind="cache"},
// its storage and its requests, with the prices' source.
func TestCostSeriesHaveTheCache(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.RegisterCost(func(context.Context) (history.Report, error) {
		c := history.PriceCache([]history.CacheUsage{{Repository: "acme/web", Gets: 10000, Puts: 1000, Bytes: 2e9}}, 30*24*time.Hour, history.DefaultCachePrices)
		return history.Report{Cache: &c}, nil
	})
	out := scrape(t, m)
	for _, want := range []string{
		`runnerpool_cost_usd{kind="cache",name="storage",price_source="s3-standard-us-east-1"`,
		`runnerpool_cost_usd{kind="cache",name="requests",price_source="s3-standard-us-east-1"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}
