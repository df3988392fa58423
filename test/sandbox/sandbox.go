// Package sandbox runs a whole runnerpool deployment on the local stack: the state table, a pool
// queue, a launch template, the control-plane components (provision, release, refresh) and
// simulated EC2 instances that each run the real instance agent with a fake actions runner talking
// to the GitHub fake. The end-to-end tests, the demo and the benchmark all start one.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

// The names the sandbox deploys under.
const (
	DeploymentID = "sandbox"
	RunnerClass  = "default"
	Scope        = "acme/app" // the repository the sandbox's workflows run in
)

// Subnets are the sandbox's subnets, one per zone.
var Subnets = map[string]string{"subnet-0aaa": "us-east-1a", "subnet-0bbb": "us-east-1b", "subnet-0ccc": "us-east-1c"}

// Options tunes the sandbox. Zero values are sensible defaults for tests.
type Options struct {
	Logger *slog.Logger
	// Root holds the simulated instances' directories (required).
	Root string
	// JobDuration is how long a fake job takes (default 200 ms).
	JobDuration time.Duration
	// Agent intervals (defaults: heartbeat 1 s, notice 50 ms, fallback 5 s, grace 2 s,
	// orphan grace 30 s).
	Heartbeat, Notice, Fallback, Grace, OrphanGrace time.Duration
	// AgentDisabled, when it returns true for an instance, makes that instance run no agent (a
	// crashed agent; faults).
	AgentDisabled func(instanceID string) bool
	// FailRegistration, when it returns true for an instance at the moment its agent registers a
	// runner, makes that registration fail as a refused GitHub registration would.
	FailRegistration func(instanceID string) bool
	// RunnerVersion, when set, is the runner version an instance runs (default: the one its user
	// data installs, agenttest.RunnerVersion); the GitHub fake holds it to GitHub's version policy.
	RunnerVersion func(inst ec2server.RuntimeInstance) string
	// ChildOutput receives DynamoDB Local's and fauxqs's output.
	ChildOutput io.Writer

	// Simulated machine times (the benchmark sets them from the anchors; zero: none, as before).
	// PendingDelay is the EC2 server's pending -> running delay of launches and starts (0: the
	// server's default 300 ms; negative: none). BootDelay is the rest of a cold boot: from the
	// instance entering running the first time to its agent starting. StartDelay is the same for a
	// stopped instance started again. RegistrationDelay is added to every runner registration (the
	// actions runner's config.sh talking to GitHub).
	PendingDelay, BootDelay, StartDelay, RegistrationDelay time.Duration
	// NoticeMode is the agents' claim notice (default agent.NoticeIMDSTags).
	NoticeMode agent.NoticeMode
	// AgentAPIOptions are added to the agents' DynamoDB and EC2 clients (e.g. an
	// awslimit.Counter's AddMiddleware to count what idle agents cost).
	AgentAPIOptions []func(*middleware.Stack) error
	// AgentClock is the agents' clock (default time.Now): a skewed clock simulates an instance
	// whose clock differs from the control plane's.
	AgentClock func() time.Time
	// OnRecord, when set, is called with every record an agent reads (agent.Config.OnRecord).
	OnRecord func(store.Instance)
	// WrapRunner, when set, wraps every instance's runner driver (a job that tampers with the
	// runner: the attack tests).
	WrapRunner func(instanceID string, r runner.Runner) runner.Runner
	// RunnerUser is the agents' runner user (agent.Config.RunnerUser; empty: none, no process is
	// killed). The simulated instances share one host: a release kills that uid's processes there.
	RunnerUser string
	// JobAccess and Reuse are the runner class's posture (declared.JobAccess*, declared.Reuse*; empty:
	// user, any-repository): the agents grant JobAccess (recorded in Grants, not applied to this
	// machine) and the releaser applies Reuse.
	JobAccess, Reuse string
	// RootlessDocker gives each instance's agent the runner user's Docker daemon (JobAccess docker).
	RootlessDocker func(instanceID string) *agent.RootlessDocker
	// Cache, when set, turns on the runner cache in every agent (a class with the cache on):
	// ControlPlane and Upstream as the test serves them; the other paths are per instance
	// (agenttest).
	Cache *agent.CacheOptions
}

