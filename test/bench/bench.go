// Package bench is `make bench`: the whole system on the local stack, measured. It starts the
// sandbox (DynamoDB Local, fauxqs, the EC2 server, the GitHub fake, the OIDC issuer; the real agent
// in every simulated instance, with boot, start and registration times from the anchors scaled by
// one time factor), a reconciler replica as `runnerpool serve` runs it, and drives workflows
// through the public API:
//
//  1. cold: provisions from an empty pool (every runner created);
//  2. warm: provision/release cycles served from the pool (every runner reused);
//  3. throughput: concurrent workflows (provision, a job, release) over a pool too small for them,
//     and the GitHub points they spend at peak; replicas: the same load against one replica, then
//     two (replicas.go);
//  4. idle: every instance idle in the pool, the agents' own requests counted;
//  5. reuse: concurrent bursts over pools of a known size (homogeneous, mixed) and a small pool
//     served sequentially, with SQS short polls sampled (reuse.go);
//  6. warm pools: stopped warm instances started by a provision; one convergence pass over a
//     pool of 2,000 records, and (phases "convergence 20000", "refresh 20000") a convergence pass
//     and a refresh pass over 20,000;
//  7. fault_storm: GitHub 5xx and EC2 throttling during concurrent workflows, then the time until
//     every idle instance is pooled again (storm.go);
//  8. audit: a refresh pass, then the invariant checker over the whole deployment.
//
// It prints one `bench: NAME=VALUE` line per figure and writes a Markdown report and a latency
// histogram (PNG) into the report directory.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/client"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// The anchors: what the slow parts take in production.
const (
	AnchorColdBoot     = 25 * time.Second // launch to agent running
	AnchorStoppedStart = 12 * time.Second // start of a stopped instance to agent running
	AnchorRegistration = 2 * time.Second  // the actions runner registering with GitHub
)

// Options tune a run. Zero values take the defaults.
type Options struct {
	// Factor scales the anchors (default 0.05: a 25 s boot takes 1.25 s).
	Factor float64
	// ColdRuns provisions of ColdCount runners from an empty pool (defaults 5 and 2).
	ColdRuns, ColdCount int
	// WarmCycles provision/release cycles of WarmCount runners from the pool (defaults 40 and 2).
	WarmCycles, WarmCount int
	// Workflows run Concurrency at a time in the throughput phase (defaults 40 and 10), each
	// asking for 1 to MaxCount runners (default 3).
	Workflows, Concurrency, MaxCount int
	// IdleWindow is how long the idle agents' requests are counted (default 60 s).
	IdleWindow time.Duration
	// JobDuration is a fake job's duration (default 100 ms).
	JobDuration time.Duration
	// Phases, when set, runs only the named phases (cold, warm, throughput, replicas, idle, reuse, "warm
	// pools", "convergence 20000", "refresh 20000", dashboard, "scale sets", quota, launch, docker, fault_storm, "foreign items", autoscale; the audit always runs): for working on one figure. Figures of the others are missing.
	Phases []string
	// PollInterval overrides the reconciler's signal polling (default: the product's default).
	PollInterval time.Duration
	// StoppedStarts is the number of stopped warm instances one provision starts (default 50);
	// ConvergeRecords the warm-pool records of the warm pools phase's convergence pass (default
	// 2000), ConvergeRecordsLarge those of the "convergence 20000" phase's (default 20000);
	// RefreshRecords the records and instances of the "refresh 20000" phase's passes (default 20000).
	StoppedStarts, ConvergeRecords, ConvergeRecordsLarge, RefreshRecords int
	// DashboardInstances live records and DashboardRuns history entries of the dashboard phase
	// (defaults 20000 and 10000); ScreenshotDir, when set, receives its pages' screenshots.
	DashboardInstances, DashboardRuns int
	ScreenshotDir                     string
	// SQSSampling is the probability with which the local stack answers an SQS short poll empty
	// (stack.EnvSQSSampling; default 0.3, negative: off).
	SQSSampling float64
	Seed        uint64
	// ManyRepos repositories with ManyReposIdle idle runners each in one runner class, and
	// ManyReposWorkflows concurrent workflows of one runner per repository (defaults 20, 10, 20).
	ManyRepos, ManyReposIdle, ManyReposWorkflows int
	// ReportDir receives report.md and latency.png ("": no report).
	ReportDir string
	// ProfileDir, when set, receives a CPU profile of the bench process over the measured passes of
	// the "convergence 20000" and "refresh 20000" phases (convergence.pprof, refresh.pprof).
	ProfileDir string
	// Command is the command line, quoted in the report.
	Command     string
	Logger      *slog.Logger // the components' logs (default: discarded)
	ChildOutput io.Writer
}

