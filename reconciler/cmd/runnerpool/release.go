// `runnerpool release`: hand this workflow run's runners back to the pool (reconciler/clientcmd).
package main

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/clientcmd"
)

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := clientcmd.Release(ctx, args, os.Getenv, stdout, stderr)
	if errors.Is(err, clientcmd.ErrUsage) {
		return errUsage
	}
	return err
}
