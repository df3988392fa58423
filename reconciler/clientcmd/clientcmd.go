// Package clientcmd implements the workflow-side commands of the runnerpool binary: `provision`,
// `release` and `status`. Each parses its flags (defaults from RUNNERPOOL_* variables), gets the
// job's OIDC token, calls the reconciler API and writes a summary to stdout and the step outputs
// to $GITHUB_OUTPUT.
//
// Outputs of provision: label (the runners' unique label: <run id>-<attempt>), labels, run-key, count,
// instance-ids (comma-separated), runners (JSON). Outputs of release: run-key, message, pooled,
// report (JSON).
package clientcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/client"
)

// Environment variables the commands read.
const (
	EnvAPIURL   = "RUNNERPOOL_API_URL"
	EnvAudience = "RUNNERPOOL_AUDIENCE"
	// EnvToken, when set, is the bearer token itself (an operator's token, or tests); otherwise
	// the job's OIDC token is fetched.
	EnvToken = "RUNNERPOOL_TOKEN"
)

// ErrUsage marks a command line the flag parser refused.
var ErrUsage = errors.New("usage")

// Env is the process environment (os.Getenv in the binary, a map in tests).
type Env func(string) string

// common are the flags every command has.
type common struct {
	api, audience, output string
	timeout               time.Duration
	attempts              int
}

func (c *common) register(fs *flag.FlagSet, env Env, timeout time.Duration) {
	fs.StringVar(&c.api, "api", env(EnvAPIURL), "reconciler API URL ["+EnvAPIURL+"]")
	fs.StringVar(&c.audience, "audience", env(EnvAudience), "OIDC audience of the deployment ["+EnvAudience+"]")
	fs.StringVar(&c.output, "output-file", env(client.EnvGitHubOutput), "file to append step outputs to [GITHUB_OUTPUT]; empty: none")
	fs.DurationVar(&c.timeout, "timeout", timeout, "give up after this long, retries included")
	fs.IntVar(&c.attempts, "attempts", 6, "attempts on connection errors and retryable answers")
}

func (c *common) client(env Env, stderr io.Writer) (*client.Client, error) {
	var errs []error
	if c.api == "" {
		errs = append(errs, fmt.Errorf("--api (or %s) is required", EnvAPIURL))
	}
	var tokens client.TokenSource
	if t := env(EnvToken); t != "" {
		tokens = client.StaticToken(t)
	} else if c.audience == "" {
		errs = append(errs, fmt.Errorf("--audience (or %s) is required", EnvAudience))
	} else {
		at, err := client.ActionsTokenFromEnv(env, c.audience)
		if err != nil {
			errs = append(errs, err)
		} else {
			tokens = at
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return client.New(c.api, tokens, client.Options{
		Retry:     client.Retry{Attempts: c.attempts},
		UserAgent: "runnerpool-cli",
		OnRetry: func(attempt int, wait time.Duration, err error) {
			fmt.Fprintf(stderr, "attempt %d failed (%v); retrying in %s\n", attempt, err, wait.Round(100*time.Millisecond))
		},
	})
}

func (c *common) write(outputs []client.Output) error {
	if c.output == "" {
		return nil
	}
	return client.WriteOutputs(c.output, outputs)
}

// parse parses flags; -h prints the usage and is not an error.
func parse(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %q\n", fs.Args())
		return false, fmt.Errorf("%w: unexpected arguments %q", ErrUsage, fs.Args())
	}
	return false, nil
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// splitList splits "c*,m5.*" or "c* m5.*".
func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
}