func (o *Options) defaults() {
	if o.Factor <= 0 {
		o.Factor = 0.05
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.ColdRuns, 5)
	def(&o.ColdCount, 2)
	def(&o.WarmCycles, 40)
	def(&o.WarmCount, 2)
	def(&o.Workflows, 40)
	def(&o.Concurrency, 10)
	def(&o.MaxCount, 3)
	def(&o.StoppedStarts, 50)
	def(&o.ConvergeRecords, 2000)
	def(&o.ConvergeRecordsLarge, 20000)
	def(&o.RefreshRecords, 20000)
	def(&o.DashboardInstances, 20000)
	def(&o.DashboardRuns, 10000)
	def(&o.ManyRepos, 20)
	def(&o.ManyReposIdle, 10)
	def(&o.ManyReposWorkflows, 20)
	if o.IdleWindow <= 0 {
		o.IdleWindow = 60 * time.Second
	}
	if o.JobDuration <= 0 {
		o.JobDuration = 100 * time.Millisecond
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.SQSSampling == 0 {
		o.SQSSampling = 0.3
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o Options) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * o.Factor)
}

// Figure is one measured value.
type Figure struct {
	Name  string
	Value float64
	// Missing says why the figure could not be measured (Value is then meaningless).
	Missing string
	Unit    string
	How     string // what exactly is measured, for the report
}

// String renders the bench line.
func (f Figure) String() string {
	if f.Missing != "" {
		return fmt.Sprintf("bench: %s=n/a (%s)", f.Name, f.Missing)
	}
	return fmt.Sprintf("bench: %s=%s", f.Name, formatValue(f.Value))
}

func formatValue(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e12:
		return strconv.FormatInt(int64(v), 10)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// Result is everything a run measured.
type Result struct {
	Options  Options
	Started  time.Time
	Duration time.Duration
	Figures  []Figure
	// Latency samples in milliseconds.
	Notice, WarmOverhead, Cold, Throughput []float64
	// Calls are the control plane's AWS and GitHub calls by phase and operation.
	Calls map[string]map[string]int
	// Runners counts the runners each phase provisioned (calls per runner divide by it).
	Runners map[string]int
	// Agent are the idle agents' requests by operation over the idle window, and IdleInstances
	// how many agents that was.
	Agent         map[string]int
	IdleInstances int
	Audit         invariant.Report
	Notes         []string
	// Weeks are the autoscale phase's every-week rows.
	Weeks []WeekRow
	// Baseline is an earlier commit's figures on this machine, shown beside this run's.
	Baseline *Baseline
}

// Figure returns a figure by name.
func (r Result) Figure(name string) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Name == name {
			return f, true
		}
	}
	return Figure{}, false
}

func (r *Result) add(f Figure) { r.Figures = append(r.Figures, f) }

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Run runs the benchmark, printing progress and the figure lines to out. The error is non-nil when
// the run could not complete or an invariant was broken; the figures measured are in the Result.
func Run(ctx context.Context, out io.Writer, o Options) (*Result, error) {
	o.defaults()
	res := &Result{Options: o, Started: time.Now(), Calls: map[string]map[string]int{}, Runners: map[string]int{}}
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%6.1fs] %s\n", time.Since(res.Started).Seconds(), fmt.Sprintf(format, args...))
	}
	h, err := start(ctx, o, say, nil)
	if err != nil {
		return res, err
	}
	defer h.close()

	phases := []struct {
		name string
		run  func(context.Context, *harness, *Result) error
	}{
		{"cold", phaseCold},
		{"warm", phaseWarm},
		{"throughput", phaseThroughput},
		{"replicas", phaseReplicas},
		{"idle", phaseIdle},
		{"reuse", phaseReuse},
		{"warm pools", phaseWarmPools},
		{"convergence 20000", phaseConvergence20000},
		{"refresh 20000", phaseRefresh20000},
		{"dashboard", phaseDashboard},
		{"autoscale", phaseAutoscale},
		{"scale sets", phaseScaleSets},
		{"quota", phaseQuota},
		{"launch", phaseLaunch},
		{"docker", phaseDocker},
		{"fault_storm", phaseFaultStorm},
		{"foreign items", phaseForeignItems},
		{"runner release", phaseRunnerRelease},
		{"many repos", phaseManyRepos},
		{"cache", phaseCache},
		{"audit", phaseAudit},
	}
	var errs []error
	for _, p := range phases {
		if len(o.Phases) > 0 && !slices.Contains(o.Phases, p.name) && p.name != "audit" {
			continue
		}
		if slices.Contains(optInPhases, p.name) && !slices.Contains(o.Phases, p.name) {
			continue
		}
		say("phase %s", p.name)
		before := h.running()
		if err := p.run(ctx, h, res); err != nil {
			say("phase %s failed: %v", p.name, err)
			errs = append(errs, fmt.Errorf("phase %s: %w", p.name, err))
			if ctx.Err() != nil {
				break
			}
		}
		if left := h.leftBehind(p.name, before, 10*time.Second); left != "" {
			// Whatever a phase leaves running burns CPU through every later phase's figures.
			say("LEFT RUNNING by phase %s: %s", p.name, left)
			res.note("phase %s left running: %s", p.name, left)
		}
	}
	res.Duration = time.Since(res.Started)
	for _, f := range res.Figures {
		fmt.Fprintln(out, f.String())
	}
	if o.ReportDir != "" {
		if err := writeReport(o.ReportDir, res); err != nil {
			errs = append(errs, err)
		} else {
			say("report written to %s", filepath.Join(o.ReportDir, ReportFile))
		}
	}
	return res, errors.Join(errs...)
}

