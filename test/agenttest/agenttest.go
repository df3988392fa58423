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
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/userdata"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
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
	// Installation gives every instance a stand-in runner installation (Dirs.Install: config.sh, run.sh,
	// bin/Runner.Listener, root's as the user data leaves it) with its manifest (Dirs.Manifest), which
	// the agent verifies before every registration and release, as on EC2: a test that changes a file
	// of Dirs.Install plays a job that tampered with the runner. Without it the agent verifies nothing
	// (the fake runner has no installation).
	Installation bool
	// Grants, when set, records each instance's job-access grant instead of applying it to this
	// machine (agent.Config.Host).
	Grants *Grants
	// RootlessDocker, when set, gives each instance's agent the runner user's Docker daemon (job
	// access docker).
	RootlessDocker func(instanceID string) *agent.RootlessDocker
	// OnExit, when set, is called when an instance's agent returns (its instance stopped or
	// terminated, or the agent gave up on its configuration).
	OnExit func(instanceID string, err error)
}

// Dirs are one instance's directories (Install and Manifest: with Options.Installation).
type Dirs struct{ State, Work, Runner, Install, Manifest string }

// InstanceDirs returns the directories of an instance below root.
func InstanceDirs(root, instanceID string) Dirs {
	base := filepath.Join(root, instanceID)
	return Dirs{State: filepath.Join(base, "state"), Work: filepath.Join(base, "work"), Runner: filepath.Join(base, "runner"),
		Install: filepath.Join(base, "actions-runner"), Manifest: filepath.Join(base, "runner.sha256")}
}

// CachePaths are an instance's runner-cache ready file and node preload (agent.CacheOptions).
func CachePaths(root, instanceID string) (ready, preload string) {
	base := filepath.Join(root, instanceID)
	return filepath.Join(base, "cache.json"), filepath.Join(base, "cache-preload.cjs")
}

// installation writes the stand-in runner installation and its manifest, once per instance (a
// restarted instance keeps its disk, tampered or not).
func installation(d Dirs) error {
	if _, err := os.Stat(d.Manifest); err == nil {
		return nil
	}
	files := map[string]string{
		"config.sh":           "#!/bin/bash\n./bin/Runner.Listener configure \"$@\"\n",
		"run.sh":              "#!/bin/bash\n./bin/Runner.Listener run \"$@\"\n",
		"bin/Runner.Listener": "stand-in for the runner's listener\n",
	}
	for name, body := range files {
		p := filepath.Join(d.Install, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			return err
		}
	}
	return agent.WriteManifest(d.Install, d.Manifest)
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
		if o.Installation && o.Root != "" {
			if err := installation(d); err != nil {
				// The agent then finds no manifest and refuses every registration: the instance is
				// discarded, as one with a broken installation would be.
				slog.Default().Error("agenttest: writing the runner installation", "instance", inst.ID, "err", err)
			}
			cfg.RunnerDir, cfg.RunnerManifest = d.Install, d.Manifest
		}
		// The pre-runner script comes from the instance's user data, where the runner class's launch
		// template version put it, as cloud-init writes it on EC2.
		if script, err := userdata.PreRunnerScriptOf(inst.UserData); err != nil || script != "" {
			path := filepath.Join(filepath.Dir(d.State), "pre-runner.sh")
			if err == nil {
				err = os.WriteFile(path, []byte(script), 0o700)
			}
			if err != nil {
				slog.Default().Error("agenttest: writing the pre-runner script", "instance", inst.ID, "err", err)
			}
			cfg.PreRunnerScript = path
		}
		// The job access too, as the runner class's launch template version rendered it.
		if access := userdata.JobAccessOf(inst.UserData); access != "" && cfg.JobAccess == "" {
			cfg.JobAccess = access
		}
		if o.Grants != nil {
			cfg.Host = o.Grants.For(inst.ID)
		}
		if o.RootlessDocker != nil {
			cfg.RootlessDocker = o.RootlessDocker(inst.ID)
		}
		if tmpl.Cache != nil {
			// The instances share a host: each one's ready file and preload in its own directory.
			c := *tmpl.Cache
			c.ReadyFile, c.PreloadPath = CachePaths(o.Root, inst.ID)
			cfg.Cache = &c
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
				Version: RunnerVersion(inst),
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

// Grants records the job-access grant each simulated instance's agent decided at boot (agent.Host):
// the instances share one machine, so the grant is recorded, not applied to it.
type Grants struct {
	mu sync.Mutex
	m  map[string]agent.Grant
}

// For is instanceID's recording host.
func (g *Grants) For(instanceID string) agent.Host { return grantRecorder{g, instanceID} }

// Of is the grant instanceID's agent decided, if it decided one.
func (g *Grants) Of(instanceID string) (agent.Grant, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr, ok := g.m[instanceID]
	return gr, ok
}

type grantRecorder struct {
	g  *Grants
	id string
}

func (r grantRecorder) Apply(_ context.Context, _ string, gr agent.Grant) error {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if r.g.m == nil {
		r.g.m = map[string]agent.Grant{}
	}
	r.g.m[r.id] = gr
	return nil
}

// RunnerVersion is the runner version a simulated instance runs: the one its user data installs when
// runnerpool rendered it, else "" (the GitHub fake's current release).
func RunnerVersion(inst ec2server.RuntimeInstance) string {
	if pin, ok := userdata.RunnerOf(inst.UserData); ok {
		return pin.Version
	}
	return ""
}
