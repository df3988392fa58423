// Package agenttest runs the instance agent inside simulated instances: RuntimeHook adapts agent.Run to
// the EC2 double's runtime hook (ec2server.Options.Runtime), so that every instance the control plane
// launches in a test, the demo or a benchmark runs its own agent goroutine, with its own IMDS endpoint,
// directories and fake runner talking to the GitHub fake. It lives apart from package agent so that the
// agent itself never depends on the test stack.
package agenttest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/stack/ec2server"
)

// Options says how each simulated instance's agent is set up.
type Options struct {
	// Root holds one directory per instance: Root/<id>/state, Root/<id>/work, Root/<id>/runner.
	// Required.
	Root string
	// GitHubURL is the GitHub fake's base URL for the fake runner (required unless NewRunner is set).
	GitHubURL string
	// JobDuration is how long the fake runner takes per job.
	JobDuration time.Duration
	// NewRunner replaces the fake runner (it gets the instance and its directories).
	NewRunner func(inst ec2server.RuntimeInstance, d Dirs) (runner.Runner, error)
	// HTTPClient is used for IMDS and the GitHub fake; http.DefaultClient when nil.
	HTTPClient *http.Client
	// OnExit, when set, is called when an instance's agent returns (its instance stopped or
	// terminated, or the agent gave up on its configuration).
	OnExit func(instanceID string, err error)
}

// Dirs are one instance's directories.
type Dirs struct{ State, Work, Runner string }

// InstanceDirs returns the directories of an instance below root.
func InstanceDirs(root, instanceID string) Dirs {
	base := filepath.Join(root, instanceID)
	return Dirs{State: filepath.Join(base, "state"), Work: filepath.Join(base, "work"), Runner: filepath.Join(base, "runner")}
}

// RuntimeHook returns an ec2server runtime that runs agent.Run for each running instance. tmpl gives
// everything instances share (Store, EC2, notice mode, intervals, logger, pre-runner script); the hook
// fills in the instance's IMDS client, directories and runner. The agent reads its instance id from
// the instance's IMDS, as on EC2.
func RuntimeHook(tmpl agent.Config, o Options) func(ctx context.Context, inst ec2server.RuntimeInstance) {
	return func(ctx context.Context, inst ec2server.RuntimeInstance) {
		cfg := tmpl
		d := InstanceDirs(o.Root, inst.ID)
		cfg.StateDir, cfg.WorkDir = d.State, d.Work
		if o.Root == "" {
			cfg.StateDir, cfg.WorkDir = "", "" // agent.Run reports the missing directories
		}
		io := imds.Options{Endpoint: inst.IMDSEndpoint}
		if o.HTTPClient != nil {
			io.HTTPClient = o.HTTPClient
		}
		cfg.IMDS = imds.New(io)
		log := tmpl.Logger
		if log == nil {
			log = slog.Default()
		}
		cfg.NewRunner = func(string) (runner.Runner, error) {
			if o.NewRunner != nil {
				return o.NewRunner(inst, d)
			}
			return fakerunner.New(fakerunner.Options{
				BaseURL: o.GitHubURL, Dir: d.Runner, WorkDir: d.Work, JobDuration: o.JobDuration,
				PollWait: 5 * time.Second, HTTPClient: o.HTTPClient, Logger: log.With("instance", inst.ID),
			})
		}
		err := agent.Run(ctx, cfg)
		if err != nil {
			log.Error("agenttest: agent returned", "instance", inst.ID, "err", fmt.Sprint(err))
		}
		if o.OnExit != nil {
			o.OnExit(inst.ID, err)
		}
	}
}