// optInPhases run only when named in Options.Phases (none today: the many repos phase, once opt-in
// for its audit's findings, runs by default since they were fixed).
var optInPhases = []string{}

// harness is the running system and its meters.
type harness struct {
	o      Options
	say    func(string, ...any)
	root   string
	sb     *sandbox.Sandbox
	svc    *service.Service // the replica workflows talk to
	stops  []func()
	cp     *awslimit.Counter // the reconciler's AWS calls
	keys   *batchKeys        // the keys of its BatchGetItem calls
	gh     *httpCounter      // the reconciler's GitHub calls
	agent  *awslimit.Counter // the agents' AWS calls
	notice *noticeMeter
	rng    *rand.Rand
	env    map[string]string // overrides of the replicas' environment
	// http is every workflow's HTTP client: one connection pool, as one runner fleet's would be
	// many, but a client per workflow would leave its idle connections (and their goroutines)
	// behind for the soak to mistake for a leak.
	http *http.Client
	// extraQueues are pool queues beyond the sandbox's (the audit reads them too).
	extraQueues []string
	// reuseQueues are the reuse scenarios' pool queues, by runner class.
	reuseQueues map[string]string
	runSeq      int64
	mu          sync.Mutex
}

func start(ctx context.Context, o Options, say func(string, ...any), env map[string]string) (*harness, error) {
	h := &harness{o: o, say: say, cp: awslimit.NewCounter(), keys: &batchKeys{}, agent: awslimit.NewCounter(), notice: newNoticeMeter(),
		rng: rand.New(rand.NewPCG(o.Seed, o.Seed>>1|1)), runSeq: 9100, env: env,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}}
	root, err := os.MkdirTemp("", "runnerpool-bench-")
	if err != nil {
		return nil, err
	}
	h.root = root
	if o.SQSSampling > 0 {
		// The sandbox's stack reads it: every SQS client, the product's included, goes through the
		// sampling proxy.
		if err := os.Setenv(stack.EnvSQSSampling, strconv.FormatFloat(o.SQSSampling, 'f', -1, 64)); err != nil {
			return nil, err
		}
		say("SQS short polls answered empty with probability %g (real SQS samples a subset of its servers)", o.SQSSampling)
	}
	say("starting the sandbox: cold boot %s, stopped start %s, registration %s (anchors 25 s, 12 s, 2 s x %g)",
		o.scaled(AnchorColdBoot), o.scaled(AnchorStoppedStart), o.scaled(AnchorRegistration), o.Factor)
	h.sb, err = sandbox.Start(ctx, sandbox.Options{
		Root: root, Logger: o.Logger, ChildOutput: o.ChildOutput, JobDuration: o.JobDuration,
		// Production agent intervals: the idle figures are the product's.
		Heartbeat: 5 * time.Minute, Notice: 50 * time.Millisecond, Fallback: 30 * time.Second, // the agent's defaults
		Grace: 2 * time.Minute, OrphanGrace: 2 * time.Minute,
		PendingDelay: -1, BootDelay: o.scaled(AnchorColdBoot), StartDelay: o.scaled(AnchorStoppedStart),
		RegistrationDelay: o.scaled(AnchorRegistration),
		AgentAPIOptions:   []func(*middlewareStack) error{h.agent.AddMiddleware},
		OnRecord:          h.notice.observe,
	})
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	h.gh = &httpCounter{host: hostOf(h.sb.Stack.Endpoints.GitHubAPI), base: http.DefaultTransport, counts: map[string]int{}}
	// GitHub's documented limits for an App installation (the lowest primary budget), so that a
	// design that spends too much of GitHub shows here as it would in production.
	h.sb.Stack.GitHub.SetLimits(githubLimits)
	h.reuseQueues = map[string]string{}
	for _, class := range reuseClasses {
		qo, err := h.sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + class)})
		if err != nil {
			h.close()
			return nil, fmt.Errorf("creating the queue of %s: %w", class, err)
		}
		h.reuseQueues[class] = aws.ToString(qo.QueueUrl)
		h.extraQueues = append(h.extraQueues, aws.ToString(qo.QueueUrl))
	}
	svc, stop, err := h.startReplica(ctx, "bench-1", true)
	if err != nil {
		h.close()
		return nil, err
	}
	h.svc, h.stops = svc, append(h.stops, stop)
	say("reconciler replica serving %s", h.svc.URL())
	return h, nil
}

