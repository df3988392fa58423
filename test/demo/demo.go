// Package demo is `make demo`: on one machine it starts the local stack with simulated EC2
// instances that each run the real instance agent, starts a reconciler replica against it, and
// walks two workflows through the public API. The first workflow gets newly created runners, runs
// fake jobs on them and releases them; the second reuses them. It prints a readable timeline and
// ends with one summary line that the tests check too.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/client"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// Options tune the demo.
type Options struct {
	Runners      int           // runners per workflow (default 2)
	JobsPerRun   int           // fake jobs per workflow (default 3)
	JobDuration  time.Duration // default 1 s
	Logger       *slog.Logger  // the components' logs (default: discarded)
	ChildOutput  io.Writer     // DynamoDB Local's and fauxqs's output
	KeepInstance bool          // leave the instance directories behind
	// Keep leaves the stack, the reconciler and its dashboard up after the walkthrough, until ctx
	// ends (make demo ARGS=-keep; Ctrl-C stops it).
	Keep bool
	// DashboardListen is the dashboard's address (default 127.0.0.1:0, a free port).
	DashboardListen string
}

// Summary is what the demo did.
type Summary struct {
	Provisioned, Reused, Created, Released, Orphans, DoubleClaims int
}

func (s Summary) String() string {
	return fmt.Sprintf("demo: ok provisioned=%d reused=%d created=%d released=%d orphans=%d double_claims=%d",
		s.Provisioned, s.Reused, s.Created, s.Released, s.Orphans, s.DoubleClaims)
}

const (
	repository   = sandbox.Scope
	repositoryID = "4242"
	audience     = "runnerpool-demo"
)

type timeline struct {
	w     io.Writer
	start time.Time
}

