// Package agentcmd is the command line of `runnerpool agent`: flags and environment to an agent.Config
// with real AWS clients and a runner driver, then agent.Run. The user data's systemd unit runs it with
// the actions runner. Other drivers (the GitHub fake's runner, for the demo and tests) are passed in
// as a Driver by the binary that links them, so the runnerpool binary carries no test code.
package agentcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// ErrUsage marks bad flags; the message and usage were already printed.
var ErrUsage = errors.New("usage")

// DefaultTempDirs are the directories a job (the runner user) can write to besides its workspace
// and home, whose entries the runner user owns are removed after every run: the temporary
// directories, shared memory, the world-writable lock and crash directories, and the POSIX message
// queues' file system (mq_open's queues are files there, and outlive their process).
const DefaultTempDirs = "/tmp,/var/tmp,/dev/shm,/run/lock,/var/crash,/dev/mqueue"

// Options are the parsed flags.
type Options struct {
	Table, Region, Notice                  string
	NoticeInterval, Fallback, Heartbeat    time.Duration
	Grace, OrphanGrace, CredentialWait     time.Duration
	PreRunnerScript                        string
	Runner, RunnerDir, RunnerUser, WorkDir string
	StateDir, TempDirs                     string
	RunnerManifest                         string
	CleanHome, CleanDocker                 bool
	IMDSEndpoint, InstanceID               string
	InstanceKeys                           string
	JobAccess                              string
	LogLevel                               string
	// CacheControlPlane turns on the runner cache: the reconciler's URL (agent.CacheOptions).
	CacheControlPlane string
}

// Driver is a runner driver besides the built-in "actions": a binary that links one (the demo's
// `runnerpool-demo agent` with the GitHub fake's runner; tests) passes it to Run. The production
// binary passes none, which keeps fakes out of it (see the go list check in reconciler/cmd/runnerpool).
type Driver struct {
	// Name is the -runner value that selects the driver.
	Name string
	// Flags registers the driver's own flags; the returned check validates them after parsing
	// when the driver is selected (nil: nothing to check).
	Flags func(fs *flag.FlagSet) (check func() error)
	// Configure sets cfg.NewRunner and turns off whatever host cleanup the driver does not need.
	Configure func(cfg *agent.Config, o Options, log *slog.Logger)
}

// Parse reads the flags (defaults from the environment where noted); drivers add -runner values.
func Parse(args []string, stderr io.Writer, drivers ...Driver) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("runnerpool agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: runnerpool agent [flags]\n\nRuns the instance agent on a runner instance (normally started by systemd from the user data).\n\nFlags:")
		fs.PrintDefaults()
	}
	names, checks := o.register(fs, drivers)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, ErrUsage
	}
	errs := o.check(fs, drivers, names, checks)
	if len(errs) > 0 {
		err := errors.Join(errs...)
		fmt.Fprintf(stderr, "runnerpool agent: %v\n", err)
		return o, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return o, nil
}