func (h *harness) close() {
	for _, stop := range slices.Backward(h.stops) {
		stop()
	}
	if h.sb != nil {
		_ = h.sb.Close()
	}
	_ = os.RemoveAll(h.root)
}

const (
	repository   = sandbox.Scope
	repositoryID = "4242"
	audience     = "runnerpool-bench"
)

// startReplica runs one reconciler replica configured as `runnerpool serve` from its environment,
// with the product's defaults except for test-sized lease and drain times. With leader set it
// returns once the replica holds the lease and ran its first refresh pass.
func (h *harness) startReplica(ctx context.Context, id string, leader bool, mods ...func(*service.Options)) (*service.Service, func(), error) {
	subnets := slices.Sorted(maps.Keys(sandbox.Subnets))
	classes := config.Classes{
		DefaultRunnerClass: sandbox.RunnerClass,
		ResourceClasses: map[string]config.ResourceClass{
			"small": {CPU: 2, MemoryMiB: 4096}, "medium": {CPU: 4, MemoryMiB: 8192}, "large": {CPU: 8, MemoryMiB: 16384},
		},
		RunnerClasses: map[string]config.ClassEntry{sandbox.RunnerClass: {
			QueueURL: h.sb.Queue.URL(), LaunchTemplateID: h.sb.LaunchTemplate, Subnets: subnets,
		}},
	}
	for class, url := range h.reuseQueues {
		classes.RunnerClasses[class] = config.ClassEntry{QueueURL: url, LaunchTemplateID: h.sb.LaunchTemplate, Subnets: subnets}
	}
	b, err := json.Marshal(classes)
	if err != nil {
		return nil, nil, err
	}
	classesFile := filepath.Join(h.root, "runner-classes.json")
	if err := os.WriteFile(classesFile, b, 0o600); err != nil {
		return nil, nil, err
	}
	env := map[string]string{
		"RUNNERPOOL_LISTEN":        "127.0.0.1:0",
		"RUNNERPOOL_TABLE":         h.sb.Table,
		"RUNNERPOOL_DEPLOYMENT_ID": sandbox.DeploymentID,
		"RUNNERPOOL_REPLICA_ID":    id,
		"RUNNERPOOL_OIDC_ISSUER":   h.sb.Stack.OIDC.URL(),
		"RUNNERPOOL_OIDC_AUDIENCE": audience,
		// The owner: the many-repos phase's workflows come from repositories acme/repo-NN.
		"RUNNERPOOL_ALLOWED_REPOSITORIES": repository + ",acme",
		"RUNNERPOOL_GITHUB_API_URL":       h.sb.Stack.Endpoints.GitHubAPI,
		"RUNNERPOOL_GITHUB_TOKEN":         h.sb.Stack.GitHub.PAT(),
		"RUNNERPOOL_RUNNER_CLASSES_FILE":  classesFile,
		// Long enough that a loaded machine does not make the replica lose and retake its lease,
		// each retaking running a refresh pass inside a measured phase.
		"RUNNERPOOL_LEASE_TTL":           "15s",
		"RUNNERPOOL_DRAIN_TIMEOUT":       "2s",
		"RUNNERPOOL_DYNAMODB_SKIP_CRC32": "true",
		// The local stack has no STS to find the account for instance ARNs.
		"RUNNERPOOL_INSTANCE_KEYS": "id",
		// Refresh and convergence stay out of the measured phases; the audit runs its own pass.
		"RUNNERPOOL_REFRESH_SCHEDULE":  "@every 1h",
		"RUNNERPOOL_CONVERGE_SCHEDULE": "@every 1h",
	}
	maps.Copy(env, h.env)
	if h.o.PollInterval > 0 {
		env["RUNNERPOOL_POLL_INTERVAL"] = h.o.PollInterval.String()
	}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		return nil, nil, fmt.Errorf("reconciler configuration: %w", err)
	}
	awsCfg, err := h.sb.Stack.AWSConfig(ctx)
	if err != nil {
		return nil, nil, err
	}
	awsCfg.APIOptions = append(awsCfg.APIOptions, h.cp.AddMiddleware, h.keys.AddMiddleware)
	refreshed := make(chan struct{}, 1)
	var svc *service.Service
	asReplica(ctx, id, func(ctx context.Context) {
		so := service.Options{
			AWS: &awsCfg, Logger: h.o.Logger,
			HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: h.gh},
			OnJob: func(job string, _ error) {
				if job == service.JobRefresh {
					select {
					case refreshed <- struct{}{}:
					default:
					}
				}
			},
		}
		for _, mod := range mods {
			mod(&so)
		}
		svc, err = service.New(ctx, cfg, so)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the reconciler: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go asReplica(rctx, id, func(ctx context.Context) { done <- svc.Run(ctx) })
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			h.say("replica %s stopped: %v", id, err)
		}
	}
	if !leader {
		return svc, stop, nil
	}
	select {
	case <-refreshed:
		return svc, stop, nil
	case err := <-done:
		return nil, nil, fmt.Errorf("the reconciler stopped: %w", err)
	case <-time.After(30 * time.Second):
		stop()
		return nil, nil, errors.New("the reconciler did not take the leader lease within 30 s")
	}
}

