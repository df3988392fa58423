// `runnerpool simulate`: replays a job history through a model of a warm pool under three policies
// (cold starts only, the cheapest fixed schedule, the autoscaler) and prints what jobs waited and
// what idle capacity cost; optionally charts it (internal/simulate).
package main

import (
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/simulate"
)

// simulateFlags are the flags of `runnerpool simulate`.
type simulateFlags struct {
	history, label, chart, priceFile, instanceType, timezone string
	goal, goalP99, hot, stopped, cold, interval, cooldown    time.Duration
	percentile, stoppedPrice, hotPrice, budget, margin       float64
}

func runSimulate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f simulateFlags
	fs.StringVar(&f.history, "history", "", "job history the autoscaler learns from (same formats); default: the replayed history itself")
	fs.StringVar(&f.label, "label", "", "replay only jobs carrying all these comma-separated labels, such as pool=ci")
	fs.StringVar(&f.chart, "chart", "", "write a PNG chart of demand, targets and queue time to this file")
	fs.StringVar(&f.priceFile, "price-file", "", "the reconciler's price file (JSON); the hot price is its price of -instance-type")
	fs.StringVar(&f.instanceType, "instance-type", "c6i.large", "instance type priced from the price file")
	fs.StringVar(&f.timezone, "timezone", "UTC", "IANA timezone of the schedule's hours and the demand's slots")
	fs.DurationVar(&f.goal, "goal", 5*time.Second, "queue-time goal at -percentile")
	fs.Float64Var(&f.percentile, "percentile", 95, "percentile of the goal")
	fs.DurationVar(&f.goalP99, "goal-p99", 0, "an optional tail goal: 99 % of jobs start within it (the autoscaler keeps stopped instances for it); 0: none")
	fs.Float64Var(&f.margin, "margin", simulate.DefaultMargin, "with -history: the share of the goal's slow jobs the autoscaler's plan may leave slow on the history")
	fs.DurationVar(&f.hot, "hot-start", 2*time.Second, "queue time of a job an idle hot instance takes (registration)")
	fs.DurationVar(&f.stopped, "stopped-start", 14*time.Second, "queue time of a job a stopped instance takes (start and registration)")
	fs.DurationVar(&f.cold, "cold-start", 27*time.Second, "queue time of a cold start (launch, boot and registration), and the warm-up of a pool instance")
	fs.DurationVar(&f.interval, "interval", 30*time.Second, "time between convergence passes")
	fs.DurationVar(&f.cooldown, "cooldown", 2*time.Minute, "how long the autoscaler's lower targets hold before the pool shrinks")
	fs.Float64Var(&f.hotPrice, "hot-price", 0.085, "USD per hour of a running instance, when no price file gives one")
	fs.Float64Var(&f.stoppedPrice, "stopped-price", 0.0033, "USD per hour of a stopped instance (its volume: 30 GiB gp3 at 0.08 per GiB-month)")
	fs.Float64Var(&f.budget, "budget", 0, "most USD per hour the autoscaler spends on idle capacity (0: none)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: runnerpool simulate [flags] HISTORY\n\nHISTORY is GitHub's answers to GET /repos/OWNER/REPO/actions/runs/RUN_ID/jobs, concatenated,\nor CSV with the columns created_at, started_at, completed_at, labels (';'-separated); .gz is read\ncompressed. Flags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	o, err := f.options(fs.Arg(0))
	if err != nil {
		return err
	}
	cmp, err := simulate.Compare(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d jobs from %s to %s; goal: p%g queue time at most %s\n\n", len(o.Jobs),
		o.Jobs[0].Created.Format(time.RFC3339), o.Jobs[len(o.Jobs)-1].Created.Format(time.RFC3339), f.percentile, f.goal)
	if err := cmp.Print(stdout); err != nil {
		return err
	}
	if f.chart == "" {
		return nil
	}
	return writeChart(f.chart, cmp, o)
}

// options reads the histories and prices into simulate.Options.
func (f simulateFlags) options(path string) (simulate.Options, error) {
	loc, err := schedule.LoadLocation(f.timezone)
	if err != nil {
		return simulate.Options{}, fmt.Errorf("-timezone: %w", err)
	}
	if f.percentile <= 0 || f.percentile >= 100 {
		return simulate.Options{}, fmt.Errorf("-percentile %g: want between 0 and 100", f.percentile)
	}
	if f.goal <= 0 || f.hot <= 0 || f.stopped <= 0 || f.cold <= 0 || f.interval <= 0 {
		return simulate.Options{}, errors.New("-goal, -hot-start, -stopped-start, -cold-start and -interval must be positive")
	}
	if f.goalP99 < 0 || f.margin <= 0 || f.margin > 1 {
		return simulate.Options{}, errors.New("-goal-p99 must not be negative and -margin must be in (0, 1]")
	}
	o := simulate.Options{Goal: f.goal, GoalP99: f.goalP99, Percentile: f.percentile / 100, Loc: loc, Cooldown: f.cooldown, Budget: f.budget, Margin: f.margin}
	o.Model = simulate.Model{
		Starts:   autoscale.Starts{Hot: f.hot, Stopped: f.stopped, Cold: f.cold},
		Prices:   autoscale.Prices{HotPerHour: f.hotPrice, StoppedPerHour: f.stoppedPrice},
		Interval: f.interval,
	}
	if f.priceFile != "" {
		pf, err := pricing.ReadFile(f.priceFile)
		if err != nil {
			return o, err
		}
		p := pricing.New(pricing.Options{File: &pf}).Price(context.Background(), pricing.Key{InstanceType: f.instanceType})
		if !p.Known() {
			return o, fmt.Errorf("the price file %s has no price for %s", f.priceFile, f.instanceType)
		}
		o.Model.Prices.HotPerHour = p.PerHour
	}
	var labels []string
	if f.label != "" {
		labels = strings.Split(f.label, ",")
	}
	if o.Jobs, err = readHistory(path, labels); err != nil {
		return o, err
	}
	if f.history != "" {
		if o.History, err = readHistory(f.history, labels); err != nil {
			return o, err
		}
	}
	return o, nil
}

// readHistory reads a job history file (gzipped when its name ends in .gz) and keeps the jobs
// carrying labels.
func readHistory(path string, labels []string) ([]jobtrace.Job, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the job history: %w", err)
	}
	defer file.Close()
	var r io.Reader = file
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(file)
		if err != nil {
			return nil, fmt.Errorf("reading the job history %s: %w", path, err)
		}
		r = zr
	}
	jobs, _, err := jobtrace.Read(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	jobs = jobtrace.WithLabel(jobs, labels...)
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no finished job carries the labels %q", path, labels)
	}
	return jobs, nil
}

func writeChart(path string, cmp *simulate.Comparison, o simulate.Options) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	if err := cmp.Chart(out, o.Jobs, o.Goal); err != nil {
		out.Close()
		return fmt.Errorf("writing the chart %s: %w", path, err)
	}
	return out.Close()
}
