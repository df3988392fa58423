package service_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAutoscaledPoolPricesFromThePriceFile: the running service prices an autoscaled pool's
// instances from the operator's price file (the dashboard's price book), and keeps the price and
// its source in the decision.
func TestAutoscaledPoolPricesFromThePriceFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prices := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(prices, []byte(`{"prices": [{"instance_type": "*", "per_hour": 0.42}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := autoscaledPool(t, "priced", 2, 0)
	env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_CONVERGE_SCHEDULE": "@every 1s",
		"RUNNERPOOL_PRICE_FILE": prices, "RUNNERPOOL_AWS_PRICES": "false",
	})
	waitFor(t, 20*time.Second, "the pool's decision priced from the file", func() bool {
		st, err := env.Store.GetAutoscale(ctx, "priced")
		return err == nil && st.Decision.HotPerHour == 0.42 && strings.HasPrefix(st.Decision.PricesFrom, "price book: median of 1 instances")
	})
}
