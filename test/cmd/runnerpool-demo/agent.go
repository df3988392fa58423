package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/agentcmd"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
)

// runAgent is `runnerpool-demo agent [flags]`: the product's `runnerpool agent` with one more runner
// driver, -runner fake (the GitHub fake's runner protocol), for a simulated instance run as a process.
// It lives here, not in the runnerpool binary, so that binary links no fake.
func runAgent(ctx context.Context, args []string) error {
	return agentcmd.Run(ctx, args, os.Stdout, os.Stderr, fakeDriver())
}

// fakeDriver is -runner fake with -fake-github-url and -fake-job-duration.
func fakeDriver() agentcmd.Driver {
	var url string
	var job time.Duration
	return agentcmd.Driver{
		Name: "fake",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&url, "fake-github-url", "", "fake runner: the GitHub fake's URL")
			fs.DurationVar(&job, "fake-job-duration", time.Second, "fake runner: how long each job takes")
			return func() error {
				if url == "" {
					return errors.New("needs -fake-github-url")
				}
				return nil
			}
		},
		Configure: func(cfg *agent.Config, o agentcmd.Options, log *slog.Logger) {
			// The fake runner runs in the agent's process: no user to switch to, no processes to
			// kill, nothing of the machine's to clean beyond the workspace.
			cfg.RunnerUser, cfg.TempDirs, cfg.CleanHome, cfg.Docker = "", nil, false, ""
			cfg.NewRunner = func(string) (runner.Runner, error) {
				return fakerunner.New(fakerunner.Options{BaseURL: url, Dir: o.RunnerDir, WorkDir: o.WorkDir,
					JobDuration: job, Logger: log})
			}
		},
	}
}
