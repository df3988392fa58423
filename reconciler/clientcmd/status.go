// `runnerpool status`: the deployment's pools and the caller's runs, as readable tables; with
// --run, what one provision of the caller's run did; with --cost, the cost report (cost.go).
package clientcmd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

// stateColumns is the order of the state columns of the pools table.
var stateColumns = []string{"created", "warming", "ready", "stopped", "idle", "claimed", "running", "terminating"}

// Status runs `runnerpool status`.
func Status(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, env, time.Minute)
	run := fs.String("run", "", "show one run: its run id (this repository) or run key")
	attempt := fs.Int("attempt", 0, "with --run and a run id: the attempt; 0: the token's")
	asJSON := fs.Bool("json", false, "print the API's answer as JSON")
	cost := fs.Bool("cost", false, "print the cost report (the dashboard's) from the state table, with the operator's AWS credentials")
	var cf costFlags
	cf.register(fs.StringVar, fs.BoolVar, env)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: runnerpool status --api URL --audience AUD [--run ID] [flags]\n       runnerpool status --cost --table TABLE [--window 24h] [--price-file FILE] [--json]")
		fs.PrintDefaults()
	}
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	c.output = "" // status has no step outputs
	if *cost {
		ctx, cancel := withTimeout(ctx, c.timeout)
		defer cancel()
		return statusCost(ctx, cf, env, *asJSON, stdout)
	}
	cl, err := c.client(env, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	if *run != "" {
		r, err := cl.Run(ctx, *run, *attempt)
		if err != nil {
			return fmt.Errorf("reading run %s: %w", *run, err)
		}
		if *asJSON {
			return printJSON(stdout, r)
		}
		printRun(stdout, r)
		return nil
	}
	p, err := cl.Pools(ctx)
	if err != nil {
		return fmt.Errorf("reading pools: %w", err)
	}
	if *asJSON {
		return printJSON(stdout, p)
	}
	printPools(stdout, p)
	return nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func printPools(w io.Writer, p apiv1.PoolsResponse) {
	fmt.Fprintf(w, "Pools at %s\n\n", p.At.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := []string{"RUNNER CLASS", "POOL"}
	for _, s := range stateColumns {
		header = append(header, strings.ToUpper(s))
	}
	header = append(header, "TOTAL")
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	row := func(class, pool string, states map[string]int, total int) {
		cells := []string{class, pool}
		for _, s := range stateColumns {
			cells = append(cells, fmt.Sprint(states[s]))
		}
		cells = append(cells, fmt.Sprint(total))
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	total := 0
	for _, pc := range p.Pools {
		pool := pc.Pool
		if pool == "" {
			pool = "-"
		}
		row(pc.RunnerClass, pool, pc.States, pc.Total)
		total += pc.Total
	}
	row("all", "", p.Totals, total)
	_ = tw.Flush()
	printAutoscaled(w, p)

	fmt.Fprintln(w)
	if len(p.Runs) == 0 {
		fmt.Fprintln(w, "No run of this repository holds runners.")
		return
	}
	fmt.Fprintln(w, "Runs of this repository holding runners:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tATTEMPT\tINSTANCES\tSTATES")
	for _, r := range p.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.RunID, r.Attempt, r.Instances, formatStates(r.States))
	}
	_ = tw.Flush()
}

// printAutoscaled shows each autoscaled pool's last decision: forecast, target against actual (hot
// = ready, stopped), the window's maxima, and the reasons.
func printAutoscaled(w io.Writer, p apiv1.PoolsResponse) {
	var pools []apiv1.PoolCount
	for _, pc := range p.Pools {
		if pc.Autoscale != nil {
			pools = append(pools, pc)
		}
	}
	if len(pools) == 0 {
		return
	}
	fmt.Fprintln(w, "\nAutoscaled pools (target / actual, within the schedule window's maxima):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tFORECAST JOBS/MIN\tHOT\tSTOPPED\tWINDOW MAX\tQUEUE P95 / GOAL\tDECIDED")
	for _, pc := range pools {
		a := pc.Autoscale
		fmt.Fprintf(tw, "%s\t%.1f\t%d / %d\t%d / %d\t%d / %d\t%s\t%s ago\n", pc.Pool, a.Forecast,
			a.TargetHot, pc.States["ready"], a.TargetStopped, pc.States["stopped"], a.WindowHot, a.WindowStopped,
			queueAgainstGoal(a.QueueP95MS, a.QueueJobs, a.GoalMS), p.At.Sub(a.DecidedAt).Round(time.Second))
	}
	_ = tw.Flush()
	for _, pc := range pools {
		a := pc.Autoscale
		if a.QueueJobs > 0 && a.QueueP95MS > a.GoalMS {
			fmt.Fprintf(w, "  %s: queue time p95 %s over the last hour's %d jobs is above the goal %s\n", pc.Pool, ms(a.QueueP95MS), a.QueueJobs, ms(a.GoalMS))
		}
		if a.Conflict != "" {
			fmt.Fprintf(w, "  %s: goal not met: %s\n", pc.Pool, a.Conflict)
		}
		for _, r := range a.Reasons {
			fmt.Fprintf(w, "  %s: %s\n", pc.Pool, r)
		}
		printAutoscaleInputs(w, pc.Pool, a.Inputs)
	}
}

// printAutoscaleInputs shows what a decision read besides the recorded demand.
func printAutoscaleInputs(w io.Writer, pool string, in *apiv1.PoolAutoscaleInputs) {
	if in == nil {
		return
	}
	sec := func(s float64) time.Duration {
		return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond)
	}
	fmt.Fprintf(w, "  %s: live: %d waiting (%d queued, %d by the scale sets' statistics), %d in flight\n",
		pool, in.Waiting, in.Queued, in.ScaleSetWaiting, in.InFlight)
	fmt.Fprintf(w, "  %s: runs: %d in progress, fan-outs of %d workflows learned, %d hot for them\n", pool, in.Runs, in.Fanouts, in.Prewarm)
	fmt.Fprintf(w, "  %s: starts: hot %s, stopped %s, cold %s (%s)\n", pool, sec(in.HotStart), sec(in.StoppedStart), sec(in.ColdStart), in.StartsFrom)
	fmt.Fprintf(w, "  %s: prices: hot $%.4f/h, stopped $%.4f/h (%s)\n", pool, in.HotPerHour, in.StoppedPerHour, in.PricesFrom)
}

