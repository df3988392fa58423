package config

import (
	"strings"
	"testing"
	"time"
)

// TestDashboardSettings: the dashboard is off by default and on its own address; the price file is
// read and checked at start; history settings are bounded.
func TestDashboardSettings(t *testing.T) {
	t.Parallel()
	prices := writeFile(t, "prices.json", `{"prices":[{"instance_type":"c6i.large","per_hour":0.085}]}`)
	badPrices := writeFile(t, "bad.json", `{"prices":[{"instance_type":"c6i.large","usage_class":"reserved","per_hour":1}]}`)
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			d := c.Dashboard
			if d.Listen != "" || d.Prices != nil || !d.AWSPrices || d.SampleInterval != 5*time.Minute || d.Retention != 720*time.Hour {
				t.Errorf("defaults: %+v", d)
			}
		}},
		{name: "enabled", env: map[string]string{"RUNNERPOOL_DASHBOARD_LISTEN": "127.0.0.1:8081", "RUNNERPOOL_PRICE_FILE": prices},
			args: []string{"--aws-prices=false", "--history-sample-interval", "1m"},
			check: func(t *testing.T, c Config) {
				d := c.Dashboard
				if d.Listen != "127.0.0.1:8081" || d.Prices == nil || len(d.Prices.Prices) != 1 || d.AWSPrices || d.SampleInterval != time.Minute {
					t.Errorf("enabled: %+v", d)
				}
			}},
		{name: "same address as the API", args: []string{"--listen", ":9000", "--dashboard-listen", ":9000"}, wantErr: "dashboard-listen: must differ"},
		{name: "bad address", args: []string{"--dashboard-listen", "nope"}, wantErr: "dashboard-listen"},
		{name: "bad price file", args: []string{"--price-file", badPrices}, wantErr: `usage_class "reserved"`},
		{name: "missing price file", args: []string{"--price-file", "/nonexistent.json"}, wantErr: "reading price file"},
		{name: "sampling too often", args: []string{"--history-sample-interval", "1s"}, wantErr: "history-sample-interval 1s"},
		{name: "retention too short", args: []string{"--history-retention", "2h"}, wantErr: "history-retention 2h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv(t)
			for k, v := range tt.env {
				env[k] = v
			}
			c, err := load(env, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			tt.check(t, c)
		})
	}
}
