// Command runnerpool is the second binary of the product: the reconciler service (`serve`), the
// agent that runs on every runner instance (`agent`), and the workflow-side client (`provision`,
// `release`, `status`).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/version"
)

// command is one subcommand: its one-line summary and what it runs.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// errUsage marks an error that should be followed by the usage text and exit status 2.
var errUsage = errors.New("usage")

func commands() map[string]command {
	return map[string]command{
		"serve":       {"run the reconciler service (HTTP API, cron, webhook routing)", runServe},
		"agent":       {"run the instance agent on a runner instance", runAgent},
		"logs":        {"ship a runner instance's bootstrap log and journal to CloudWatch Logs", runLogs},
		"provision":   {"ask the reconciler for runners for this workflow run", runProvision},
		"release":     {"hand this workflow run's runners back to the pool", runRelease},
		"status":      {"show pools and recent runs", runStatus},
		"simulate":    {"replay a job history under cold starts, a fixed schedule and the autoscaler", runSimulate},
		"healthcheck": {"check a replica's health (a container health check without curl)", runHealthcheck},
		"version":     {"print the version", runVersion},
	}
}

// order is the order subcommands are listed in --help.
var order = []string{"serve", "agent", "logs", "provision", "release", "status", "simulate", "healthcheck", "version"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "-v", "--version":
		name = "version"
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(stderr, "runnerpool: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, errUsage) {
			return 2
		}
		fmt.Fprintf(stderr, "runnerpool %s: %v\n", name, err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "runnerpool: self-hosted GitHub Actions runners on EC2, warm and reused.")
	fmt.Fprintln(w, "\nUsage: runnerpool <command> [flags]\n\nCommands:")
	cmds := commands()
	for _, name := range order {
		fmt.Fprintf(w, "  %-10s %s\n", name, cmds[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'runnerpool <command> --help' for a command's flags.")
}

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	_, err := fmt.Fprintf(stdout, "runnerpool %s (commit %s)\n", version.Version, version.Commit)
	return err
}