// workflow is one workflow run's client of the API.
type workflow struct {
	runID, token string
	c            *client.Client
}

func (h *harness) newWorkflow() (*workflow, error) { return h.newWorkflowAt(h.svc.URL()) }

// newWorkflowAt is a new workflow run talking to the replica at url.
func (h *harness) newWorkflowAt(url string) (*workflow, error) {
	return h.newWorkflowOf(url, repository, repositoryID)
}

// newWorkflowOf is a new workflow run of another repository of the owner acme.
func (h *harness) newWorkflowOf(url, repository, repositoryID string) (*workflow, error) {
	h.mu.Lock()
	h.runSeq++
	run := strconv.FormatInt(h.runSeq, 10)
	h.mu.Unlock()
	tok, err := h.sb.Stack.OIDC.Mint(map[string]any{
		"repository": repository, "repository_id": repositoryID, "repository_owner": "acme",
		"run_id": run, "run_attempt": "1", "aud": audience,
	})
	if err != nil {
		return nil, err
	}
	c, err := client.New(url, client.StaticToken(tok), client.Options{HTTPClient: h.http})
	if err != nil {
		return nil, err
	}
	return &workflow{runID: run, token: tok, c: c}, nil
}

// clientAt is the same workflow run talking to another replica.
func (h *harness) clientAt(wf *workflow, url string) (*workflow, error) {
	c, err := client.New(url, client.StaticToken(wf.token), client.Options{HTTPClient: h.http})
	if err != nil {
		return nil, err
	}
	return &workflow{runID: wf.runID, token: wf.token, c: c}, nil
}

func (w *workflow) provision(ctx context.Context, count int) (apiv1.ProvisionResponse, time.Duration, error) {
	t := time.Now()
	resp, err := w.c.Provision(ctx, apiv1.ProvisionRequest{
		Count: count, UsageClass: "on-demand", AllowedInstanceTypes: []string{"c*", "m*"}, ResourceClass: "small",
	})
	return resp, time.Since(t), err
}

func (w *workflow) release(ctx context.Context) (apiv1.ReleaseResponse, error) {
	return w.c.Release(ctx, apiv1.ReleaseRequest{})
}

// githubLimits are the limits the bench's GitHub enforces: GitHub's documented ones.
var githubLimits = githubfake.DocumentedLimits

// githubPoints is what GitHub's REST API has charged so far against the secondary limit.
func (h *harness) githubPoints() int { return h.sb.Stack.GitHub.Usage().Points }

// calls snapshots the reconciler's call counts.
func (h *harness) calls() map[string]int {
	out := h.cp.Counts()
	maps.Copy(out, h.gh.Counts())
	return out
}

// account adds the calls made since before to a phase.
func (r *Result) account(phase string, before, after map[string]int) {
	m := r.Calls[phase]
	if m == nil {
		m = map[string]int{}
		r.Calls[phase] = m
	}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			m[k] += d
		}
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func countSources(resp apiv1.ProvisionResponse) map[string]int {
	out := map[string]int{}
	for _, r := range resp.Runners {
		out[r.Source]++
	}
	return out
}

