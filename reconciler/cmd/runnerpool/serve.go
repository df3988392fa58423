// `runnerpool serve`: the reconciler service (reconciler/service). Settings come from flags and
// RUNNERPOOL_* variables (reconciler/config, documented in docs/reconciler.md); AWS from the SDK's
// default chain. Logs are JSON lines on stderr. SIGTERM or SIGINT (the ctx from main) starts the
// graceful shutdown.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/logging"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
)

// runServe loads the configuration and runs the service until ctx ends.
func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	cfg, err := config.Load(args, os.Getenv, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil
	case errors.Is(err, config.ErrUsage):
		return errUsage
	case err != nil:
		return err
	}
	log := logging.New(stderr, cfg.LogLevel)
	svc, err := service.New(ctx, cfg, service.Options{Logger: log})
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}
