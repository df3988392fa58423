// `runnerpool healthcheck`: a container health check for images without a shell or curl (the release
// image is distroless): GET a URL of the replica itself, exit 0 on 200, 1 otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080/healthz", "URL to GET: the replica's /healthz (on the metrics address when RUNNERPOOL_METRICS_LISTEN is set).")
	timeout := fs.Duration("timeout", 4*time.Second, "Time limit of the request.")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "runnerpool healthcheck: unexpected arguments %q\n", fs.Args())
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("health check of %s: %w", *url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check of %s: %w", *url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return errors.New("health check of " + *url + ": " + resp.Status)
	}
	_, err = fmt.Fprintln(stdout, "ok")
	return err
}
