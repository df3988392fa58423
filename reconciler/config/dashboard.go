// The dashboard's and history's settings: the dashboard listener (off by default), where prices
// come from, and how history is sampled and kept. Kept apart from config.go so the settings table
// grows at its end.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
)

// Dashboard configures the dashboard, the cost figures and their history.
type Dashboard struct {
	// Listen is the dashboard's own address; empty: no dashboard. It has no authentication of its
	// own: only ever behind a load balancer that authenticates (docs/dashboard.md).
	Listen string
	// PriceFile, when set, is the operator's price file (pricing.File), read and checked at start.
	PriceFile string
	Prices    *pricing.File
	// AWSPrices asks the AWS Price List API and EC2's spot price history for prices the file lacks.
	AWSPrices bool
	// SampleInterval is the pool sampling interval; Retention how long run history is kept.
	SampleInterval time.Duration
	Retention      time.Duration
}

func init() {
	settings = append(settings, dashboardSettings...)
}

var dashboardSettings = []setting{
	{flag: "dashboard-listen", env: "RUNNERPOOL_DASHBOARD_LISTEN",
		doc: "Address of the read-only dashboard (host:port); empty: no dashboard. It has no authentication of its own: serve it only behind a load balancer that authenticates operators (docs/dashboard.md).",
		set: func(c *Config, v string) error {
			c.Dashboard.Listen = v
			if v == "" {
				return nil
			}
			return checkAddr(v)
		}},
	{flag: "price-file", env: "RUNNERPOOL_PRICE_FILE",
		doc: "JSON file of hourly instance prices in USD (docs/dashboard.md); they win over AWS's prices.",
		set: func(c *Config, v string) error {
			c.Dashboard.PriceFile, c.Dashboard.Prices = v, nil
			if v == "" {
				return nil
			}
			f, err := pricing.ReadFile(v)
			if err != nil {
				return err
			}
			c.Dashboard.Prices = &f
			return nil
		}},
	{flag: "aws-prices", env: "RUNNERPOOL_AWS_PRICES", def: "true",
		doc: "Ask the AWS Price List API (on-demand) and EC2's spot price history (spot) for prices the price file lacks, cached for an hour.",
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			c.Dashboard.AWSPrices = b
			return err
		}},
	{flag: "history-sample-interval", env: "RUNNERPOOL_HISTORY_SAMPLE_INTERVAL", def: "5m",
		doc: "How often the leader records every pool's counts in the history (the pools page's charts, the warm pools' cost).",
		set: duration(func(c *Config) *time.Duration { return &c.Dashboard.SampleInterval })},
	{flag: "history-retention", env: "RUNNERPOOL_HISTORY_RETENTION", def: "720h",
		doc: "How long a run's history entry is kept (DynamoDB TTL).",
		set: duration(func(c *Config) *time.Duration { return &c.Dashboard.Retention })},
}

// validateDashboard checks the dashboard's settings against the others.
func (c Config) validateDashboard() error {
	d := c.Dashboard
	var errs []error
	if d.Listen != "" && !strings.HasSuffix(d.Listen, ":0") && (d.Listen == c.Listen || d.Listen == c.MetricsListen) { // ":0": a free port each
		errs = append(errs, errors.New("dashboard-listen: must differ from listen and metrics-listen"))
	}
	if d.SampleInterval > 0 && (d.SampleInterval < 10*time.Second || d.SampleInterval > time.Hour) {
		errs = append(errs, fmt.Errorf("history-sample-interval %s: want 10s to 1h", d.SampleInterval))
	}
	if d.Retention > 0 && d.Retention < 24*time.Hour {
		errs = append(errs, fmt.Errorf("history-retention %s: at least 24h (the pools page shows a day)", d.Retention))
	}
	return errors.Join(errs...)
}