// register registers o's flags on fs, the drivers' own among them, and returns the -runner values
// (the built-in "actions" first) and the drivers' checks by name.
func (o *Options) register(fs *flag.FlagSet, drivers []Driver) (names []string, checks map[string]func() error) {
	fs.StringVar(&o.Table, "table", os.Getenv("RUNNERPOOL_TABLE"), "state table name (env RUNNERPOOL_TABLE)")
	fs.StringVar(&o.Region, "region", "", "AWS region (default: the SDK's, e.g. AWS_REGION)")
	fs.StringVar(&o.Notice, "notice", string(agent.NoticeIMDSTags), "claim notice: imds-tags (wake tag through IMDS) or poll (GetItem every 250 ms)")
	fs.DurationVar(&o.NoticeInterval, "notice-interval", 0, "how often the notice looks (default 50ms for imds-tags, 250ms for poll)")
	fs.DurationVar(&o.Fallback, "fallback-interval", 30*time.Second, "imds-tags: longest time between two record reads")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 5*time.Minute, "heartbeat interval (a trace for operators: the control plane judges liveness by the claim's acknowledgement)")
	fs.DurationVar(&o.Grace, "grace", 2*time.Minute, "time past the record's threshold before the instance terminates itself")
	fs.DurationVar(&o.OrphanGrace, "orphan-grace", 2*time.Minute, "time after boot without a record before the instance terminates itself")
	fs.DurationVar(&o.CredentialWait, "credential-wait", 10*time.Second, "how long one look waits for a registration or removal credential (a registration credential still missing after it is looked for again, with back-off, while the record names the run: GitHub may be slow to mint it)")
	fs.StringVar(&o.PreRunnerScript, "pre-runner-script", "", "script run once at first boot (none when empty)")
	names = []string{"actions"}
	checks = map[string]func() error{}
	for _, d := range drivers {
		names = append(names, d.Name)
		if d.Flags != nil {
			checks[d.Name] = d.Flags(fs)
		}
	}
	fs.StringVar(&o.Runner, "runner", "actions", "runner driver: "+strings.Join(names, ", ")+" (actions: the GitHub Actions runner)")
	fs.StringVar(&o.RunnerDir, "runner-dir", "/opt/actions-runner", "where the runner is installed (fake: where it keeps its registration)")
	fs.StringVar(&o.RunnerUser, "runner-user", "runner", "unprivileged user that runs the runner and its jobs (empty: the agent's user)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "runner workspace, emptied after every run (default RUNNER-DIR/_work)")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/runnerpool", "the agent's own state")
	fs.StringVar(&o.RunnerManifest, "runner-manifest", "", "actions runner: the sha256 manifest of the runner's installation, written root-only by the user data, checked before every registration and release (default STATE-DIR/runner.sha256)")
	fs.StringVar(&o.TempDirs, "temp-dirs", DefaultTempDirs, "comma-separated directories whose entries owned by the runner user are removed after every run (the world-writable ones a job can write to)")
	fs.BoolVar(&o.CleanHome, "clean-home", true, "empty the runner user's home directory after every run")
	fs.BoolVar(&o.CleanDocker, "clean-docker", true, "remove docker containers and volumes after every run (when docker is installed)")
	fs.StringVar(&o.IMDSEndpoint, "imds-endpoint", os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "instance metadata endpoint (env AWS_EC2_METADATA_SERVICE_ENDPOINT; default the link-local one)")
	fs.StringVar(&o.InstanceID, "instance-id", "", "instance id (default: read from IMDS)")
	fs.StringVar(&o.InstanceKeys, "instance-keys", envOr("RUNNERPOOL_INSTANCE_KEYS", KeysARN),
		"how the table keys this instance's items: arn (INSTANCE#<instance ARN>, built from the IMDS identity document; the reconciler's default) or id (INSTANCE#<instance id>); must match the reconciler (env RUNNERPOOL_INSTANCE_KEYS)")
	fs.StringVar(&o.JobAccess, "job-access", declared.JobAccessUser, "what jobs may do (the runner class's job_access, passed by the user data): user, docker (a rootless Docker daemon of the runner user) or root (sudo and the docker group; granted at first boot)")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.CacheControlPlane, "cache-control-plane", "", "the reconciler's URL: serve the runner cache (actions/cache from the deployment's bucket, presigned there; docs/cache.md) to the runner's node actions; off when empty")
	return names, checks
}

// check validates the parsed flags, fills in the defaults that depend on other flags and returns
// every problem found.
func (o *Options) check(fs *flag.FlagSet, drivers []Driver, names []string, checks map[string]func() error) []error {
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if o.Table == "" {
		errs = append(errs, errors.New("-table (or RUNNERPOOL_TABLE) is required"))
	}
	if _, err := agent.ParseNoticeMode(o.Notice); err != nil {
		errs = append(errs, err)
	}
	if err := declared.ValidateJobAccess(o.JobAccess); err != nil {
		errs = append(errs, fmt.Errorf("-job-access: %w", err))
	}
	if o.InstanceKeys != KeysARN && o.InstanceKeys != KeysID {
		errs = append(errs, fmt.Errorf("-instance-keys %q: want %s or %s", o.InstanceKeys, KeysARN, KeysID))
	}
	if d, ok := driver(o.Runner, drivers); !ok && o.Runner != "actions" {
		errs = append(errs, fmt.Errorf("-runner %q: want one of %s", o.Runner, strings.Join(names, ", ")))
	} else if ok && checks[d.Name] != nil {
		if err := checks[d.Name](); err != nil {
			errs = append(errs, fmt.Errorf("-runner %s: %w", d.Name, err))
		}
	}
	if !filepath.IsAbs(o.RunnerDir) {
		errs = append(errs, fmt.Errorf("-runner-dir %q must be absolute", o.RunnerDir))
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(o.RunnerDir, "_work")
	}
	if o.RunnerManifest == "" {
		o.RunnerManifest = filepath.Join(o.StateDir, "runner.sha256")
	}
	if _, err := parseLevel(o.LogLevel); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func driver(name string, drivers []Driver) (Driver, bool) {
	for _, d := range drivers {
		if d.Name == name {
			return d, true
		}
	}
	return Driver{}, false
}

// Instance key modes (-instance-keys): the reconciler's --instance-keys, which every component of a
// deployment must share.
const (
	KeysARN = "arn"
	KeysID  = "id"
)

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("-log-level %q: %w", s, err)
	}
	return l, nil
}

