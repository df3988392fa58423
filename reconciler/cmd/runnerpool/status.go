// `runnerpool status`: pools and this repository's runs as tables (reconciler/clientcmd).
package main

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/clientcmd"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := clientcmd.Status(ctx, args, os.Getenv, stdout, stderr)
	if errors.Is(err, clientcmd.ErrUsage) {
		return errUsage
	}
	return err
}
