package service_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tableconfig "github.com/runnerpool/terraform-provider-runnerpool/internal/config"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service/servicetest"
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
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	repo := tableconfig.NewRepository(env.Store)
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	wp := tableconfig.WarmPool{Name: "priced", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 2}},
		Autoscale: &tableconfig.Autoscale{QueueTimeP95: tableconfig.Duration(5 * time.Second), MinHot: 1}}
	if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_CONVERGE_SCHEDULE": "@every 1s",
		"RUNNERPOOL_PRICE_FILE": prices, "RUNNERPOOL_AWS_PRICES": "false",
	})
	waitFor(t, 20*time.Second, "the pool's decision priced from the file", func() bool {
		st, err := env.Store.GetAutoscale(ctx, "priced")
		return err == nil && st.Decision.HotPerHour == 0.42 && strings.HasPrefix(st.Decision.PricesFrom, "price book: median of 1 instances")
	})
}