// Run parses the flags and runs the agent until ctx is done or the instance terminated itself.
// drivers are the runner drivers besides "actions" the calling binary offers.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, drivers ...Driver) error {
	o, err := Parse(args, stderr, drivers...)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg, err := Config(ctx, o, stderr, drivers...)
	if err != nil {
		return err
	}
	return agent.Run(ctx, cfg)
}

// awsCallTimeout bounds each attempt of the agent's AWS calls (above SQS's 20 s long poll).
const awsCallTimeout = 30 * time.Second

// Config builds the agent's configuration: AWS clients from the SDK's default configuration (the
// instance role; endpoints from AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_EC2 where set), an IMDSv2-
// only metadata client, and the runner driver (o.Runner: "actions" or one of drivers).
func Config(ctx context.Context, o Options, logOut io.Writer, drivers ...Driver) (agent.Config, error) {
	level, _ := parseLevel(o.LogLevel)
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level}))
	var loadOpts []func(*config.LoadOptions) error
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return agent.Config{}, fmt.Errorf("loading AWS configuration: %w", err)
	}
	// Every attempt of every AWS call has a deadline: a hung answer is retried, not waited for
	// forever (the heartbeat and the self-termination checks run on these clients).
	awsCfg.HTTPClient = awslimit.CallTimeout(awsCfg.HTTPClient, awsCallTimeout)
	db := dynamodb.NewFromConfig(awsCfg, func(d *dynamodb.Options) {
		// DynamoDB Local (a custom endpoint) does not always send a CRC32 matching what the SDK
		// reads; the real service does, so validation stays on against it.
		if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" {
			d.DisableValidateResponseChecksum = true
		}
	})
	// EnableFallback false: IMDSv2 only, never the unauthenticated IMDSv1 flow.
	md := imds.New(imds.Options{Endpoint: o.IMDSEndpoint, EnableFallback: aws.FalseTernary})
	prefix, err := InstanceKeyPrefix(ctx, md, o.InstanceKeys)
	if err != nil {
		return agent.Config{}, err
	}
	var temp []string
	for _, d := range strings.Split(o.TempDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			temp = append(temp, d)
		}
	}
	cfg := agent.Config{
		Store: store.New(db, o.Table, store.WithInstanceKeyPrefix(prefix)), EC2: ec2.NewFromConfig(awsCfg), IMDS: md, InstanceID: o.InstanceID,
		Notice: agent.NoticeMode(o.Notice), NoticeInterval: o.NoticeInterval, FallbackInterval: o.Fallback,
		HeartbeatInterval: o.Heartbeat, PreRunnerScript: o.PreRunnerScript,
		StateDir: o.StateDir, WorkDir: o.WorkDir, RunnerUser: o.RunnerUser, TempDirs: temp, CleanHome: o.CleanHome,
		Grace: o.Grace, OrphanGrace: o.OrphanGrace, CredentialWait: o.CredentialWait, Logger: log, JobAccess: o.JobAccess,
	}
	var env []string
	if o.CacheControlPlane != "" {
		cfg.Cache = &agent.CacheOptions{ControlPlane: o.CacheControlPlane}
		env = append(env, agent.CacheEnv(*cfg.Cache)...)
	}
	if o.JobAccess == declared.JobAccessDocker {
		d, err := RootlessDocker(o.RunnerUser, logOut)
		if err != nil {
			return agent.Config{}, err
		}
		cfg.RootlessDocker, env = d, append(env, "DOCKER_HOST="+d.Host())
	} else if o.CleanDocker {
		if docker, err := exec.LookPath("docker"); err == nil {
			cfg.Docker = docker
		}
	}
	if d, ok := driver(o.Runner, drivers); ok {
		// A driver's runner has no installation of its own to verify unless it says so.
		cfg.RunnerDir, cfg.RunnerManifest = "", ""
		d.Configure(&cfg, o, log)
	} else {
		// The actions runner's installation is always verified: there is no switch to turn it off.
		cfg.RunnerDir, cfg.RunnerManifest = o.RunnerDir, o.RunnerManifest
		cfg.NewRunner = func(string) (runner.Runner, error) {
			return runner.NewActions(runner.ActionsOptions{Dir: o.RunnerDir, User: o.RunnerUser,
				WorkDir: relWork(o.RunnerDir, o.WorkDir), Output: logOut, Env: env})
		}
	}
	return cfg, nil
}