// phaseCold: provisions from an empty pool; every runner is created.
func phaseCold(ctx context.Context, h *harness, res *Result) error {
	var wfs []*workflow
	points := 0 // GitHub's points spent on the provisions and their releases
	for range h.o.ColdRuns {
		wf, err := h.newWorkflow()
		if err != nil {
			return err
		}
		before, at := h.calls(), h.githubPoints()
		resp, took, err := wf.provision(ctx, h.o.ColdCount)
		if err != nil {
			return fmt.Errorf("cold provision: %w", err)
		}
		res.account("created", before, h.calls())
		points += h.githubPoints() - at
		if n := countSources(resp)["created"]; n != len(resp.Runners) {
			res.note("cold provision of run %s reused %d runners", wf.runID, len(resp.Runners)-n)
		}
		res.Runners["created"] += len(resp.Runners)
		res.Cold = append(res.Cold, ms(took))
		wfs = append(wfs, wf)
	}
	h.say("  %d cold provisions of %d: p50 %.0f ms", h.o.ColdRuns, h.o.ColdCount, Percentile(slices.Sorted(slices.Values(res.Cold)), 50))
	for _, wf := range wfs {
		before, at := h.calls(), h.githubPoints()
		rel, err := wf.release(ctx)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		res.account("release", before, h.calls())
		res.Runners["release"] += rel.Counts["pooled"]
		points += h.githubPoints() - at
	}
	perRunner := float64(total(res.Calls["created"])) / float64(max(res.Runners["created"], 1))
	res.add(Figure{Name: "api_calls_per_created_runner", Value: perRunner, Unit: "calls",
		How: "the reconciler's AWS and GitHub requests (retries included) during provisions from an empty pool, per runner created"})
	res.add(Figure{Name: "github_points_per_created_runner", Value: float64(points) / float64(max(res.Runners["created"], 1)), Unit: "points",
		How: "GitHub REST points (GET 1, writes 5, as GitHub's secondary limit counts them, from the GitHub fake's counters) of the cold provisions and their releases, per runner created"})
	return nil
}

// phaseWarm: provision/release cycles from the pool; every runner is reused.
func phaseWarm(ctx context.Context, h *harness, res *Result) error {
	reg := h.o.scaled(AnchorRegistration)
	points := 0      // GitHub's points spent on the cycles served from the pool alone
	var cycles []int // the cycle of each overhead sample, to say where the slowest fell
	for i := range h.o.WarmCycles {
		wf, err := h.newWorkflow()
		if err != nil {
			return err
		}
		before, at := h.calls(), h.githubPoints()
		resp, took, err := wf.provision(ctx, h.o.WarmCount)
		if err != nil {
			return fmt.Errorf("warm cycle %d: provision: %w", i+1, err)
		}
		after := h.calls()
		s := countSources(resp)
		allReused := s["reused"] == len(resp.Runners)
		if allReused {
			res.account("reused", before, after)
			res.Runners["reused"] += len(resp.Runners)
			res.WarmOverhead = append(res.WarmOverhead, ms(took-reg))
			cycles = append(cycles, i+1)
		} else {
			res.account("mixed", before, after)
			res.note("warm cycle %d was not served from the pool alone: %v", i+1, s)
		}
		before = h.calls()
		rel, err := wf.release(ctx)
		if err != nil {
			return fmt.Errorf("warm cycle %d: release: %w", i+1, err)
		}
		res.account("release", before, h.calls())
		res.Runners["release"] += rel.Counts["pooled"]
		if allReused {
			points += h.githubPoints() - at
		}
	}
	s := slices.Sorted(slices.Values(res.WarmOverhead))
	res.add(Figure{Name: "warm_provision_overhead_p50_ms", Value: Percentile(s, 50), Unit: "ms",
		How: fmt.Sprintf("POST /v1/provision of %d runners served from the pool, as the workflow sees it, minus the simulated registration (%s)", h.o.WarmCount, reg)})
	res.add(Figure{Name: "warm_provision_overhead_p99_ms", Value: Percentile(s, 99), Unit: "ms", How: "same, 99th percentile"})
	perRunner := float64(total(res.Calls["reused"])) / float64(max(res.Runners["reused"], 1))
	res.add(Figure{Name: "api_calls_per_reused_runner", Value: perRunner, Unit: "calls",
		How: "the reconciler's AWS and GitHub requests during provisions served from the pool, per runner reused"})
	res.add(Figure{Name: "github_points_per_reused_runner", Value: float64(points) / float64(max(res.Runners["reused"], 1)), Unit: "points",
		How: "GitHub REST points (GET 1, writes 5, as GitHub's secondary limit counts them, from the GitHub fake's counters) of provisions served from the pool and their releases, per runner reused; goal <= 0.25. A release signed by the instance's pinned agent key spends none: refresh checks its deregistration after the fact at one listing per scope and pass (a page per 100 runners, once a minute by default), whatever the number of runners released"})
	n := slices.Sorted(slices.Values(h.notice.samples()))
	res.Notice = n
	res.add(Figure{Name: "claim_notice_p50_ms", Value: Percentile(n, 50), Unit: "ms",
		How: "from the claim's write (the record's updated_at) to the idle agent reading the claimed record (instance metadata tag runnerpool:wake, 50 ms IMDS poll)"})
	res.add(Figure{Name: "claim_notice_p99_ms", Value: Percentile(n, 99), Unit: "ms", How: "same, 99th percentile"})
	h.say("  %d cycles: overhead p50 %.0f ms p99 %.0f ms (slowest: %s); %d claim notices p50 %.0f ms", h.o.WarmCycles,
		Percentile(s, 50), Percentile(s, 99), slowest(res.WarmOverhead, cycles, 5), len(n), Percentile(n, 50))
	return nil
}

