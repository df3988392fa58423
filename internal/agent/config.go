// Package agent is `runnerpool agent`, the program on every runner instance. It reads its identity from
// the instance metadata service (IMDSv2), runs the pre-runner script once, keeps a heartbeat, and then
// follows its own record in the state table: when a run is assigned it takes the per-claim registration
// credential from its own item, registers a runner labelled for that run and signals UD_REG_OK; when the
// run id is cleared it stops and deregisters the runner with the per-release removal credential, cleans
// the workspace and signals UD_REMOVE_REG_REMOVE_RUN, so the control plane can pool it again. It
// terminates its own instance once its threshold plus a grace period has passed, and after a crash or a
// restart it resumes from what the table (and its runner's saved registration) says.
//
// The agent never talks to the control plane directly: everything goes through its own items in
// DynamoDB. It learns about claims and releases from the instance tag runnerpool:wake (package wake),
// which it reads through the instance metadata service: local, free, no AWS request. See notice.go.
//
// config.go: the configuration and its defaults.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Store is the part of the state store the agent uses; *store.Store satisfies it. An instance's IAM
// role allows exactly these calls (dynamodb:LeadingKeys): reads of its control-plane items (the
// record, its credentials: GetItem on INSTANCE#<key>) and reads and writes of its own reports
// (heartbeat, signals, acknowledgements: GetItem and PutItem on AGENT#<key>). It can change nothing
// the control plane decides from; iam_test.go checks the example policy against these calls.
type Store interface {
	Get(ctx context.Context, id string) (store.Instance, error)
	ReadCredential(ctx context.Context, id string, kind store.CredentialKind, runID string) (store.Credential, error)
	PutHeartbeat(ctx context.Context, id string) error
	PutSignal(ctx context.Context, id string, sig store.SignalRecord) error
	LastSignal(ctx context.Context, id string) (store.SignalRecord, error)
	PutAck(ctx context.Context, id string, a store.Ack) error
}

// MetadataAPI is the part of the IMDS client the agent uses; *imds.Client satisfies it.
type MetadataAPI interface {
	GetMetadata(ctx context.Context, in *imds.GetMetadataInput, opts ...func(*imds.Options)) (*imds.GetMetadataOutput, error)
}