// Where a "docker" class's daemon keeps its socket and its data: the runner user's directories,
// outside its home and the temporary directories the cleanup empties, so images stay between runs.
const (
	RootlessRuntimeDir = "/run/runnerpool-docker"
	RootlessDataRoot   = "/var/lib/runnerpool-docker"
)

// RootlessDocker is the runner user's Docker daemon of a "docker" class (agent.RootlessDocker).
func RootlessDocker(runnerUser string, out io.Writer) (*agent.RootlessDocker, error) {
	u, err := user.Lookup(runnerUser)
	if err != nil {
		return nil, fmt.Errorf("-job-access docker: runner user: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil || uid <= 0 {
		return nil, fmt.Errorf("-job-access docker: runner user %s: uid %q gid %q", runnerUser, u.Uid, u.Gid)
	}
	start, count, err := agent.SubordinateRange("/etc/subuid", runnerUser, uid)
	if err != nil {
		return nil, fmt.Errorf("-job-access docker: %w", err)
	}
	script, err := agent.FindRootlessScript()
	if err != nil {
		return nil, fmt.Errorf("-job-access docker: %w", err)
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		return nil, fmt.Errorf("-job-access docker: the docker CLI: %w", err)
	}
	return &agent.RootlessDocker{UID: uid, GID: gid, Home: u.HomeDir, SubStart: start, SubCount: count,
		RuntimeDir: RootlessRuntimeDir, DataRoot: RootlessDataRoot, Script: script, Docker: docker, Output: out}, nil
}

// relWork expresses the work directory relative to the runner directory when it lies below it
// (config.sh's --work is relative to the runner directory).
func relWork(runnerDir, workDir string) string {
	if rel, err := filepath.Rel(runnerDir, workDir); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return workDir
}

// IdentityDocumentAPI is the part of the IMDS client InstanceKeyPrefix uses; *imds.Client satisfies it.
type IdentityDocumentAPI interface {
	GetInstanceIdentityDocument(ctx context.Context, in *imds.GetInstanceIdentityDocumentInput, opts ...func(*imds.Options)) (*imds.GetInstanceIdentityDocumentOutput, error)
}

// identityTries and identityEvery bound the wait for the metadata service early in boot.
const (
	identityTries = 30
	identityEvery = time.Second
)

// InstanceKeyPrefix is the store's instance key prefix for a key mode: "" for id keys; for arn keys
// the instance ARN's prefix, from the region and account of the instance identity document (the ARN
// IAM knows the instance's requests by: ${ec2:SourceInstanceARN}). It retries while the metadata
// service does not answer yet.
func InstanceKeyPrefix(ctx context.Context, md IdentityDocumentAPI, mode string) (string, error) {
	if mode == KeysID {
		return "", nil
	}
	var last error
	for try := range identityTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("reading the instance identity document: %w", ctx.Err())
			case <-time.After(identityEvery):
			}
		}
		doc, err := md.GetInstanceIdentityDocument(ctx, &imds.GetInstanceIdentityDocumentInput{})
		if err != nil {
			last = err
			continue
		}
		if doc.Region == "" || doc.AccountID == "" {
			return "", fmt.Errorf("instance identity document without region or account (%q, %q): cannot build the instance ARN for -instance-keys arn", doc.Region, doc.AccountID)
		}
		return store.InstanceARNPrefix(doc.Region, doc.AccountID), nil
	}
	return "", fmt.Errorf("reading the instance identity document (-instance-keys arn): %w", last)
}
