// Command runnerpool-demo is `make demo`: the whole product on one machine (see package demo).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/demo"
)

func main() {
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