// slowest renders the n largest samples with their cycles, "cycle 1 180 ms, ...": whether the p99
// is one early cycle (a warm-up) or spread over the run.
func slowest(samples []float64, cycles []int, n int) string {
	idx := make([]int, len(samples))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(samples[b], samples[a]) })
	var parts []string
	for _, i := range idx[:min(n, len(idx))] {
		parts = append(parts, fmt.Sprintf("cycle %d %.0f ms", cycles[i], samples[i]))
	}
	return strings.Join(parts, ", ")
}

// phaseThroughput: Workflows concurrent workflows, Concurrency at a time, each provision (1 to
// MaxCount runners), one job on its label, release. Jobs must run on their own run's runners.
func phaseThroughput(ctx context.Context, h *harness, res *Result) error {
	before := h.calls()
	began := time.Now()
	t := h.throughputRun(ctx, []string{h.svc.URL()}, h.workflowCounts())
	res.account("throughput", before, h.calls())
	res.Throughput = append(res.Throughput, t.took...)
	res.add(Figure{Name: "provision_throughput_per_min", Value: t.provisionsPerMin(), Unit: "provisions/min",
		How: fmt.Sprintf("%d workflows (provision of 1-%d runners, one job, release), %d at a time, over a pool smaller than they need: provisions completed per minute between the first provision's start and the last one's end (%s; %d runners)",
			h.o.Workflows, h.o.MaxCount, h.o.Concurrency, t.window.Round(time.Millisecond), t.runners)})
	res.add(Figure{Name: "github_points_per_min_at_peak", Value: float64(t.peakPoints), Unit: "points",
		How: fmt.Sprintf("during the throughput run: the most GitHub secondary-limit points (GET 1, writes 5; the GitHub fake's Usage counters, every caller: the reconciler and the simulated runners) spent in any 60 s window, sampled every second, against GitHub's budget of 900 a minute; a run shorter than a minute counts its points scaled to a minute (the rate sustained for one). This run lasted %s: %d points in all, %d requests refused",
			t.elapsed.Round(time.Millisecond), t.points, t.refused)})
	res.Runners["throughput"] = t.runners
	res.Runners["throughput_doubled"] = t.doubled
	h.say("  %d workflows in %s: %.1f provisions/min, %d jobs on another run's runner, GitHub peak %d points/min (%d points, %d refused)", t.provisions, time.Since(began).Round(time.Millisecond), t.provisionsPerMin(), t.doubled, t.peakPoints, t.points, t.refused)
	return errors.Join(t.errs...)
}