// queueAgainstGoal renders an autoscaled pool's measured queue-time p95 against its goal: "7.5s / 5s
// (42 jobs)", or "- / 5s" when no job was measured in the last hour.
func queueAgainstGoal(p95MS int64, jobs int, goalMS int64) string {
	if jobs == 0 {
		return "- / " + ms(goalMS)
	}
	return fmt.Sprintf("%s / %s (%d jobs)", ms(p95MS), ms(goalMS), jobs)
}

func ms(v int64) string {
	return (time.Duration(v) * time.Millisecond).Round(100 * time.Millisecond).String()
}

func formatStates(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func printRun(w io.Writer, r apiv1.RunResponse) {
	fmt.Fprintf(w, "Run %s (%s, run %s attempt %d): %s\n", r.RunKey, r.Repository, r.RunID, r.Attempt, r.Status)
	fmt.Fprintf(w, "Requested %s, updated %s\n", r.CreatedAt.Format(time.RFC3339), r.UpdatedAt.Format(time.RFC3339))
	if q := r.Request; q != nil {
		size := q.ResourceClass
		if size == "" {
			size = fmt.Sprintf("%d vCPU / %d MiB", q.CPU, q.MemoryMiB)
		}
		fmt.Fprintf(w, "Asked for %d %s runner(s) of %s, types %s\n", q.Count, q.UsageClass, size, strings.Join(q.AllowedInstanceTypes, ","))
	}
	if p := r.Provision; p != nil {
		fmt.Fprintf(w, "Provision %s in %s", p.Status, time.Duration(p.Timing.TotalMS)*time.Millisecond)
		if p.Error != "" {
			fmt.Fprintf(w, " (%s: %s)", p.Outcome, p.Error)
		}
		fmt.Fprintln(w)
		if len(p.Runners) > 0 {
			fmt.Fprintln(w)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INSTANCE\tTYPE\tUSAGE\tZONE\tSOURCE")
			for _, rn := range p.Runners {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rn.InstanceID, rn.InstanceType, rn.UsageClass, rn.Zone, rn.Source)
			}
			_ = tw.Flush()
		}
		if len(p.Undone) > 0 {
			fmt.Fprintln(w)
			printUndone(w, *p)
		}
	}
	for _, rel := range r.Releases {
		fmt.Fprintf(w, "\nReleased at %s (idle time %ds): %s\n", rel.At.Format(time.RFC3339), rel.IdleTimeSeconds, rel.Message)
	}
	if len(r.Instances) > 0 {
		fmt.Fprintln(w, "\nInstances now:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tSTATE\tSINCE\tREASON")
		for _, in := range r.Instances {
			since := ""
			if !in.UpdatedAt.IsZero() {
				since = in.UpdatedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", in.InstanceID, in.State, since, in.Reason)
		}
		_ = tw.Flush()
	}
}