// TerminatorAPI is the part of the EC2 client the agent uses to terminate its own instance (the
// instance role allows TerminateInstances on itself only).
type TerminatorAPI interface {
	TerminateInstances(ctx context.Context, in *ec2.TerminateInstancesInput, opts ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// NoticeMode selects how an idle agent notices a claim or a release.
type NoticeMode string

const (
	// NoticeIMDSTags watches the instance tag runnerpool:wake through IMDS and reads the record when it
	// changes, plus a slow fallback read. runnerpool's design; the default.
	NoticeIMDSTags NoticeMode = "imds-tags"
	// NoticePoll reads the record every NoticeInterval (250 ms): the seeds' design, kept so both can
	// be measured the same way.
	NoticePoll NoticeMode = "poll"
)

// ParseNoticeMode validates a notice mode from a flag.
func ParseNoticeMode(s string) (NoticeMode, error) {
	switch m := NoticeMode(s); m {
	case NoticeIMDSTags, NoticePoll:
		return m, nil
	}
	return "", fmt.Errorf("unknown notice mode %q (want %q or %q)", s, NoticeIMDSTags, NoticePoll)
}

// Config configures an agent. Zero durations take the documented defaults.
type Config struct {
	// Store is the state table. Required.
	Store Store
	// EC2 terminates the instance. Required.
	EC2 TerminatorAPI
	// IMDS is the instance metadata client (IMDSv2). Required.
	IMDS MetadataAPI
	// NewRunner makes the runner driver once the instance id is known. Required.
	NewRunner func(instanceID string) (runner.Runner, error)
	// InstanceID overrides the id read from IMDS (tests).
	InstanceID string

	// Notice is how an idle agent notices claims and releases; NoticeIMDSTags when empty.
	Notice NoticeMode
	// NoticeInterval is how often the notice looks: 50 ms for the IMDS tag (a link-local call that
	// costs nothing), 250 ms for polling.
	NoticeInterval time.Duration
	// FallbackInterval (imds-tags only) bounds the time between two record reads when no tag change
	// is seen (a lost wake.Notify, tags not visible in IMDS); 30 s.
	FallbackInterval time.Duration
	// SpotInterval is how often the agent looks for a spot interruption notice in instance metadata
	// (spot/instance-action); 5 s, as AWS advises.
	SpotInterval time.Duration

	// HeartbeatInterval is how often the heartbeat item is written; 5 min. It is a trace for
	// operators, not the liveness check: a claimed instance proves it is alive by acknowledging the
	// claim (store.Ack naming the run) as soon as it notices it, which costs nothing while idle.
	HeartbeatInterval time.Duration
	// PreRunnerScript is run once, at first boot, before anything else; none when empty.
	PreRunnerScript string
	// PreRunnerTimeout bounds the pre-runner script; 30 min.
	PreRunnerTimeout time.Duration

	// StateDir keeps the agent's own bookkeeping (which run the runner is configured for). Required.
	StateDir string
	// WorkDir is the runner's workspace (_work): emptied after every run. Required.
	WorkDir string
	// RunnerUser is the unprivileged user jobs run as: after every run its leftover processes are
	// killed and its files in TempDirs removed. Empty skips both (tests). A decimal number is taken
	// as a bare uid (tests: a throwaway uid with no account).
	RunnerUser string
	// RunnerDir is the runner's installation, checked against RunnerManifest (with RunnerManifest).
	RunnerDir string
	// RunnerManifest is the sha256sum-format manifest of every file of the installation in RunnerDir,
	// written root-only at install time (the user data). When set, the installation is pruned of the
	// runner user's files and verified before every registration and before and after every release;
	// a modified installation is never registered or pooled: the agent signals UD_REG_FAILED or
	// UD_REMOVE_REG_FAILED, and the control plane discards the instance. Empty when the runner driver
	// has no installation on the machine (the fake runner; agenttest's Installation gives simulated
	// instances a stand-in one).
	RunnerManifest string
	// TempDirs are directories (e.g. /tmp, /var/tmp) whose entries owned by RunnerUser are removed.
	TempDirs []string
	// CleanHome empties RunnerUser's home directory after every run (shell profiles, git and docker
	// credentials, caches a job left). Whatever every run needs belongs in system locations.
	CleanHome bool
	// Docker, when set, is the docker CLI: after every run all containers are removed and unused
	// volumes and networks pruned. Images stay (they are the warm pool's cache).
	Docker string

	// JobAccess is the runner class's job_access (declared.JobAccessUser, JobAccessDocker,
	// JobAccessRoot; "" is user): what the agent grants the runner user at first boot (posture.go).
	JobAccess string
	// Host applies the grant; OSHost{} (this machine) when nil.
	Host Host
	// RootlessDocker is the runner user's Docker daemon (JobAccess docker, docker.go): started
	// before every registration when it does not answer, and after every run killed with the
	// runner user's processes, started again and emptied of the job's containers, volumes and
	// networks. Required for JobAccess docker.
	RootlessDocker *RootlessDocker

	// Cache, when set, turns on the runner cache (cache.go): the runner class enables it.
	Cache *CacheOptions

	// Grace is added to the record's threshold before the instance terminates itself (refresh in the
	// control plane acts first, at the threshold); 2 min.
	Grace time.Duration
	// OrphanGrace is how long after boot the agent waits for its record to exist before it terminates
	// its instance as an orphan; 2 min.
	OrphanGrace time.Duration
	// CredentialWait is how long one look waits for a credential to appear in its item; 10 s. A
	// registration credential still missing then is looked for again, with back-off, for as long
	// as the record names the run (the control plane writes it once GitHub mints the token).
	CredentialWait time.Duration
	// RetryInterval is the pause between retries of failed reads and credential look-ups; 250 ms.
	RetryInterval time.Duration
	// PinWait bounds how long a registered runner waits for the control plane to pin the agent's
	// key in the instance record before it starts (pin.go); 2 min, four warm-pool convergence
	// passes. Past it the agent reports UD_REG_FAILED and never starts the runner.
	PinWait time.Duration
	// StopTimeout bounds waiting for the runner to stop; 1 min.
	StopTimeout time.Duration

	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger receives the agent's log; slog.Default() when nil.
	Logger *slog.Logger
	// OnRecord, when set, is called with every record the agent reads (tests and benchmarks).
	OnRecord func(store.Instance)
}

// withDefaults checks the configuration and returns it with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Host == nil {
		c.Host = OSHost{}
	}
	if c.Notice == "" {
		c.Notice = NoticeIMDSTags
	}
	errs := c.check()
	c.defaultIntervals()
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("agent configuration: %w", errors.Join(errs...))
	}
	return c, nil
}

