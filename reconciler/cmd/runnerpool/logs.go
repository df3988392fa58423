// `runnerpool logs`: ships the instance's bootstrap log and journal to CloudWatch Logs
// (internal/logship), run on every runner instance by a systemd unit of its own that the user data
// installs when runnerpool_user_data names a log group.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/logship"
)

// logsFlags are the parsed flags of runnerpool logs.
type logsFlags struct {
	opts                 logship.Options
	region, imdsEndpoint string
}

func parseLogsFlags(args []string, stderr io.Writer) (logsFlags, error) {
	fs := flag.NewFlagSet("runnerpool logs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f logsFlags
	fs.StringVar(&f.opts.Group, "log-group", "", "CloudWatch Logs group to ship to (required); streams are INSTANCE-ID/bootstrap and INSTANCE-ID/journal")
	fs.StringVar(&f.region, "region", "", "AWS region of the log group (required)")
	fs.StringVar(&f.opts.StateDir, "state-dir", "/var/lib/runnerpool", "root-only directory where the shipped positions are kept")
	fs.StringVar(&f.opts.BootstrapLog, "bootstrap-log", "/var/log/runnerpool-bootstrap.log", "the user data's log file")
	fs.StringVar(&f.imdsEndpoint, "imds-endpoint", os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "instance metadata endpoint (env AWS_EC2_METADATA_SERVICE_ENDPOINT; default the link-local one)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.opts.Group == "" || f.region == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "runnerpool logs: -log-group and -region are required, and nothing else")
		fs.Usage()
		return f, errUsage
	}
	return f, nil
}

func runLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseLogsFlags(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil
	case err != nil:
		return errUsage
	}
	o, region, imdsEndpoint := f.opts, f.region, f.imdsEndpoint
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return fmt.Errorf("loading AWS configuration: %w", err)
	}
	// EnableFallback false: IMDSv2 only, never the unauthenticated IMDSv1 flow.
	md := imds.New(imds.Options{Endpoint: imdsEndpoint, EnableFallback: aws.FalseTernary})
	id, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
	if err != nil {
		return fmt.Errorf("reading the instance id: %w", err)
	}
	defer id.Content.Close()
	raw, err := io.ReadAll(io.LimitReader(id.Content, 64))
	if err != nil {
		return fmt.Errorf("reading the instance id: %w", err)
	}
	o.InstanceID = string(raw)
	o.API = cloudwatchlogs.NewFromConfig(cfg)
	o.Log = slog.New(slog.NewTextHandler(stderr, nil))
	o.Log.Info("shipping logs", "group", o.Group, "instance", o.InstanceID)
	if err := logship.Run(ctx, o); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