// Sandbox is a running deployment.
type Sandbox struct {
	Stack          *stack.Stack
	Table          string
	Queue          *pool.Queue
	LaunchTemplate string
	Store          *store.Store
	GitHub         *ghaccess.Client
	EC2            *ec2.Client
	Limits         *awslimit.Limits
	Log            *slog.Logger
	// Grants holds the job-access grant each instance's agent decided at boot.
	Grants *agenttest.Grants

	opts   Options
	mu     sync.Mutex
	agents map[string]context.CancelFunc // running agents, by instance
	booted map[string]bool               // instances that booted once (a later run is a start)
}

// Start starts the stack with agents in every simulated instance and creates the deployment's
// table, queue and launch template.
func Start(ctx context.Context, o Options) (_ *Sandbox, err error) {
	if o.Root == "" {
		return nil, errors.New("sandbox: a root directory for the instances is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.JobDuration, 200*time.Millisecond)
	def(&o.Heartbeat, time.Second)
	def(&o.Notice, 50*time.Millisecond)
	def(&o.Fallback, 5*time.Second)
	def(&o.Grace, 2*time.Second)
	def(&o.OrphanGrace, 30*time.Second)

	sb := &Sandbox{Table: "runnerpool-sandbox", opts: o, Log: o.Logger, agents: map[string]context.CancelFunc{}, booted: map[string]bool{},
		Grants: &agenttest.Grants{}}
	var hook func(context.Context, ec2server.RuntimeInstance)
	stk, err := stack.Start(ctx, stack.Options{
		Logger: o.Logger, ChildOutput: o.ChildOutput, EC2PendingDelay: o.PendingDelay,
		Runtime: func(ctx context.Context, inst ec2server.RuntimeInstance) {
			if o.AgentDisabled != nil && o.AgentDisabled(inst.ID) {
				<-ctx.Done()
				return
			}
			if !sb.boot(ctx, inst.ID) {
				return // stopped or terminated while booting
			}
			ctx, cancel := context.WithCancel(ctx)
			sb.mu.Lock()
			sb.agents[inst.ID] = cancel
			sb.mu.Unlock()
			defer func() {
				cancel()
				sb.mu.Lock()
				delete(sb.agents, inst.ID)
				sb.mu.Unlock()
			}()
			hook(ctx, inst)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	sb.Stack = stk
	defer func() {
		if err != nil {
			_ = stk.Close()
		}
	}()
	for s, z := range Subnets {
		stk.EC2.SetSubnet(s, z)
	}

	db := stk.DynamoDB()
	if err := store.CreateTable(ctx, db, sb.Table); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	sb.Store = store.New(db, sb.Table)
	sb.Limits = awslimit.Default()
	sb.EC2 = ec2.NewFromConfig(mustConfig(ctx, stk), func(eo *ec2.Options) {
		eo.BaseEndpoint = aws.String(stk.Endpoints.EC2)
	}, awslimit.WithEC2Limits(sb.Limits))

	q, err := stk.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + RunnerClass)})
	if err != nil {
		return nil, fmt.Errorf("sandbox: creating the pool queue: %w", err)
	}
	// A queue per scope beside the class queue, as the reconciler keeps (pool/scope.go).
	sb.Queue = pool.NewScopedQueue(stk.SQS(), aws.ToString(q.QueueUrl), pool.ScopeOptions{Logger: sb.Log})

	lt, err := sb.EC2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: aws.String("runnerpool-sandbox"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: aws.String("ami-0123456789abcdef0"),
			// IMDSv2 only, and instance tags in the metadata: the agent's claim notice watches them.
			MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
				HttpTokens:           ec2types.LaunchTemplateHttpTokensStateRequired,
				InstanceMetadataTags: ec2types.LaunchTemplateInstanceMetadataTagsStateEnabled,
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: creating the launch template: %w", err)
	}
	sb.LaunchTemplate = aws.ToString(lt.LaunchTemplate.LaunchTemplateId)

	sb.GitHub, err = ghaccess.New(ghaccess.Config{APIURL: stk.Endpoints.GitHubAPI, Token: stk.GitHub.PAT(), Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}

	agentEC2 := ec2.NewFromConfig(mustConfig(ctx, stk), func(eo *ec2.Options) {
		eo.BaseEndpoint = aws.String(stk.Endpoints.EC2)
		eo.APIOptions = append(eo.APIOptions, o.AgentAPIOptions...)
	})
	agentDB := dynamodb.NewFromConfig(mustConfig(ctx, stk), func(do *dynamodb.Options) {
		do.BaseEndpoint = aws.String(stk.Endpoints.DynamoDB)
		do.DisableValidateResponseChecksum = true
		do.APIOptions = append(do.APIOptions, o.AgentAPIOptions...)
	})
	var agentStoreOpts []store.Option
	if o.AgentClock != nil {
		agentStoreOpts = append(agentStoreOpts, store.WithClock(o.AgentClock))
	}
	notice := o.NoticeMode
	if notice == "" {
		notice = agent.NoticeIMDSTags
	}
	hook = agenttest.RuntimeHook(agent.Config{
		Store: store.New(agentDB, sb.Table, agentStoreOpts...), EC2: agentEC2,
		Notice: notice, NoticeInterval: o.Notice, FallbackInterval: o.Fallback,
		HeartbeatInterval: o.Heartbeat, Grace: o.Grace, OrphanGrace: o.OrphanGrace,
		CredentialWait: 5 * time.Second, RetryInterval: 100 * time.Millisecond, StopTimeout: 10 * time.Second,
		Now: o.AgentClock, OnRecord: o.OnRecord, Logger: o.Logger, RunnerUser: o.RunnerUser, JobAccess: o.JobAccess,
		Cache: o.Cache,
	}, agenttest.Options{Root: o.Root, Installation: true, Grants: sb.Grants, RootlessDocker: o.RootlessDocker,
		// Each agent reaches its instance's IMDS in process: hundreds of agents polling their claim
		// notice every 50 ms over loopback TCP would cost this machine what on EC2 costs nothing.
		HTTPClient: &http.Client{Transport: stk.EC2.IMDSTransport(nil)},
		NewRunner: func(inst ec2server.RuntimeInstance, d agenttest.Dirs) (runner.Runner, error) {
			r, err := fakerunner.New(fakerunner.Options{
				BaseURL: stk.Endpoints.GitHubAPI, Dir: d.Runner, WorkDir: d.Work, JobDuration: o.JobDuration,
				PollWait: 5 * time.Second, Logger: o.Logger.With("instance", inst.ID), Version: runnerVersion(o, inst),
			})
			if err != nil {
				return nil, err
			}
			var rr runner.Runner = r
			if o.RegistrationDelay > 0 {
				rr = &slowRunner{Runner: rr, delay: o.RegistrationDelay}
			}
			if o.FailRegistration != nil {
				rr = &failingRunner{Runner: rr, fail: func() bool { return o.FailRegistration(inst.ID) }}
			}
			if o.WrapRunner != nil {
				rr = o.WrapRunner(inst.ID, rr)
			}
			return rr, nil
		}})
	return sb, nil
}

// failingRunner refuses registrations while fail says so.
type failingRunner struct {
	runner.Runner
	fail func() bool
}

func (f *failingRunner) Register(ctx context.Context, cred store.Credential, name string) error {
	if f.fail() {
		return errors.New("registration refused by GitHub (sandbox fault)")
	}
	return f.Runner.Register(ctx, cred, name)
}

// slowRunner takes delay longer to register, as the actions runner's config.sh does talking to
// GitHub.
type slowRunner struct {
	runner.Runner
	delay time.Duration
}

func (s *slowRunner) Register(ctx context.Context, cred store.Credential, name string) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Runner.Register(ctx, cred, name)
}

// boot waits out the simulated boot of an instance that just entered running: BootDelay the first
// time, StartDelay after a stop. It reports false when the instance left running meanwhile.
func (s *Sandbox) boot(ctx context.Context, id string) bool {
	s.mu.Lock()
	d := s.opts.BootDelay
	if s.booted[id] {
		d = s.opts.StartDelay
	}
	s.booted[id] = true
	s.mu.Unlock()
	if d <= 0 {
		return true
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

func mustConfig(ctx context.Context, stk *stack.Stack) aws.Config {
	cfg, err := stk.AWSConfig(ctx)
	if err != nil {
		panic(fmt.Sprintf("sandbox: the stack's AWS config: %v", err)) // built from constants; cannot fail
	}
	return cfg
}

// KillAgent stops the agent of an instance without touching the instance (a crashed agent process).
func (s *Sandbox) KillAgent(instanceID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cancel, ok := s.agents[instanceID]
	if ok {
		cancel()
	}
	return ok
}

// Close stops every agent, the servers and the emulators.
func (s *Sandbox) Close() error { return s.Stack.Close() }

// Resolver maps the sandbox's runner class to its queue.
func (s *Sandbox) Resolver() pool.StaticResolver { return pool.StaticResolver{RunnerClass: s.Queue} }

// ComponentOptions tunes the control plane's timings (defaults suit tests).
type ComponentOptions struct {
	RegistrationWait time.Duration // reused instances (default 10 s)
	FleetWait        time.Duration // created instances (default 60 s)
	ReleaseWait      time.Duration // deregistration signal (default 30 s)
	IdleTime         time.Duration // default 10 min
	MaxRuntime       time.Duration // default 1 h
	PollInterval     time.Duration // default 50 ms
	// GitHub replaces the sandbox's GitHub client (e.g. one with the deployment's allow-list).
	GitHub *ghaccess.Client
	// OnSpotInterruption is the releaser's hook (release.Options.OnSpotInterruption).
	OnSpotInterruption func(instanceID string)
	// OnReleased is the releaser's hook (release.Options.OnReleased).
	OnReleased func(instanceID, detail string)
}

// Components are the control plane's domain components, wired to the sandbox.
type Components struct {
	Registrar   *claim.Registrar
	Claimer     *claim.Claimer
	Fleet       *fleet.Fleet
	Provisioner *provision.Provisioner
	Releaser    *release.Releaser
	Refresher   *refresh.Refresher
	Config      provision.Config
}

// Components builds a control plane (what one reconciler replica holds) over the sandbox, through
// the service's composition root (internal/controlplane).
func (s *Sandbox) Components(o ComponentOptions) *Components {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.RegistrationWait, 10*time.Second)
	def(&o.FleetWait, 60*time.Second)
	def(&o.ReleaseWait, 30*time.Second)
	def(&o.IdleTime, 10*time.Minute)
	def(&o.MaxRuntime, time.Hour)
	def(&o.PollInterval, 50*time.Millisecond)

	subnets := make([]string, 0, len(Subnets))
	for sn := range Subnets {
		subnets = append(subnets, sn)
	}
	gh := s.GitHub
	if o.GitHub != nil {
		gh = o.GitHub
	}
	c := &Components{Config: provision.Config{
		ResourceClasses: map[string]provision.ResourceClass{
			"small": {CPU: 2, MemoryMiB: 4096}, "medium": {CPU: 4, MemoryMiB: 8192}, "large": {CPU: 8, MemoryMiB: 16384},
		},
		RunnerClasses: map[string]runnerclass.Resolved{RunnerClass: {
			RunnerClass: declared.RunnerClass{
				Name: RunnerClass, LaunchTemplateID: s.LaunchTemplate, Subnets: subnets,
				MaxRuntime: declared.Duration(o.MaxRuntime), IdleTime: declared.Duration(o.IdleTime),
			},
			Queue: s.Queue, TemplateVersion: "$Latest",
		}},
		DefaultRunnerClass: RunnerClass, DeploymentID: DeploymentID, RegistrationWait: o.FleetWait,
	}}
	cp, err := controlplane.New(controlplane.Clients{Store: s.Store, EC2: s.EC2, SQS: s.Stack.SQS(), GitHub: gh}, controlplane.Options{
		DeploymentID: DeploymentID, Logger: s.Log,
		Claim:     claim.Options{RegistrationWait: o.RegistrationWait, PollInterval: o.PollInterval},
		Provision: provision.Options{PollInterval: o.PollInterval},
		Release: release.Options{
			SignalWait: o.ReleaseWait, PollInterval: o.PollInterval, OnSpotInterruption: o.OnSpotInterruption, OnReleased: o.OnReleased,
			Reuse: func(runnerClass string) (string, error) {
				if runnerClass != RunnerClass {
					return "", fmt.Errorf("no runner class %q in the sandbox", runnerClass)
				}
				return s.opts.Reuse, nil
			},
		},
		Refresh: refresh.Options{Scopes: []string{Scope}},
		Classes: func(newProvisioner controlplane.NewProvisioner) (pool.Resolver, error) {
			c.Provisioner = newProvisioner(c.Config)
			return s.Resolver(), nil
		},
	})
	if err != nil {
		panic(fmt.Sprintf("sandbox: wiring the control plane: %v", err)) // the sandbox's own constants; cannot fail
	}
	c.Registrar, c.Claimer, c.Fleet, c.Releaser, c.Refresher = cp.Registrar, cp.Claimer, cp.Fleet, cp.Releaser, cp.Refresher
	return c
}

// TempRoot makes a directory for the instances that Close does not remove (callers own it).
func TempRoot() (string, error) { return os.MkdirTemp("", "runnerpool-sandbox-") }

// runnerVersion is the runner version a simulated instance runs.
func runnerVersion(o Options, inst ec2server.RuntimeInstance) string {
	if o.RunnerVersion != nil {
		return o.RunnerVersion(inst)
	}
	return agenttest.RunnerVersion(inst)
}
