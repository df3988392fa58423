// `runnerpool status --cost`: the cost report of the dashboard's cost page and of the
// runnerpool_cost_* series (history.Compute, the one shared function), read straight from the
// state table with the operator's AWS credentials: cost is an operator's question, not a
// workflow's, so it does not go through the workflow API.
package clientcmd

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
)

// costFlags are the flags of status --cost.
type costFlags struct {
	table, priceFile, window string
	awsPrices                bool
}

func (c *costFlags) register(fsVar func(p *string, name, value, usage string), boolVar func(p *bool, name string, value bool, usage string), env Env) {
	fsVar(&c.table, "table", env("RUNNERPOOL_TABLE"), "with --cost: the state table [RUNNERPOOL_TABLE]")
	fsVar(&c.priceFile, "price-file", env("RUNNERPOOL_PRICE_FILE"), "with --cost: the operator's price file [RUNNERPOOL_PRICE_FILE]")
	fsVar(&c.window, "window", "24h", "with --cost: 1h, 24h or 7d")
	aws := true
	if v, err := strconv.ParseBool(env("RUNNERPOOL_AWS_PRICES")); err == nil {
		aws = v
	}
	boolVar(&c.awsPrices, "aws-prices", aws, "with --cost: ask the AWS Price List API and spot price history for prices the file lacks [RUNNERPOOL_AWS_PRICES]")
}

// statusCost reads the table and prints the report.
func statusCost(ctx context.Context, c costFlags, env Env, asJSON bool, stdout io.Writer) error {
	window, err := dashboard.ParseWindow(c.window)
	if err != nil {
		return fmt.Errorf("%w: --window: %w", ErrUsage, err)
	}
	if c.table == "" {
		return fmt.Errorf("%w: --cost needs --table (or RUNNERPOOL_TABLE)", ErrUsage)
	}
	o := pricing.Options{}
	if c.priceFile != "" {
		f, err := pricing.ReadFile(c.priceFile)
		if err != nil {
			return err
		}
		o.File = &f
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if c.awsPrices {
		o.PriceList = pricing.PriceList{API: newPriceListClient(awsCfg), Region: awsCfg.Region}
		o.Spot = pricing.SpotHistory{API: ec2.NewFromConfig(awsCfg)}
	}
	skip, _ := strconv.ParseBool(env("RUNNERPOOL_DYNAMODB_SKIP_CRC32"))
	db := dynamodb.NewFromConfig(awsCfg, func(do *dynamodb.Options) { do.DisableValidateResponseChecksum = skip })
	h := history.New(db, c.table, history.Options{})
	now := time.Now()
	rep, err := history.Compute(ctx, h, pricing.New(o).PerHour, now.Add(-window), now)
	if err != nil {
		return fmt.Errorf("computing the cost: %w", err)
	}
	if asJSON {
		return printJSON(stdout, rep)
	}
	PrintCost(stdout, rep)
	return nil
}

// PrintCost writes a cost report as the tables of the dashboard's cost page.
func PrintCost(w io.Writer, rep history.Report) {
	fmt.Fprintf(w, "Cost of runs started %s to %s\n\n", rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339))
	fmt.Fprintf(w, "total %s for %s instance time over %d runs (prices: %s)", dashboard.USD(rep.Total.Cost), fmtSecs(rep.Total.InstanceSeconds), rep.Total.Runs, rep.Total.SourceNote())
	if rep.Total.UnpricedSeconds > 0 {
		fmt.Fprintf(w, "; %s unpriced", fmtSecs(rep.Total.UnpricedSeconds))
	}
	fmt.Fprintln(w)
	s := rep.Savings
	if s.BaselineRuns > 0 {
		fmt.Fprintf(w, "saved by reuse %s and %s of waiting: %d reused, %d started runners against a cold start of %s (median of %d provisions that created; prices: %s)\n",
			dashboard.USD(s.MoneySaved), s.TimeSaved.Round(100*time.Millisecond), s.ReusedRunners, s.StartedRunners, s.Baseline.Round(100*time.Millisecond), s.BaselineRuns, strings.Join(append([]string{}, s.Sources...), " + "))
	} else {
		fmt.Fprintf(w, "saved by reuse: not claimed (%d reused, %d started runners; no provision created in the window to compare with)\n", s.ReusedRunners, s.StartedRunners)
	}
	for _, sec := range []struct {
		title string
		lines []history.Line
	}{{"REPOSITORY", rep.Repositories}, {"RUNNER CLASS", rep.RunnerClasses}, {"WAITING (POOLS, IDLE RUNNERS)", rep.Pools}} {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tRUNS\tINSTANCE TIME\tCOST\tUNPRICED\tPRICE FROM\n", sec.title)
		for _, l := range sec.lines {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", l.Name, l.Runs, fmtSecs(l.InstanceSeconds), dashboard.USD(l.Cost), fmtSecs(l.UnpricedSeconds), l.SourceNote())
		}
		if len(sec.lines) == 0 {
			fmt.Fprintln(tw, "(none)\t\t\t\t\t")
		}
		_ = tw.Flush()
	}
	if c := rep.Cache; c != nil {
		fmt.Fprintf(w, "\nrunner cache %s: storage %s, requests %s (prices: %s)\n", dashboard.USD(c.Total.Cost), dashboard.USD(c.Total.StorageCost), dashboard.USD(c.Total.RequestCost), c.Source)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CACHE\tSTORED GB\tGETS\tPUTS\tLISTS\tCOST")
		for _, l := range c.Repositories {
			fmt.Fprintf(tw, "%s\t%.2f\t%d\t%d\t%d\t%s\n", l.Repository, float64(l.Bytes)/1e9, l.Gets, l.Puts, l.Lists, dashboard.USD(l.Cost))
		}
		_ = tw.Flush()
	}
}

func fmtSecs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
