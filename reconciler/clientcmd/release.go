// `runnerpool release`: hand this run's runners back to the pool. Meant for a last job with
// `if: always()`, so it also runs when the run failed or was cancelled; a run that never got a
// provision (the provision job failed before asking) is reported and is not an error.
package clientcmd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/client"
)

// Release runs `runnerpool release`.
func Release(ctx context.Context, args []string, env Env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, env, 10*time.Minute)
	idle := fs.Duration("idle-time", 0, "how long the runners may wait in the pool for the next run; 0: the deployment's default")
	attempt := fs.Int("attempt", 0, "the run attempt whose runners to release; 0: this attempt")
	runKey := fs.String("run-key", "", "the provision to release, as provision's run-key output (this run's only); instead of --attempt")
	asJSON := fs.Bool("json", false, "print the API's answer as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: runnerpool release --api URL --audience AUD [flags]")
		fs.PrintDefaults()
	}
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *idle < 0 || (*idle > 0 && *idle < time.Second) {
		return fmt.Errorf("%w: --idle-time %s: want 0 or at least 1s", ErrUsage, *idle)
	}
	cl, err := c.client(env, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := cl.Release(ctx, apiv1.ReleaseRequest{IdleTimeSeconds: int(*idle / time.Second), Attempt: *attempt, RunKey: *runKey})
	if client.Code(err) == apiv1.CodeRunNotFound {
		fmt.Fprintln(stdout, "Nothing to release: this run has no provision.")
		return c.write([]client.Output{{Name: "message", Value: "nothing to release: no provision"}, {Name: "pooled", Value: "0"}})
	}
	if err != nil {
		return fmt.Errorf("release failed: %w", err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(resp, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		printRelease(stdout, resp)
	}
	report, _ := json.Marshal(resp)
	return c.write([]client.Output{
		{Name: "run-key", Value: resp.RunKey},
		{Name: "message", Value: resp.Message},
		{Name: "pooled", Value: strconv.Itoa(resp.Counts["pooled"])},
		{Name: "report", Value: string(report)},
	})
}

func printRelease(w io.Writer, r apiv1.ReleaseResponse) {
	fmt.Fprintf(w, "%s\n", r.Message)
	if len(r.Instances) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tFOUND\tOUTCOME\tREASON")
	for _, in := range r.Instances {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", in.InstanceID, in.State, in.Outcome, in.Reason)
	}
	_ = tw.Flush()
}
