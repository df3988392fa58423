// Command runnerpool-bench is `make bench` and `make soak` (see package bench): the whole system on
// the local stack, measured; or two replicas under mixed load for a while, watched.
//
//	runnerpool-bench [-factor 0.05] [-report bench] [-idle-window 60s] ...
//	runnerpool-bench -soak 10m
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/runnerpool/terraform-provider-runnerpool/test/bench"
)

func main() {
	var o bench.Options
	flag.Float64Var(&o.Factor, "factor", 0.05, "time factor applied to the anchors (cold boot 25 s, stopped start 12 s, registration 2 s)")
	flag.StringVar(&o.ProfileDir, "profile", "", "directory for CPU profiles of the 20,000-record passes and the many repos served burst (convergence.pprof, refresh.pprof, manyrepos.pprof; empty: none)")
	flag.StringVar(&o.ReportDir, "report", committedReport, "directory for report.md and latency.png (empty: none; a run of some -phases writes none unless given another directory)")
	flag.DurationVar(&o.IdleWindow, "idle-window", 0, "how long idle agents' requests are counted (default 60s)")
	flag.IntVar(&o.WarmCycles, "warm-cycles", 0, "provision/release cycles served from the pool (default 40)")
	flag.IntVar(&o.Workflows, "workflows", 0, "workflows of the throughput phase (default 40)")
	flag.IntVar(&o.Concurrency, "concurrency", 0, "workflows at a time in the throughput phase (default 10)")
	flag.DurationVar(&o.PollInterval, "poll-interval", 0, "the reconciler's signal polling (default: the product's)")
	flag.Float64Var(&o.SQSSampling, "sqs-sampling", 0, "probability that an SQS short poll comes back empty, as real SQS can on a small queue (default 0.3; negative: off)")
	flag.Uint64Var(&o.Seed, "seed", 0, "random seed (default: the time)")
	flag.IntVar(&o.ManyRepos, "many-repos", 0, "repositories sharing one runner class in the many repos phase (default 20)")
	flag.IntVar(&o.ManyReposIdle, "many-repos-idle", 0, "idle runners per repository in the many repos phase (default 10)")
	flag.IntVar(&o.ManyReposWorkflows, "many-repos-workflows", 0, "concurrent workflows of one runner per repository in the many repos phase (default 20)")
	flag.IntVar(&o.DashboardInstances, "dashboard-instances", 0, "live records of the dashboard phase (default 20000)")
	flag.IntVar(&o.DashboardRuns, "dashboard-runs", 0, "history entries of the dashboard phase (default 10000)")
	flag.StringVar(&o.ScreenshotDir, "screenshots", "", "directory for the dashboard phase's page screenshots (docs/images makes the README's; empty: none)")
	phases := flag.String("phases", "", "comma-separated phases to run (cold, warm, throughput, replicas, idle, reuse, warm pools, convergence 20000, refresh 20000, dashboard, scale sets, quota, launch, docker, fault_storm, foreign items, many repos; default all; the audit always runs)")
	soak := flag.Duration("soak", 0, "run the soak instead: two replicas under mixed load for this long")
	verbose := flag.Bool("v", false, "also print the components' logs (JSON) to stderr")
	var level slog.Level
	flag.TextVar(&level, "log-level", slog.LevelInfo, "the level of the logs -v prints (debug, info, warn, error)")
	flag.Parse()
	o.Command = "runnerpool-bench " + strings.Join(os.Args[1:], " ")
	if *phases != "" {
		for p := range strings.SplitSeq(*phases, ",") {
			o.Phases = append(o.Phases, strings.TrimSpace(p))
		}
	}
	reportSet := false
	flag.Visit(func(f *flag.Flag) { reportSet = reportSet || f.Name == "report" })
	dir, err := reportDir(o.Phases, o.ReportDir, reportSet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runnerpool-bench:", err)
		os.Exit(2)
	}
	o.ReportDir = dir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *verbose {
		o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		o.ChildOutput = os.Stderr
	} else {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if *soak > 0 {
		_, err = bench.Soak(ctx, os.Stdout, bench.SoakOptions{Duration: *soak, Factor: o.Factor, Seed: o.Seed, Logger: o.Logger, ChildOutput: o.ChildOutput})
	} else {
		_, err = bench.Run(ctx, os.Stdout, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runnerpool-bench:", err)
		os.Exit(1)
	}
}

// committedReport is the directory of the report committed beside the code: only a whole run may
// write it (a run of some phases once replaced it with a report of one phase).
const committedReport = "bench"

// reportDir is where a run writes its report: a run of some phases writes none unless it names
// another directory, and is refused when it names the committed one.
func reportDir(phases []string, dir string, explicit bool) (string, error) {
	if len(phases) == 0 {
		return dir, nil
	}
	if !explicit {
		return "", nil
	}
	if filepath.Clean(dir) == committedReport {
		return "", fmt.Errorf("-phases runs only some phases, so it may not write the committed %s/report.md: pass -report \"\" or another directory", committedReport)
	}
	return dir, nil
}
