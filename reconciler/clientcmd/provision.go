// `runnerpool provision`: runners for this workflow run.
package clientcmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/client"
)

// ProvisionTimeout is how long `runnerpool provision` (the provision action) waits, retries
// included: longer than the reconciler's longest own limit at its defaults, a runner class whose
// boot installs packages (--provision-timeout 10m, plus the apt lock wait and the install of
// internal/declared's boot.go), so that the reconciler, not the workflow step, ends a slow provision.
const ProvisionTimeout = 30 * time.Minute

// Provision runs `runnerpool provision`.
func Provision(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, env, ProvisionTimeout)
	var req apiv1.ProvisionRequest
	var types string
	fs.IntVar(&req.Count, "count", 1, "number of runners (1-50)")
	fs.StringVar(&req.UsageClass, "usage-class", "on-demand", "on-demand or spot")
	fs.StringVar(&types, "allowed-instance-types", "", "comma-separated instance type patterns, e.g. 'c*,m5.*' (required)")
	fs.StringVar(&req.ResourceClass, "resource-class", "", "a configured size (or give --cpu and --memory-mib)")
	fs.IntVar(&req.CPU, "cpu", 0, "minimum vCPUs")
	fs.IntVar(&req.MemoryMiB, "memory-mib", 0, "minimum memory in MiB")
	fs.StringVar(&req.RunnerClass, "runner-class", "", "runner class; empty: the deployment's default")
	fs.BoolVar(&req.AllowBurstable, "allow-burstable", false, "allow burstable (t*) instance types")
	fs.BoolVar(&req.FallbackToOnDemand, "fallback-to-on-demand", false, "a spot request may launch on-demand when spot capacity is short")
	asJSON := fs.Bool("json", false, "print the API's answer as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: runnerpool provision --api URL --audience AUD --count N --allowed-instance-types 'c*,m5.*' [flags]")
		fs.PrintDefaults()
	}
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	req.AllowedInstanceTypes = splitList(types)
	if len(req.AllowedInstanceTypes) == 0 {
		fmt.Fprintln(stderr, "--allowed-instance-types is required")
		return fmt.Errorf("%w: --allowed-instance-types is required", ErrUsage)
	}
	cl, err := c.client(env, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := cl.Provision(ctx, req)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Body.Provision != nil {
			printUndone(stdout, *ae.Body.Provision)
		}
		return fmt.Errorf("provision failed: %w", err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(resp, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		printProvision(stdout, resp)
	}
	runners, _ := json.Marshal(resp.Runners)
	return c.write([]client.Output{
		{Name: "label", Value: resp.Label},
		{Name: "labels", Value: strings.Join(resp.Labels, ",")},
		{Name: "run-key", Value: resp.RunKey},
		{Name: "count", Value: strconv.Itoa(len(resp.Runners))},
		{Name: "instance-ids", Value: strings.Join(resp.InstanceIDs(), ",")},
		{Name: "runners", Value: string(runners)},
	})
}

func printProvision(w io.Writer, p apiv1.ProvisionResponse) {
	fmt.Fprintf(w, "Provisioned %d runner(s) for run %s in %s; use runs-on: %s\n\n", len(p.Runners), p.RunKey,
		(time.Duration(p.Timing.TotalMS) * time.Millisecond).String(), p.Label)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tTYPE\tUSAGE\tZONE\tSOURCE")
	for _, r := range p.Runners {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.InstanceID, r.InstanceType, r.UsageClass, r.Zone, r.Source)
	}
	_ = tw.Flush()
}

func printUndone(w io.Writer, p apiv1.ProvisionResponse) {
	fmt.Fprintf(w, "Provision of run %s %s (%s): %s\n", p.RunKey, p.Status, p.Outcome, p.Error)
	if len(p.Undone) == 0 {
		return
	}
	fmt.Fprintln(w, "\nUndone:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tACTION\tREASON")
	for _, u := range p.Undone {
		reason := u.Reason
		if u.Error != "" {
			reason += " (" + u.Error + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", u.InstanceID, u.Action, reason)
	}
	_ = tw.Flush()
}
