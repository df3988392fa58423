// Command runnerpool-demo is `make demo`: the whole product on one machine (see package demo).
// `runnerpool-demo agent [flags]` runs the instance agent with the GitHub fake's runner (-runner fake).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/agentcmd"
	"github.com/runnerpool/terraform-provider-runnerpool/test/demo"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := runAgent(ctx, os.Args[2:])
		stop()
		if errors.Is(err, agentcmd.ErrUsage) {
			os.Exit(2)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "runnerpool-demo agent:", err)
			os.Exit(1)
		}
		return
	}
	verbose := flag.Bool("v", false, "also print the components' logs (JSON) to stderr")
	keep := flag.Bool("keep", false, "keep the stack, the reconciler and its dashboard up after the walkthrough (Ctrl-C stops)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := demo.Options{Keep: *keep}
	if *verbose {
		o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		o.ChildOutput = os.Stderr
	} else {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if _, err := demo.Run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "runnerpool-demo:", err)
		os.Exit(1)
	}
}