// runJob queues one job with the run's label and waits for it; doubled is 1 when it ran on a
// runner that was not provisioned to its run.
func (h *harness) runJob(ctx context.Context, wf *workflow, resp apiv1.ProvisionResponse) (doubled int, err error) {
	run, _ := strconv.ParseInt(wf.runID, 10, 64)
	owner, repo, _ := strings.Cut(repository, "/")
	id := h.sb.Stack.GitHub.QueueJob(owner, repo, run, []string{resp.Label})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		job, _ := h.sb.Stack.GitHub.Job(id)
		if job.Status == githubfake.JobCompleted {
			for _, r := range resp.Runners {
				if job.RunnerName == invariant.RunnerPrefix+r.InstanceID {
					return 0, nil
				}
			}
			return 1, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("job of run %s still %s after 2 minutes", wf.runID, job.Status)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// phaseIdle counts what the agents of idle instances ask AWS for on their own.
func phaseIdle(ctx context.Context, h *harness, res *Result) (err error) {
	// The last phase of the chain that measures the sandbox class's pool: its agents stop here.
	defer func() {
		err = errors.Join(err, h.retireIdle(context.WithoutCancel(ctx), "the idle phase is over", sandbox.RunnerClass))
	}()
	time.Sleep(2 * time.Second) // the last releases' handshakes settle
	idle, err := h.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
	if err != nil {
		return err
	}
	live, err := h.sb.Store.Live(ctx)
	if err != nil {
		return err
	}
	if len(idle) == 0 || len(idle) != len(live) {
		res.note("idle window with %d idle of %d live instances", len(idle), len(live))
	}
	h.say("  counting the requests of %d idle agents for %s", len(idle), h.o.IdleWindow)
	h.agent.Reset()
	select {
	case <-time.After(h.o.IdleWindow):
	case <-ctx.Done():
		return ctx.Err()
	}
	res.Agent = h.agent.Counts()
	res.IdleInstances = len(idle)
	perHour := float64(total(res.Agent)) / float64(max(len(idle), 1)) * float64(time.Hour) / float64(h.o.IdleWindow)
	res.add(Figure{Name: "idle_requests_per_instance_hour", Value: perHour, Unit: "requests",
		How: fmt.Sprintf("AWS requests (DynamoDB and EC2) of %d idle agents over %s with production intervals (heartbeat 5 min (liveness is the claim's acknowledgement), claim notice through instance metadata tags polled every 50 ms, fallback record read every 30 s), per instance-hour; IMDS requests stay on the instance and are not counted. The seeds' design (GetItem every 250 ms) costs 14,400 reads plus the heartbeats", len(idle), h.o.IdleWindow)})
	return nil
}

// resolver finds the pool of the sandbox's runner class and of the reuse scenarios' classes, each
// with its scope queues, as the reconciler keeps them.
func (h *harness) resolver() pool.StaticResolver {
	resolver := pool.StaticResolver{sandbox.RunnerClass: h.sb.Queue}
	for class, url := range h.reuseQueues {
		resolver[class] = pool.NewScopedQueue(h.sb.Stack.SQS(), url, pool.ScopeOptions{Logger: h.o.Logger})
	}
	return resolver
}

// phaseAudit runs the refresh passes that follow a fault and the invariant checker over the whole
// deployment.
func phaseAudit(ctx context.Context, h *harness, res *Result) error {
	// The refresh pass covers the reuse scenarios' queues too: it drops the messages a claim through
	// the idle index left behind and the duplicates, and pools again what lost its message (once
	// two walks further apart than the longest visibility timeout missed it: a second pass then).
	cp, err := h.wired(controlplane.Clients{GitHub: h.sb.GitHub}, controlplane.Options{Refresh: refresh.Options{Scopes: []string{sandbox.Scope}}})
	if err != nil {
		return err
	}
	refreshedAt, err := auditRefresh(ctx, h, cp.Refresher)
	if err != nil {
		res.note("audit refresh pass: %v", err)
	}
	rep, err := invariant.Check(ctx, h.sb.Store, h.sb.EC2, invariant.Options{
		DeploymentID: sandbox.DeploymentID, Queues: append([]string{h.sb.Queue.URL()}, h.extraQueues...), SQS: h.sb.Stack.SQS(),
		GitHub: h.sb.GitHub, Scopes: []string{sandbox.Scope}, OrphanGrace: 2 * time.Minute, Pooled: true, RefreshedAt: refreshedAt,
	})
	if err != nil {
		return err
	}
	res.Audit = rep
	res.add(Figure{Name: "double_claims", Value: float64(rep.Count(invariant.RuleDoubleClaim) + res.Runners["throughput_doubled"]), Unit: "",
		How: "invariant checker (instances held by two runs, runners registered for two runs or another run than their record's) plus jobs that ran on a runner of another run"})
	res.add(Figure{Name: "orphans", Value: float64(rep.Count(invariant.RuleOrphan)), Unit: "",
		How: "after a refresh pass: EC2 instances of the deployment, not terminated, without a live record"})
	res.add(Figure{Name: "announcements_missing", Value: float64(rep.AnnouncementsMissing), Unit: "",
		How: "after the refresh passes: poolable instances (idle, or ready and marked pooled) with no live pool message"})
	res.add(Figure{Name: "announcements_duplicate", Value: float64(rep.AnnouncementsDuplicate), Unit: "",
		How: "after the refresh passes: poolable instances with more than one live pool message"})
	h.say("  audit: %s", rep.Summary())
	return rep.Err()
}

// auditRefresh runs a refresh pass and, when its walks missed an instance's message, a second one
// once the longest visibility timeout has passed (one walk's miss proves nothing; two prove the
// message gone). It returns when the last pass began.
func auditRefresh(ctx context.Context, h *harness, ref *refresh.Refresher) (time.Time, error) {
	at := time.Now()
	rep, err := ref.Run(ctx)
	if len(rep.Pool.Missed) == 0 {
		return at, err
	}
	// The refresher's default LongestVisibility: its own walk's timeout, the longest of any reader.
	wait := max(refresh.DefaultVisibilityTimeout, pool.DefaultVisibilityTimeout) + time.Second
	h.say("  audit: %d pooled instances without a message in the first walk; walking again in %s", len(rep.Pool.Missed), wait)
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return at, ctx.Err()
	}
	at = time.Now()
	_, err2 := ref.Run(ctx)
	return at, errors.Join(err, err2)
}