func (t timeline) say(format string, args ...any) {
	fmt.Fprintf(t.w, "[%6.2fs] %s\n", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
}

// Run runs the demo, printing the timeline to out. It returns an error if any step failed or an
// invariant did not hold; the summary line is printed only on success.
func Run(ctx context.Context, out io.Writer, o Options) (_ Summary, err error) {
	if o.Runners <= 0 {
		o.Runners = 2
	}
	if o.JobsPerRun <= 0 {
		o.JobsPerRun = 3
	}
	if o.JobDuration <= 0 {
		o.JobDuration = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tl := timeline{w: out, start: time.Now()}

	root, err := os.MkdirTemp("", "runnerpool-demo-")
	if err != nil {
		return Summary{}, fmt.Errorf("demo: %w", err)
	}
	if !o.KeepInstance {
		defer os.RemoveAll(root)
	}

	tl.say("starting the local stack: DynamoDB Local, fauxqs (SQS), EC2 server, GitHub fake, OIDC issuer")
	sb, err := sandbox.Start(ctx, sandbox.Options{
		Root: root, Logger: o.Logger, ChildOutput: o.ChildOutput, JobDuration: o.JobDuration,
	})
	if err != nil {
		return Summary{}, err
	}
	defer func() {
		if cerr := sb.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for _, e := range sb.Stack.Env()[:5] {
		tl.say("  %s", e)
	}
	tl.say("deployment %q: state table %s, pool queue of runner class %q, launch template %s (IMDSv2, tags in metadata)",
		sandbox.DeploymentID, sb.Table, sandbox.RunnerClass, sb.LaunchTemplate)

	svc, stop, err := startReconciler(ctx, sb, root, o)
	if err != nil {
		return Summary{}, err
	}
	defer stop()
	tl.say("reconciler replica serving %s (leader: %v); every simulated instance runs the real agent", svc.URL(), svc.Leading())
	tl.say("dashboard (read-only, no authentication: local only): %s", svc.DashboardURL())

	var sum Summary
	var runs []workflowResult
	for i, runID := range []string{"9001", "9002"} {
		wr, err := workflow(ctx, tl, sb, svc.URL(), i+1, runID, o)
		if err != nil {
			return Summary{}, err
		}
		runs = append(runs, wr)
		sum.Provisioned += len(wr.provision.Runners)
		for _, r := range wr.provision.Runners {
			switch r.Source {
			case "reused":
				sum.Reused++
			case "created":
				sum.Created++
			}
		}
		sum.Released += wr.release.Counts["pooled"]
	}

	sum.DoubleClaims = doubleClaims(runs)
	orphans, err := orphansOf(ctx, sb)
	if err != nil {
		return Summary{}, err
	}
	sum.Orphans = len(orphans)
	tl.say("audit: %d EC2 instances, every live one has a live record (orphans: %v); every job ran on a runner of its own run (double claims: %d)",
		len(sb.Stack.EC2.Instances()), orphans, sum.DoubleClaims)
	switch {
	case sum.Orphans > 0 || sum.DoubleClaims > 0:
		return sum, fmt.Errorf("demo: invariants broken: %d orphans, %d double claims", sum.Orphans, sum.DoubleClaims)
	case sum.Reused == 0:
		return sum, errors.New("demo: the second workflow reused no runner")
	}
	fmt.Fprintln(out, sum.String())
	if o.Keep {
		fmt.Fprintf(out, "demo: the stack stays up; dashboard at %s (pools, runs, instances, cost); Ctrl-C stops it\n", svc.DashboardURL())
		<-ctx.Done()
	}
	return sum, nil
}

// demoPrices are eu-west-1-like on-demand and spot prices for every type the EC2 server launches.
const demoPrices = `{"prices": [
  {"instance_type": "*", "usage_class": "on-demand", "per_hour": 0.0960},
  {"instance_type": "*", "usage_class": "spot", "per_hour": 0.0370}
]}`

// startReconciler runs one replica in process, configured as `runnerpool serve` would be from its
// environment, against the sandbox.
func startReconciler(ctx context.Context, sb *sandbox.Sandbox, root string, o Options) (*service.Service, func(), error) {
	log := o.Logger
	subnets := make([]string, 0, len(sandbox.Subnets))
	for s := range sandbox.Subnets {
		subnets = append(subnets, s)
	}
	slices.Sort(subnets)
	classes := config.Classes{
		DefaultRunnerClass: sandbox.RunnerClass,
		ResourceClasses:    map[string]config.ResourceClass{"small": {CPU: 2, MemoryMiB: 4096}},
		RunnerClasses: map[string]config.ClassEntry{sandbox.RunnerClass: {
			QueueURL: sb.Queue.URL(), LaunchTemplateID: sb.LaunchTemplate, Subnets: subnets,
		}},
	}
	b, err := json.Marshal(classes)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	classesFile := filepath.Join(root, "runner-classes.json")
	if err := os.WriteFile(classesFile, b, 0o600); err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	// Demo prices (an operator's price file): the dashboard's cost page says they came from it.
	pricesFile := filepath.Join(root, "prices.json")
	if err := os.WriteFile(pricesFile, []byte(demoPrices), 0o600); err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	dash := o.DashboardListen
	if dash == "" {
		dash = "127.0.0.1:0"
	}
	env := map[string]string{
		"RUNNERPOOL_LISTEN":                  "127.0.0.1:0",
		"RUNNERPOOL_TABLE":                   sb.Table,
		"RUNNERPOOL_DEPLOYMENT_ID":           sandbox.DeploymentID,
		"RUNNERPOOL_REPLICA_ID":              "demo-1",
		"RUNNERPOOL_OIDC_ISSUER":             sb.Stack.OIDC.URL(),
		"RUNNERPOOL_OIDC_AUDIENCE":           audience,
		"RUNNERPOOL_ALLOWED_REPOSITORIES":    repository,
		"RUNNERPOOL_GITHUB_API_URL":          sb.Stack.Endpoints.GitHubAPI,
		"RUNNERPOOL_GITHUB_TOKEN":            sb.Stack.GitHub.PAT(),
		"RUNNERPOOL_RUNNER_CLASSES_FILE":     classesFile,
		"RUNNERPOOL_LEASE_TTL":               "5s",
		"RUNNERPOOL_DRAIN_TIMEOUT":           "2s",
		"RUNNERPOOL_REGISTRATION_WAIT":       "60s",
		"RUNNERPOOL_CLAIM_REGISTRATION_WAIT": "10s",
		"RUNNERPOOL_RELEASE_SIGNAL_WAIT":     "30s",
		"RUNNERPOOL_POLL_INTERVAL":           "50ms",
		"RUNNERPOOL_DYNAMODB_SKIP_CRC32":     "true",
		// The sandbox's agents key their items by instance id (the local stack has no instance
		// roles to confine).
		"RUNNERPOOL_INSTANCE_KEYS": config.InstanceKeysID,
		// The dashboard on loopback, with a pool sample every 10 s so its charts move.
		"RUNNERPOOL_DASHBOARD_LISTEN":        dash,
		"RUNNERPOOL_PRICE_FILE":              pricesFile,
		"RUNNERPOOL_AWS_PRICES":              "false",
		"RUNNERPOOL_CONVERGE_SCHEDULE":       "@every 5s",
		"RUNNERPOOL_HISTORY_SAMPLE_INTERVAL": "10s",
	}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: reconciler configuration: %w", err)
	}
	awsCfg, err := sb.Stack.AWSConfig(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	refreshed := make(chan struct{}, 1)
	svc, err := service.New(ctx, cfg, service.Options{AWS: &awsCfg, Logger: log, OnJob: func(job string, _ error) {
		if job == service.JobRefresh {
			select {
			case refreshed <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("demo: starting the reconciler: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			log.Warn("demo: the reconciler stopped with an error", "err", err)
		}
	}
	// The leader runs a refresh pass as soon as it takes the lease; wait for it so the walkthrough
	// starts from a converged state.
	select {
	case <-refreshed:
	case err := <-done:
		return nil, nil, fmt.Errorf("demo: the reconciler stopped: %w", err)
	case <-time.After(30 * time.Second):
		stop()
		return nil, nil, errors.New("demo: the reconciler did not take the leader lease within 30 s")
	}
	return svc, stop, nil
}

type workflowResult struct {
	runID     string
	provision apiv1.ProvisionResponse
	release   apiv1.ReleaseResponse
	jobs      []githubfake.Job
}

// workflow is one workflow run: a provision job, fake jobs on `runs-on: <run id>`, a release job.
func workflow(ctx context.Context, tl timeline, sb *sandbox.Sandbox, api string, n int, runID string, o Options) (workflowResult, error) {
	wr := workflowResult{runID: runID}
	token, err := sb.Stack.OIDC.Mint(map[string]any{
		"repository": repository, "repository_id": repositoryID, "repository_owner": "acme",
		"run_id": runID, "run_attempt": "1", "aud": audience,
	})
	if err != nil {
		return wr, fmt.Errorf("demo: minting the workflow's OIDC token: %w", err)
	}
	c, err := client.New(api, client.StaticToken(token), client.Options{})
	if err != nil {
		return wr, fmt.Errorf("demo: %w", err)
	}

	tl.say("workflow %d (run %s): provision %d runners (on-demand, c*/m*, resource class small)", n, runID, o.Runners)
	began := time.Now()
	wr.provision, err = c.Provision(ctx, apiv1.ProvisionRequest{
		Count: o.Runners, UsageClass: "on-demand", AllowedInstanceTypes: []string{"c*", "m*"}, ResourceClass: "small",
	})
	if err != nil {
		return wr, fmt.Errorf("demo: workflow %d: provision: %w", n, err)
	}
	for _, r := range wr.provision.Runners {
		tl.say("  %-8s %s %s in %s", r.Source, r.InstanceID, r.InstanceType, r.Zone)
	}
	tl.say("  provisioned in %s; runners carry label %q (runs-on: ${{ github.run_id }}-${{ github.run_attempt }})", time.Since(began).Round(time.Millisecond), wr.provision.Label)

	run, _ := strconv.ParseInt(runID, 10, 64)
	owner, repo, _ := strings.Cut(repository, "/")
	var ids []int64
	for range o.JobsPerRun {
		ids = append(ids, sb.Stack.GitHub.QueueJob(owner, repo, run, []string{wr.provision.Label}))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range ids {
		for {
			job, _ := sb.Stack.GitHub.Job(id)
			if job.Status == githubfake.JobCompleted {
				wr.jobs = append(wr.jobs, job)
				tl.say("  job %d ran on %s", job.ID, job.RunnerName)
				break
			}
			if time.Now().After(deadline) {
				return wr, fmt.Errorf("demo: workflow %d: job %d still %s after 2 minutes", n, id, job.Status)
			}
			select {
			case <-ctx.Done():
				return wr, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	tl.say("workflow %d: release (if: always())", n)
	began = time.Now()
	wr.release, err = c.Release(ctx, apiv1.ReleaseRequest{})
	if err != nil {
		return wr, fmt.Errorf("demo: workflow %d: release: %w", n, err)
	}
	for _, in := range wr.release.Instances {
		tl.say("  %s: %s", in.InstanceID, in.Outcome)
	}
	tl.say("  released in %s: deregistered, workspace cleaned, back in the pool", time.Since(began).Round(time.Millisecond))
	return wr, nil
}

// doubleClaims counts jobs that ran on a runner not provisioned to their own run, and instances
// provisioned to two runs whose lifetimes overlapped (the walkthrough's runs are sequential: a
// runner of run 2 must have been released by run 1 first).
func doubleClaims(runs []workflowResult) int {
	n := 0
	for i, wr := range runs {
		mine := map[string]bool{}
		for _, r := range wr.provision.Runners {
			mine["runnerpool-"+r.InstanceID] = true
		}
		for _, j := range wr.jobs {
			if !mine[j.RunnerName] {
				n++
			}
		}
		if i == 0 {
			continue
		}
		released := map[string]bool{}
		for _, in := range runs[i-1].release.Instances {
			if in.Outcome == "pooled" {
				released[in.InstanceID] = true
			}
		}
		for _, r := range wr.provision.Runners {
			if r.Source == "reused" && !released[r.InstanceID] {
				n++
			}
		}
	}
	return n
}

// orphansOf lists EC2 instances that are not terminated and have no live record.
func orphansOf(ctx context.Context, sb *sandbox.Sandbox) ([]string, error) {
	var out []string
	for _, in := range sb.Stack.EC2.Instances() {
		if in.State == "shutting-down" || in.State == "terminated" {
			continue
		}
		rec, err := sb.Store.Get(ctx, in.ID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && !rec.State.Live()) {
			out = append(out, in.ID)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("demo: audit: %w", err)
		}
	}
	return out, nil
}