// check returns every problem of the configuration (its notice mode defaulted first).
func (c Config) check() []error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("a store is required"))
	}
	if c.EC2 == nil {
		errs = append(errs, errors.New("an EC2 client is required"))
	}
	if c.IMDS == nil {
		errs = append(errs, errors.New("an instance metadata client is required"))
	}
	if c.NewRunner == nil {
		errs = append(errs, errors.New("a runner driver is required"))
	}
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("state directory %q must be an absolute path", c.StateDir))
	}
	if c.WorkDir == "" || !filepath.IsAbs(c.WorkDir) || filepath.Clean(c.WorkDir) == "/" {
		errs = append(errs, fmt.Errorf("work directory %q must be an absolute path below /", c.WorkDir))
	}
	if c.RunnerUser == "root" || c.RunnerUser == "0" {
		errs = append(errs, errors.New("the runner user must not be root"))
	}
	if c.RunnerManifest != "" {
		if !filepath.IsAbs(c.RunnerManifest) {
			errs = append(errs, fmt.Errorf("runner manifest %q must be an absolute path", c.RunnerManifest))
		}
		if c.RunnerDir == "" || !filepath.IsAbs(c.RunnerDir) || filepath.Clean(c.RunnerDir) == "/" {
			errs = append(errs, fmt.Errorf("runner directory %q must be an absolute path below / (a manifest is set)", c.RunnerDir))
		}
	}
	for _, d := range c.TempDirs {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("temporary directory %q must be an absolute path", d))
		}
	}
	if err := declared.ValidateJobAccess(c.JobAccess); err != nil {
		errs = append(errs, err)
	}
	if c.JobAccess == declared.JobAccessDocker && c.RootlessDocker == nil {
		errs = append(errs, errors.New("job access docker needs the runner user's rootless Docker daemon"))
	}
	if _, err := ParseNoticeMode(string(c.Notice)); err != nil {
		errs = append(errs, err)
	}
	if c.PreRunnerScript != "" && !filepath.IsAbs(c.PreRunnerScript) {
		errs = append(errs, fmt.Errorf("pre-runner script %q must be an absolute path", c.PreRunnerScript))
	}
	return errs
}

// defaultIntervals sets every interval, wait and timeout left unset to its default.
func (c *Config) defaultIntervals() {
	if c.Notice == NoticePoll {
		orDefault(&c.NoticeInterval, 250*time.Millisecond)
	}
	orDefault(&c.NoticeInterval, 50*time.Millisecond)
	orDefault(&c.FallbackInterval, 30*time.Second)
	orDefault(&c.SpotInterval, 5*time.Second)
	orDefault(&c.HeartbeatInterval, 5*time.Minute)
	orDefault(&c.PreRunnerTimeout, 30*time.Minute)
	orDefault(&c.Grace, 2*time.Minute)
	orDefault(&c.OrphanGrace, 2*time.Minute)
	orDefault(&c.CredentialWait, 10*time.Second)
	orDefault(&c.RetryInterval, 250*time.Millisecond)
	orDefault(&c.PinWait, 2*time.Minute)
	orDefault(&c.StopTimeout, time.Minute)
}

// orDefault sets *d to v when it is not set (zero or negative).
func orDefault(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}
