// The cost series: the same report the dashboard's cost page shows (history.Compute over the last
// 24 hours, shared through the dashboard's cache), so a Grafana panel, the page and `runnerpool
// status --cost` never disagree. Read on scrape; a failed read keeps the last good figures.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
)

// CostWindow is the window of the cost series.
const CostWindow = "24h"

type costCollector struct {
	read                              func(ctx context.Context) (history.Report, error)
	cost, seconds, unpriced, savedUSD *prometheus.Desc
	savedSeconds, runs                *prometheus.Desc
	mu                                sync.Mutex
	last                              *history.Report
	log                               interface{ Warn(string, ...any) }
}

// RegisterCost adds the cost series, read from read on every scrape (which should cache: the
// dashboard's Cost does). A nil *Metrics is a no-op.
func (m *Metrics) RegisterCost(read func(ctx context.Context) (history.Report, error)) {
	if m == nil {
		return
	}
	labels := []string{"window", "kind", "name", "price_source"}
	c := &costCollector{
		read: read, log: m.log,
		cost:         prometheus.NewDesc(namespace+"_cost_usd", "Cost in USD over the window by kind and name: instance-seconds x hourly price for kind total, repository, runner_class and pool; the runner cache's S3 storage and requests for kind cache (name storage, requests). price_source says where the prices came from.", labels, nil),
		seconds:      prometheus.NewDesc(namespace+"_instance_seconds", "Instance-seconds over the window by kind and name.", labels, nil),
		unpriced:     prometheus.NewDesc(namespace+"_unpriced_instance_seconds", "Instance-seconds over the window whose price is unknown (not in runnerpool_cost_usd).", labels, nil),
		savedUSD:     prometheus.NewDesc(namespace+"_reuse_saved_usd", "Boot time that reused runners did not bill, priced, over the window.", []string{"window", "price_source"}, nil),
		savedSeconds: prometheus.NewDesc(namespace+"_reuse_saved_wait_seconds", "Wait that provisions served without creating saved, against the median cold start of the window.", []string{"window"}, nil),
		runs:         prometheus.NewDesc(namespace+"_cost_runs", "Provisions started in the window.", []string{"window"}, nil),
	}
	m.registerer.MustRegister(c)
}

func (c *costCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cost, c.seconds, c.unpriced, c.savedUSD, c.savedSeconds, c.runs} {
		ch <- d
	}
}

func (c *costCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	rep, err := c.read(ctx)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.log.Warn("metrics: reading the cost report", "error", err)
		if c.last == nil {
			return
		}
		rep = *c.last
	} else {
		c.last = &rep
	}
	emit := func(kind string, l history.Line) {
		src := l.SourceNote()
		ch <- prometheus.MustNewConstMetric(c.cost, prometheus.GaugeValue, l.Cost, CostWindow, kind, l.Name, src)
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.GaugeValue, l.InstanceSeconds, CostWindow, kind, l.Name, src)
		ch <- prometheus.MustNewConstMetric(c.unpriced, prometheus.GaugeValue, l.UnpricedSeconds, CostWindow, kind, l.Name, src)
	}
	emit("total", rep.Total)
	if cache := rep.Cache; cache != nil {
		// The runner cache's S3 cost (history/cache.go), apart from the instances': kind "cache",
		// name "storage" or "requests"; no instance-seconds.
		for name, v := range map[string]float64{"storage": cache.Total.StorageCost, "requests": cache.Total.RequestCost} {
			ch <- prometheus.MustNewConstMetric(c.cost, prometheus.GaugeValue, v, CostWindow, "cache", name, cache.Source)
		}
	}
	for kind, ls := range map[string][]history.Line{"repository": rep.Repositories, "runner_class": rep.RunnerClasses, "pool": rep.Pools} {
		for _, l := range ls {
			emit(kind, l)
		}
	}
	src := "none"
	if len(rep.Savings.Sources) > 0 {
		src = (&history.Line{Sources: rep.Savings.Sources}).SourceNote()
	}
	ch <- prometheus.MustNewConstMetric(c.savedUSD, prometheus.GaugeValue, rep.Savings.MoneySaved, CostWindow, src)
	ch <- prometheus.MustNewConstMetric(c.savedSeconds, prometheus.GaugeValue, rep.Savings.TimeSaved.Seconds(), CostWindow)
	ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(rep.Total.Runs), CostWindow)
}
