// `runnerpool provision`: runners for this workflow run, from a GitHub Actions step (reconciler/clientcmd).
package main

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/clientcmd"
)

func runProvision(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := clientcmd.Provision(ctx, args, os.Getenv, stdout, stderr)
	if errors.Is(err, clientcmd.ErrUsage) {
		return errUsage
	}
	return err
}
