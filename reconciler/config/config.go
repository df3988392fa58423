// Package config is the configuration of `runnerpool serve`: every setting from a command-line flag
// or a RUNNERPOOL_* environment variable (a flag wins over the variable, the variable over the
// default), validated together so that one run lists every problem. The settings table in
// docs/reconciler.md is generated from the same list (Markdown), so the documentation cannot drift.
//
// AWS settings are not here: the AWS SDK's default chain (AWS_REGION, AWS_PROFILE, the instance or
// task role, AWS_ENDPOINT_URL_DYNAMODB and friends) configures the clients.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// Config is the reconciler's configuration.
type Config struct {
	Listen        string // address of the API (and of /metrics unless MetricsListen is set)
	MetricsListen string // optional separate address for /metrics, /healthz and /readyz
	Table         string
	DeploymentID  string
	ReplicaID     string // the lease holder name of this replica

	// EMFInterval, when set, writes the alerting metrics to stdout as CloudWatch embedded metric
	// format lines at this interval, under EMFNamespace (reconciler/metrics/emf).
	EMFInterval  time.Duration
	EMFNamespace string

	OIDCIssuer   string
	OIDCAudience string
	// CacheBucket, when set, is the S3 bucket of the runner cache (docs/cache.md): the API presigns
	// the instances' cache requests in it (POST /v1/cache/presign) with this replica's credentials.
	CacheBucket string
	// OIDCKeyRefetchInterval is the least time between two fetches of the issuer's key set caused
	// by tokens naming an unknown key id.
	OIDCKeyRefetchInterval time.Duration
	// TrustedProxies, when set, are the only peers whose X-Request-Id is adopted.
	TrustedProxies []netip.Prefix
	// Allowed are the repositories ("owner/repo") and owners ("owner") whose workflows may use
	// this deployment, lower-cased.
	Allowed []string

	GitHubAPIURL     string
	GitHubEnterprise string // slug: its downloads endpoint is a source of the runner release
	GitHubToken      string // secret: never logged
	GitHubAppID      int64
	GitHubAppKeyPEM  []byte // secret: never logged
	GitHubAppKeyFile string
	GitHubScopes     []string // where refresh looks for leftover runners; default Allowed
	// GitHubListingInterval and GitHubListingPages bound the runner listings that confirm
	// deregistrations (ghaccess.Config.ListingInterval, ListingPagesPerMinute).
	GitHubListingInterval time.Duration
	GitHubListingPages    int

	// ClassesFile, when set, is where runner and resource classes come from (Classes); otherwise
	// runner classes are the configuration items of the state table, and DefaultRunnerClass and
	// ResourceClasses say the rest.
	ClassesFile        string
	Classes            Classes
	DefaultRunnerClass string
	ResourceClasses    map[string]ResourceClass
	ConfigCacheTTL     time.Duration

	// PoolJobQueueURL enables warm pools: webhook routing, convergence and the pool worker.
	PoolJobQueueURL   string
	WebhookSecret     string // secret: never logged
	WebhookSecretFile string
	WarmPoolScope     string
	// DependabotPool is the warm pool a job with the bare label "dependabot" asks for; empty: none.
	DependabotPool string
	// OwnerRunners are the owners for which owner-level runner credentials may be minted (see
	// OwnerRunnerScopes).
	OwnerRunners []string

	// InstanceKeys is InstanceKeysARN or InstanceKeysID; AWSAccountID the account of the instance
	// ARNs (empty: STS GetCallerIdentity at start-up).
	InstanceKeys string
	AWSAccountID string

	RefreshSchedule  string
	ConvergeSchedule string
	JobTimeout       time.Duration
	LeaseName        string
	LeaseTTL         time.Duration

	IdleTime         time.Duration
	MaxIdleTime      time.Duration
	MaxBodyBytes     int64
	RequestTimeout   time.Duration
	ProvisionTimeout time.Duration
	ReleaseTimeout   time.Duration
	DrainTimeout     time.Duration
	RollbackTimeout  time.Duration

	CreatedTimeout        time.Duration
	RegistrationWait      time.Duration
	ClaimRegistrationWait time.Duration
	ClaimTimeout          time.Duration
	HeartbeatMaxAge       time.Duration // deprecated, ignored
	ClaimAckWait          time.Duration
	ReleaseSignalWait     time.Duration
	// AWSCallTimeout bounds each attempt of every AWS call (the SDK retries an attempt that timed out).
	AWSCallTimeout    time.Duration
	PollInterval      time.Duration
	ClaimPollInterval time.Duration
	OrphanGrace       time.Duration
	RunnerUpgradeLag  time.Duration // runnerversion.CheckLag: default 7 days, at most 28

	LogLevel          slog.Level
	DynamoDBSkipCRC32 bool

	Quotas Quotas // instance caps and per-repository limits (quotas.go)

	Dashboard Dashboard // the dashboard, prices and history (dashboard.go)
}

// enterpriseSlugRE is an enterprise's slug as GitHub's URLs carry it.
var enterpriseSlugRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,99}$`)

// LogValue keeps secrets out of logs.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("listen", c.Listen), slog.String("table", c.Table), slog.String("deployment_id", c.DeploymentID),
		slog.String("replica_id", c.ReplicaID), slog.String("oidc_issuer", c.OIDCIssuer), slog.String("oidc_audience", c.OIDCAudience),
		slog.Any("allowed", c.Allowed), slog.String("github_api_url", c.GitHubAPIURL), slog.String("github_auth", c.GitHubAuth()),
		slog.String("refresh_schedule", c.RefreshSchedule), slog.String("converge_schedule", c.ConvergeSchedule),
		slog.String("lease", c.LeaseName), slog.Duration("lease_ttl", c.LeaseTTL), slog.String("runner_classes", c.RunnerClassSource()),
		slog.Bool("warm_pools", c.WarmPools()), slog.String("warm_pool_scope", c.WarmPoolScope), slog.String("pool_job_queue", c.PoolJobQueueURL),
		slog.String("instance_keys", c.InstanceKeys),
	)
}

// RunnerClassSource says where runner classes come from: the file, or the state table.
func (c Config) RunnerClassSource() string {
	if c.ClassesFile != "" {
		return "file " + c.ClassesFile
	}
	return "state table"
}

// WarmPools reports whether warm pools are enabled: webhook routing, convergence and the pool
// worker, all through the pool job queue.
func (c Config) WarmPools() bool { return c.PoolJobQueueURL != "" }

// rollbackMargin is how much longer than the release-signal wait a rollback may take: the time
// its fallback (expiring an instance that never signalled) needs after that wait.
const rollbackMargin = 30 * time.Second

// Instance key modes (--instance-keys).
const (
	// InstanceKeysARN keys an instance's items by its ARN (INSTANCE#arn:aws:ec2:REGION:ACCOUNT:instance/ID),
	// so the runners' IAM role can confine each instance to its own items
	// (dynamodb:LeadingKeys = INSTANCE#${ec2:SourceInstanceARN}).
	InstanceKeysARN = "arn"
	// InstanceKeysID keys them by the bare instance id (the local stack, tests, the demo).
	InstanceKeysID = "id"
)

// GitHubAuth names the GitHub credential in use, without revealing it.
func (c Config) GitHubAuth() string {
	if c.GitHubAppID != 0 {
		return fmt.Sprintf("app %d", c.GitHubAppID)
	}
	if c.GitHubToken != "" {
		return "token"
	}
	return "none"
}

// setting is one configuration setting: its flag, environment variable, default and parser.
type setting struct {
	flag, env, def, doc string
	secret              bool // env only is documented for the value; the flag takes a file
	set                 func(c *Config, v string) error
}

// Settings, in the order of the documentation table.
var settings = []setting{
	{flag: "listen", env: "RUNNERPOOL_LISTEN", def: ":8080", doc: "Address of the HTTP API (host:port).",
		set: func(c *Config, v string) error { c.Listen = v; return checkAddr(v) }},
	{flag: "metrics-listen", env: "RUNNERPOOL_METRICS_LISTEN", doc: "Optional separate address for `/metrics`, `/healthz` and `/readyz`; empty serves them on the API address.",
		set: func(c *Config, v string) error {
			c.MetricsListen = v
			if v == "" {
				return nil
			}
			return checkAddr(v)
		}},
	{flag: "emf-interval", env: "RUNNERPOOL_EMF_INTERVAL",
		doc: "Write the metrics the alert rules read to stdout as CloudWatch embedded metric format lines at this interval (e.g. `60s`), for CloudWatch alarms where nothing scrapes `/metrics` (docs/alerts.md); empty: none.",
		set: func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			return duration(func(c *Config) *time.Duration { return &c.EMFInterval })(c, v)
		}},
	{flag: "emf-namespace", env: "RUNNERPOOL_EMF_NAMESPACE", def: "Runnerpool",
		doc: "CloudWatch namespace of the embedded metric format lines (`--emf-interval`); their dimension `Deployment` is the deployment id.",
		set: func(c *Config, v string) error {
			if len(v) < 1 || len(v) > 255 || strings.HasPrefix(v, "AWS/") {
				return fmt.Errorf("%q: 1-255 characters, not AWS/", v)
			}
			c.EMFNamespace = v
			return nil
		}},
	{flag: "table", env: "RUNNERPOOL_TABLE", doc: "DynamoDB state table (required).",
		set: func(c *Config, v string) error { c.Table = v; return required(v) }},
	{flag: "deployment-id", env: "RUNNERPOOL_DEPLOYMENT_ID", doc: "This deployment's id, tagged on every instance; destructive sweeps touch only instances carrying it (required).",
		set: func(c *Config, v string) error { c.DeploymentID = v; return required(v) }},
	{flag: "replica-id", env: "RUNNERPOOL_REPLICA_ID", doc: "Name of this replica as leader-lease holder; default host name, process id and a random suffix.",
		set: func(c *Config, v string) error { c.ReplicaID = v; return nil }},
	{flag: "oidc-issuer", env: "RUNNERPOOL_OIDC_ISSUER", def: "https://token.actions.githubusercontent.com",
		doc: "Issuer of the workflows' OIDC tokens: github.com's, `https://HOST/_services/token` for GHES, or the local issuer.",
		set: func(c *Config, v string) error { c.OIDCIssuer = v; return checkURL(v) }},
	{flag: "oidc-audience", env: "RUNNERPOOL_OIDC_AUDIENCE", doc: "Audience the tokens must carry (the workflow asks for it; required), e.g. the API URL.",
		set: func(c *Config, v string) error { c.OIDCAudience = v; return required(v) }},
	{flag: "cache-bucket", env: "RUNNERPOOL_CACHE_BUCKET",
		doc: "S3 bucket of the runner cache; when set, the API presigns runner classes' cache requests in it for the scope of the run each instance serves (docs/cache.md). The reconciler's role needs s3:GetObject, s3:PutObject, s3:DeleteObject (the hourly eviction pass) and s3:ListBucket on it; the instances' role needs nothing.",
		set: func(c *Config, v string) error { c.CacheBucket = v; return nil }},
	{flag: "oidc-key-refetch-interval", env: "RUNNERPOOL_OIDC_KEY_REFETCH_INTERVAL", def: "1m",
		doc: "Least time between two fetches of the issuer's key set caused by tokens naming a key id it lacks (a forged token can name any); at most 1h.",
		set: func(c *Config, v string) error {
			if err := duration(func(c *Config) *time.Duration { return &c.OIDCKeyRefetchInterval })(c, v); err != nil {
				return err
			}
			if c.OIDCKeyRefetchInterval > time.Hour {
				return fmt.Errorf("%q: at most 1h (a rotated key would be refused that long)", v)
			}
			return nil
		}},
	{flag: "allowed-repositories", env: "RUNNERPOOL_ALLOWED_REPOSITORIES", doc: "Comma-separated repositories (`owner/repo`) and owners (`owner`) whose workflows may provision (required).",
		set: func(c *Config, v string) error {
			c.Allowed = nil
			for _, e := range splitList(v) {
				if err := checkScope(e); err != nil {
					return err
				}
				c.Allowed = append(c.Allowed, strings.ToLower(e))
			}
			if len(c.Allowed) == 0 {
				return errors.New("at least one repository or owner is required")
			}
			return nil
		}},
	{flag: "github-api-url", env: "RUNNERPOOL_GITHUB_API_URL", def: "https://api.github.com/", doc: "GitHub REST API base: `https://HOST/api/v3/` for GHES.",
		set: func(c *Config, v string) error { c.GitHubAPIURL = v; return checkURL(v) }},
	{flag: "github-enterprise", env: "RUNNERPOOL_GITHUB_ENTERPRISE", def: "", doc: "Slug of the enterprise whose runner downloads endpoint is a source of the current runner release, read after the scopes' and before actions/runner's public releases. Only a classic PAT with `manage_runners:enterprise` can read it (GitHub Apps and fine-grained PATs cannot); empty: not read.",
		set: func(c *Config, v string) error {
			if v != "" && !enterpriseSlugRE.MatchString(v) {
				return fmt.Errorf("%q is not an enterprise slug (letters, digits and -)", v)
			}
			c.GitHubEnterprise = v
			return nil
		}},
	{flag: "github-token-file", env: "RUNNERPOOL_GITHUB_TOKEN_FILE", secret: true,
		doc: "File holding a personal access token for the reconciler alone. `RUNNERPOOL_GITHUB_TOKEN` may hold the token itself. Use a token or an app, not both.",
		set: func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			b, err := os.ReadFile(v)
			if err != nil {
				return err
			}
			c.GitHubToken = strings.TrimSpace(string(b))
			if c.GitHubToken == "" {
				return fmt.Errorf("%s is empty", v)
			}
			return nil
		}},
	{flag: "github-app-id", env: "RUNNERPOOL_GITHUB_APP_ID", doc: "GitHub App id (installation tokens are minted per owner).",
		set: func(c *Config, v string) error {
			if v == "" {
				c.GitHubAppID = 0
				return nil
			}
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("%q is not a positive number", v)
			}
			c.GitHubAppID = id
			return nil
		}},
	{flag: "github-app-key-file", env: "RUNNERPOOL_GITHUB_APP_KEY_FILE", secret: true, doc: "PEM file of the GitHub App's private key. `RUNNERPOOL_GITHUB_APP_KEY` may hold the PEM itself (an ECS task reads it from Secrets Manager).",
		set: func(c *Config, v string) error {
			c.GitHubAppKeyFile = v
			if v == "" {
				return nil
			}
			b, err := os.ReadFile(v)
			if err != nil {
				return err
			}
			c.GitHubAppKeyPEM = b
			return nil
		}},
	{flag: "github-scopes", env: "RUNNERPOOL_GITHUB_SCOPES", doc: "Comma-separated repositories and owners whose runner lists refresh checks for leftovers; default the allowed repositories.",
		set: func(c *Config, v string) error {
			c.GitHubScopes = nil
			for _, e := range splitList(v) {
				if err := checkScope(e); err != nil {
					return err
				}
				c.GitHubScopes = append(c.GitHubScopes, e)
			}
			return nil
		}},
	{flag: "github-listing-interval", env: "RUNNERPOOL_GITHUB_LISTING_INTERVAL", def: "2s",
		doc: "Least time between two runner listings of one repository or owner. A release confirms its runners' deregistration with a listing; every release of the scope that asks meanwhile shares the next one, so a scope's listings cost at most one per interval however many runners are released. A release may wait up to this long for it.",
		set: duration(func(c *Config) *time.Duration { return &c.GitHubListingInterval })},
	{flag: "github-listing-pages-per-minute", env: "RUNNERPOOL_GITHUB_LISTING_PAGES_PER_MINUTE", def: "300",
		doc: "Runner listing pages (100 runners each, one point of GitHub's secondary limit of 900 a minute) all scopes together may use per minute; past it listings wait and gather more releases each, rather than GitHub refusing them.",
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("%q: must be a positive whole number", v)
			}
			c.GitHubListingPages = n
			return nil
		}},
	{flag: "runner-classes-file", env: "RUNNERPOOL_RUNNER_CLASSES_FILE",
		doc: "JSON file of runner classes and resource classes (see below). Without it, runner classes are the ones the Terraform provider writes to the state table, re-read while the reconciler runs.",
		set: func(c *Config, v string) error {
			c.ClassesFile = v
			if v == "" {
				return nil
			}
			cl, err := LoadClasses(v)
			c.Classes = cl
			return err
		}},
	{flag: "default-runner-class", env: "RUNNERPOOL_DEFAULT_RUNNER_CLASS",
		doc: "Runner class of provisions that name none, when runner classes come from the state table (a runner classes file names its own `default_runner_class`).",
		set: func(c *Config, v string) error {
			c.DefaultRunnerClass = v
			if v == "" || classNameRE.MatchString(v) {
				return nil
			}
			return fmt.Errorf("%q: want a runner class name (lower-case letters, digits, '-' or '_')", v)
		}},
	{flag: "resource-classes", env: "RUNNERPOOL_RESOURCE_CLASSES",
		doc: "Named minimum sizes provisions may ask for, when runner classes come from the state table: comma-separated `NAME=VCPUS:MEMORY_MIB`, e.g. `small=2:4096,large=8:16384`.",
		set: func(c *Config, v string) error {
			rcs, err := parseResourceClasses(v)
			c.ResourceClasses = rcs
			return err
		}},
	{flag: "config-cache-ttl", env: "RUNNERPOOL_CONFIG_CACHE_TTL", def: "5s",
		doc: "How long runner classes and warm pools read from the state table are reused before the table is read again (a provision naming a runner class not seen yet reads it at once).",
		set: duration(func(c *Config) *time.Duration { return &c.ConfigCacheTTL })},
	{flag: "pool-job-queue-url", env: "RUNNERPOOL_POOL_JOB_QUEUE_URL",
		doc: "SQS queue of pool jobs. Setting it enables warm pools: `POST /v1/webhooks/github` routes workflow jobs labelled `pool=NAME` to it, every replica serves them from the warm pools, and the leader converges the pools. Needs a webhook secret.",
		set: func(c *Config, v string) error {
			c.PoolJobQueueURL = v
			if v == "" {
				return nil
			}
			return checkQueueURL(v)
		}},
	{flag: "webhook-secret-file", env: "RUNNERPOOL_WEBHOOK_SECRET_FILE", secret: true,
		doc: "File holding the GitHub webhook secret (`X-Hub-Signature-256`). `RUNNERPOOL_WEBHOOK_SECRET` may hold the secret itself. Required with `--pool-job-queue-url`.",
		set: func(c *Config, v string) error {
			c.WebhookSecretFile = v
			if v == "" {
				return nil
			}
			b, err := os.ReadFile(v)
			if err != nil {
				return err
			}
			c.WebhookSecret = strings.TrimSpace(string(b))
			if c.WebhookSecret == "" {
				return fmt.Errorf("%s is empty", v)
			}
			return nil
		}},
	{flag: "warm-pool-scope", env: "RUNNERPOOL_WARM_POOL_SCOPE",
		doc: "GitHub owner (or `owner/repo`) whose step-driven provisions may claim hot warm-pool instances too; empty: hot instances serve pool jobs only.",
		set: func(c *Config, v string) error {
			c.WarmPoolScope = strings.ToLower(strings.TrimSpace(v))
			if c.WarmPoolScope == "" {
				return nil
			}
			return checkScope(c.WarmPoolScope)
		}},
	{flag: "dependabot-pool", env: "RUNNERPOOL_DEPENDABOT_POOL", def: "dependabot",
		doc: "Warm pool that serves jobs labelled with the bare `dependabot` label (Dependabot's jobs on self-hosted runners), when that pool is configured; otherwise, or when empty, such jobs are left to whatever else serves them (never cancelled).",
		set: func(c *Config, v string) error {
			c.DependabotPool = strings.TrimSpace(v)
			if c.DependabotPool == "" {
				return nil
			}
			return declared.ValidateName(c.DependabotPool)
		}},
	{flag: "owner-runners", env: "RUNNERPOOL_OWNER_RUNNERS",
		doc: "Comma-separated owners (each also in the allowed repositories) for which owner-level (organisation) runner credentials may be minted; runner credentials for any other owner scope are refused. Default: the warm pool scope when it is an owner, else none.",
		set: func(c *Config, v string) error {
			c.OwnerRunners = nil
			for _, e := range splitList(v) {
				if err := checkScope(e); err != nil {
					return err
				}
				if strings.Contains(e, "/") {
					return fmt.Errorf("%q is a repository, not an owner", e)
				}
				c.OwnerRunners = append(c.OwnerRunners, strings.ToLower(e))
			}
			return nil
		}},
	{flag: "instance-keys", env: "RUNNERPOOL_INSTANCE_KEYS", def: InstanceKeysARN,
		doc: "How instance items are keyed: `arn` (`INSTANCE#<instance ARN>`: the runners' role can be confined to their own items) or `id` (`INSTANCE#<instance id>`: the local stack). Agents (the user data's `instance_keys`) must use the same.",
		set: func(c *Config, v string) error {
			c.InstanceKeys = v
			if v != InstanceKeysARN && v != InstanceKeysID {
				return fmt.Errorf("%q: want %s or %s", v, InstanceKeysARN, InstanceKeysID)
			}
			return nil
		}},
	{flag: "aws-account-id", env: "RUNNERPOOL_AWS_ACCOUNT_ID",
		doc: "AWS account of the instances, for `--instance-keys arn`; default: asked of STS (GetCallerIdentity) at start-up.",
		set: func(c *Config, v string) error {
			c.AWSAccountID = v
			if v == "" || accountRE.MatchString(v) {
				return nil
			}
			return fmt.Errorf("%q: want a 12-digit AWS account id", v)
		}},
	{flag: "refresh-schedule", env: "RUNNERPOOL_REFRESH_SCHEDULE", def: "@every 1m", doc: "Cron schedule of refresh (5 or 6 fields, seconds first when 6, or `@every DURATION`).",
		set: func(c *Config, v string) error { c.RefreshSchedule = v; return checkSchedule(v) }},
	{flag: "converge-schedule", env: "RUNNERPOOL_CONVERGE_SCHEDULE", def: "@every 30s", doc: "Cron schedule of warm-pool convergence.",
		set: func(c *Config, v string) error { c.ConvergeSchedule = v; return checkSchedule(v) }},
	{flag: "job-timeout", env: "RUNNERPOOL_JOB_TIMEOUT", def: "5m", doc: "Upper bound of one cron job run.",
		set: duration(func(c *Config) *time.Duration { return &c.JobTimeout })},
	{flag: "lease-name", env: "RUNNERPOOL_LEASE_NAME", def: "cron", doc: "Name of the leader lease in the table.",
		set: func(c *Config, v string) error { c.LeaseName = v; return required(v) }},
	{flag: "lease-ttl", env: "RUNNERPOOL_LEASE_TTL", def: "30s", doc: "Leader lease lifetime; renewed every third of it. A dead leader is replaced within about one TTL.",
		set: duration(func(c *Config) *time.Duration { return &c.LeaseTTL })},
	{flag: "idle-time", env: "RUNNERPOOL_IDLE_TIME", def: "15m", doc: "How long a released runner waits in the pool when neither the release nor its runner class says.",
		set: duration(func(c *Config) *time.Duration { return &c.IdleTime })},
	{flag: "max-idle-time", env: "RUNNERPOOL_MAX_IDLE_TIME", def: "24h", doc: "Largest idle time a release may ask for.",
		set: duration(func(c *Config) *time.Duration { return &c.MaxIdleTime })},
	{flag: "max-body-bytes", env: "RUNNERPOOL_MAX_BODY_BYTES", def: "65536", doc: "Largest request body accepted (413 beyond).",
		set: func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 64 || n > 16<<20 {
				return fmt.Errorf("%q: want a number of bytes between 64 and 16777216", v)
			}
			c.MaxBodyBytes = n
			return nil
		}},
	{flag: "trusted-proxies", env: "RUNNERPOOL_TRUSTED_PROXIES",
		doc: "Comma-separated addresses or CIDRs of the proxies (load balancers) in front of the API; when set, a well-formed `X-Request-Id` is adopted only from them. Empty: adopted from any caller when well-formed (`[A-Za-z0-9._-]`, at most 64).",
		set: func(c *Config, v string) error {
			c.TrustedProxies = nil
			for _, e := range splitList(v) {
				p, err := netip.ParsePrefix(e)
				if err != nil {
					a, aerr := netip.ParseAddr(e)
					if aerr != nil {
						return fmt.Errorf("%q: want an IP address or a CIDR", e)
					}
					p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
				}
				c.TrustedProxies = append(c.TrustedProxies, p.Masked())
			}
			return nil
		}},
	{flag: "request-timeout", env: "RUNNERPOOL_REQUEST_TIMEOUT", def: "30s", doc: "Time limit of reads (runs, pools).",
		set: duration(func(c *Config) *time.Duration { return &c.RequestTimeout })},
	{flag: "provision-timeout", env: "RUNNERPOOL_PROVISION_TIMEOUT", def: "10m", doc: "Time limit of one provision; past it the provision rolls back. A runner class whose boot takes longer than `registration-wait` (its image installs packages at boot, or its own `registration_wait`) gets the difference on top.",
		set: duration(func(c *Config) *time.Duration { return &c.ProvisionTimeout })},
	{flag: "release-timeout", env: "RUNNERPOOL_RELEASE_TIMEOUT", def: "5m", doc: "Time limit of one release.",
		set: duration(func(c *Config) *time.Duration { return &c.ReleaseTimeout })},
	{flag: "drain-timeout", env: "RUNNERPOOL_DRAIN_TIMEOUT", def: "60s", doc: "On SIGTERM, how long in-flight provisions and releases may finish before they are cancelled (and roll back).",
		set: duration(func(c *Config) *time.Duration { return &c.DrainTimeout })},
	{flag: "rollback-timeout", env: "RUNNERPOOL_ROLLBACK_TIMEOUT", def: "3m", doc: "Time limit of undoing a cancelled or failed provision. It must exceed `release-signal-wait` by at least 30s: handing a claimed runner back waits for its deregistration signal, and the fallback (expiring the instance) still needs time to run.",
		set: duration(func(c *Config) *time.Duration { return &c.RollbackTimeout })},
	{flag: "created-timeout", env: "RUNNERPOOL_CREATED_TIMEOUT", def: "5m", doc: "Threshold of a created instance (refresh terminates it after). A runner class whose boot takes longer than `registration-wait` gets the difference on top.",
		set: duration(func(c *Config) *time.Duration { return &c.CreatedTimeout })},
	{flag: "registration-wait", env: "RUNNERPOOL_REGISTRATION_WAIT", def: "180s", doc: "How long created instances have to register with GitHub when their image installs nothing at boot (prepared for the class, docs/guides/images.md). A runner class whose image installs packages at boot gets " + declared.FormatDuration(declared.AptLockWait+declared.InstallAllowance) + " more (apt's lock wait, " + declared.FormatDuration(declared.AptLockWait) + ", and the install); a class's own `registration_wait` replaces both.",
		set: duration(func(c *Config) *time.Duration { return &c.RegistrationWait })},
	{flag: "claim-registration-wait", env: "RUNNERPOOL_CLAIM_REGISTRATION_WAIT", def: "10s", doc: "How long a reused instance has to register for its new run.",
		set: duration(func(c *Config) *time.Duration { return &c.ClaimRegistrationWait })},
	{flag: "claim-timeout", env: "RUNNERPOOL_CLAIM_TIMEOUT", def: "5m", doc: "Threshold of the claimed state.",
		set: duration(func(c *Config) *time.Duration { return &c.ClaimTimeout })},
	{flag: "heartbeat-max-age", env: "RUNNERPOOL_HEARTBEAT_MAX_AGE", def: "15s", doc: "Deprecated and ignored: a claimed instance proves it is alive by acknowledging the claim (`claim-ack-wait`).",
		set: duration(func(c *Config) *time.Duration { return &c.HeartbeatMaxAge })},
	{flag: "claim-ack-wait", env: "RUNNERPOOL_CLAIM_ACK_WAIT", def: "5s", doc: "How long the agent of a claimed pooled instance has to acknowledge the claim (at most half of `claim-registration-wait`) before the instance is judged dead and discarded. Judged by the acknowledgement naming the run, not by clocks.",
		set: duration(func(c *Config) *time.Duration { return &c.ClaimAckWait })},
	{flag: "release-signal-wait", env: "RUNNERPOOL_RELEASE_SIGNAL_WAIT", def: "120s", doc: "How long a release (or a provision handing a claimed runner back) waits for an agent's deregistration signal before expiring the instance.",
		set: duration(func(c *Config) *time.Duration { return &c.ReleaseSignalWait })},
	{flag: "aws-call-timeout", env: "RUNNERPOOL_AWS_CALL_TIMEOUT", def: "30s", doc: "Time limit of each attempt of an AWS call, its answer included (the SDK retries an attempt that timed out). Above SQS's 20 s long poll.",
		set: duration(func(c *Config) *time.Duration { return &c.AWSCallTimeout })},
	{flag: "poll-interval", env: "RUNNERPOOL_POLL_INTERVAL", def: "250ms", doc: "How often agent signals and in-progress provisions are re-read.",
		set: duration(func(c *Config) *time.Duration { return &c.PollInterval })},
	{flag: "claim-poll-interval", env: "RUNNERPOOL_CLAIM_POLL_INTERVAL", def: "50ms", doc: "How often a claimed pooled instance's acknowledgement and registration are re-read: every interval is waited out by the job that asked for the runner (a strongly consistent GetItem each, about 40 for a 2 s registration).",
		set: duration(func(c *Config) *time.Duration { return &c.ClaimPollInterval })},
	{flag: "orphan-grace", env: "RUNNERPOOL_ORPHAN_GRACE", def: "2m", doc: "Age below which a tagged instance without a record is not yet an orphan.",
		set: duration(func(c *Config) *time.Duration { return &c.OrphanGrace })},
	{flag: "runner-upgrade-lag", env: "RUNNERPOOL_RUNNER_UPGRADE_LAG", def: "168h", doc: "How long after a new Actions runner release's publication (GitHub's published_at; first seen by the reconciler when actions/runner's public releases cannot be read) an idle instance still running an older runner may be handed to another run; past it the instance is retired at its hand-back (at once for a runner below GitHub's floor, or older than a release GitHub requires at once). At most 672h: GitHub stops assigning jobs to a runner 30 days after a newer release.",
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err == nil {
				d, err = runnerversion.CheckLag(d)
			}
			c.RunnerUpgradeLag = d
			return err
		}},
	quotaSettings[0], quotaSettings[1], quotaSettings[2],
	{flag: "log-level", env: "RUNNERPOOL_LOG_LEVEL", def: "info", doc: "debug, info, warn or error.",
		set: func(c *Config, v string) error { return c.LogLevel.UnmarshalText([]byte(v)) }},
	{flag: "dynamodb-skip-crc32", env: "RUNNERPOOL_DYNAMODB_SKIP_CRC32", def: "false", doc: "Skip the CRC32 check of DynamoDB responses (DynamoDB Local only).",
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			c.DynamoDBSkipCRC32 = b
			return err
		}},
}

// EnvGitHubToken holds the PAT itself (an alternative to --github-token-file).
const EnvGitHubToken = "RUNNERPOOL_GITHUB_TOKEN"

// EnvWebhookSecret holds the GitHub webhook secret itself (an alternative to --webhook-secret-file).
const EnvWebhookSecret = "RUNNERPOOL_WEBHOOK_SECRET"

// EnvGitHubAppKey holds the GitHub App's private key itself, PEM (an alternative to
// --github-app-key-file, for platforms that pass secrets as environment variables: ECS from Secrets
// Manager, on an image without a shell to write a file).
const EnvGitHubAppKey = "RUNNERPOOL_GITHUB_APP_KEY"

func duration(field func(c *Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("%q: must be positive", v)
		}
		*field(c) = d
		return nil
	}
}

func required(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("required")
	}
	return nil
}

func checkAddr(v string) error {
	if _, _, err := net.SplitHostPort(v); err != nil {
		return fmt.Errorf("%q: want host:port", v)
	}
	return nil
}

func checkURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q: want an http(s) URL", v)
	}
	return nil
}

var (
	ownerRE     = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)
	repoRE      = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	classNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	accountRE   = regexp.MustCompile(`^[0-9]{12}$`)
)

// checkQueueURL accepts an SQS queue URL: http(s), a host and a path.
func checkQueueURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return fmt.Errorf("%q: want an SQS queue URL such as https://sqs.eu-west-1.amazonaws.com/123456789012/runnerpool-jobs", v)
	}
	return nil
}

// parseResourceClasses reads "small=2:4096,large=8:16384".
func parseResourceClasses(v string) (map[string]ResourceClass, error) {
	entries := splitList(v)
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string]ResourceClass, len(entries))
	var errs []error
	for _, e := range entries {
		name, size, ok := strings.Cut(e, "=")
		cpu, mem, ok2 := strings.Cut(size, ":")
		c, cerr := strconv.Atoi(cpu)
		m, merr := strconv.Atoi(mem)
		switch {
		case !ok || !ok2 || cerr != nil || merr != nil || !classNameRE.MatchString(name):
			errs = append(errs, fmt.Errorf("%q: want NAME=VCPUS:MEMORY_MIB", e))
		case c < 0 || m < 0 || (c == 0 && m == 0):
			errs = append(errs, fmt.Errorf("%q: vCPUs and memory must not be negative, and not both zero", e))
		case hasClass(out, name):
			errs = append(errs, fmt.Errorf("%q: resource class %s is listed twice", e, name))
		default:
			out[name] = ResourceClass{CPU: c, MemoryMiB: m}
		}
	}
	return out, errors.Join(errs...)
}

func hasClass(m map[string]ResourceClass, name string) bool { _, ok := m[name]; return ok }

func checkScope(s string) error {
	owner, repo, hasRepo := strings.Cut(s, "/")
	if !ownerRE.MatchString(owner) || (hasRepo && (!repoRE.MatchString(repo) || repo == "." || repo == "..")) {
		return fmt.Errorf("%q: want owner or owner/repo", s)
	}
	return nil
}

func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
}

// ScheduleParser parses the cron schedules: 5 fields, 6 with seconds first, or a descriptor such
// as "@every 30s".
var ScheduleParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func checkSchedule(v string) error {
	_, err := ScheduleParser.Parse(v)
	return err
}

// usage is the setting's --help text. Go's flag package takes the first backquoted word of a usage
// text as the flag's argument name, so the documentation's backquotes (Markdown code in
// docs/reconciler.md) become plain quotes here, and the argument name is given on purpose: the kind
// of value, as Go prints it for its own flag types (duration, int, bool; string otherwise).
func (s setting) usage() string {
	help := strings.ReplaceAll(s.doc, "`", "'") + " [" + s.env + "]"
	if kind := s.kind(); kind != "string" {
		help += " (`" + kind + "`)"
	}
	return help
}

// kind is the kind of value the setting takes, read from its default: "duration", "int", "bool" or
// "string" (also for settings without a default).
func (s setting) kind() string {
	if _, err := strconv.Atoi(s.def); err == nil {
		return "int"
	}
	if _, err := strconv.ParseBool(s.def); err == nil {
		return "bool"
	}
	if _, err := time.ParseDuration(s.def); err == nil {
		return "duration"
	}
	return "string"
}

// ErrUsage marks a command line the flag parser refused (flag.ErrHelp for -h is wrapped too).
var ErrUsage = errors.New("usage")

// Load reads the configuration from args (flags, without the command name) and the environment
// (getenv, usually os.Getenv). A command line the flag parser refuses is an ErrUsage error;
// otherwise every problem of the settings is listed in one error.
func Load(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(usage)
	vals := make(map[string]*string, len(settings))
	for _, s := range settings {
		vals[s.flag] = fs.String(s.flag, s.def, s.usage())
	}
	fs.Usage = func() {
		fmt.Fprintln(usage, "Usage: runnerpool serve [flags]\n\nEvery flag can also be set with the environment variable in brackets; a flag wins.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%w: unexpected arguments: %q", ErrUsage, fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	var c Config
	var errs []error
	for _, s := range settings {
		v, from := s.def, "default"
		if e := getenv(s.env); e != "" {
			v, from = e, s.env
		}
		if given[s.flag] {
			v, from = *vals[s.flag], "--"+s.flag
		}
		if err := s.set(&c, v); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", s.flag, from, err))
		}
	}
	if tok := getenv(EnvGitHubToken); tok != "" {
		if c.GitHubToken != "" {
			errs = append(errs, fmt.Errorf("github token: both %s and --github-token-file are set", EnvGitHubToken))
		}
		c.GitHubToken = strings.TrimSpace(tok)
	}
	if sec := getenv(EnvWebhookSecret); sec != "" {
		if c.WebhookSecret != "" {
			errs = append(errs, fmt.Errorf("webhook secret: both %s and --webhook-secret-file are set", EnvWebhookSecret))
		}
		c.WebhookSecret = strings.TrimSpace(sec)
	}
	if key := getenv(EnvGitHubAppKey); key != "" {
		if c.GitHubAppKeyFile != "" {
			errs = append(errs, fmt.Errorf("github app key: both %s and --github-app-key-file are set", EnvGitHubAppKey))
		}
		c.GitHubAppKeyPEM = []byte(strings.TrimSpace(key) + "\n")
	}
	if c.ReplicaID == "" {
		c.ReplicaID = defaultReplicaID()
	}
	if err := c.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// validate checks settings against each other.
func (c Config) validate() error {
	var errs []error
	switch {
	case c.GitHubToken != "" && c.GitHubAppID != 0:
		errs = append(errs, errors.New("github: configure a token or an app, not both"))
	case c.GitHubToken == "" && c.GitHubAppID == 0:
		errs = append(errs, fmt.Errorf("github: a token (%s or --github-token-file) or an app (--github-app-id and --github-app-key-file) is required", EnvGitHubToken))
	case c.GitHubAppID != 0 && len(c.GitHubAppKeyPEM) == 0 && c.GitHubAppKeyFile == "":
		errs = append(errs, fmt.Errorf("github: --github-app-id needs the App's private key (--github-app-key-file or %s)", EnvGitHubAppKey))
	case c.GitHubAppID == 0 && len(c.GitHubAppKeyPEM) > 0:
		errs = append(errs, errors.New("github: an App private key is set but no --github-app-id"))
	}
	if c.LeaseTTL > 0 && c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("lease-ttl %s: at least 1s (renewal every third of it)", c.LeaseTTL))
	}
	if c.RollbackTimeout > 0 && c.RollbackTimeout < c.ReleaseSignalWait+rollbackMargin {
		errs = append(errs, fmt.Errorf("rollback-timeout %s: at least release-signal-wait %s plus %s, or a rollback's fallback runs on an expired deadline", c.RollbackTimeout, c.ReleaseSignalWait, rollbackMargin))
	}
	if c.IdleTime > 0 && c.MaxIdleTime > 0 && c.IdleTime > c.MaxIdleTime {
		errs = append(errs, fmt.Errorf("idle-time %s exceeds max-idle-time %s", c.IdleTime, c.MaxIdleTime))
	}
	if c.MetricsListen != "" && c.MetricsListen == c.Listen {
		errs = append(errs, errors.New("metrics-listen: must differ from listen (or be empty)"))
	}
	switch {
	case c.PoolJobQueueURL != "" && c.WebhookSecret == "":
		// An unauthenticated webhook endpoint would let anyone launch instances or cancel runs.
		errs = append(errs, fmt.Errorf("webhook: --pool-job-queue-url routes GitHub webhooks to warm pools and needs the webhook secret (%s or --webhook-secret-file)", EnvWebhookSecret))
	case c.PoolJobQueueURL == "" && c.WebhookSecret != "":
		errs = append(errs, errors.New("webhook: a webhook secret is set but no --pool-job-queue-url: webhooks are routed to warm pools through the pool job queue"))
	}
	for _, o := range c.OwnerRunners {
		if !slices.Contains(c.Allowed, o) {
			errs = append(errs, fmt.Errorf("owner-runners: owner %q is not in the allowed repositories", o))
		}
	}
	if c.WarmPoolScope != "" && c.PoolJobQueueURL == "" {
		errs = append(errs, errors.New("warm-pool-scope: warm pools are enabled by --pool-job-queue-url, which is not set"))
	}
	if c.ClassesFile != "" && (c.DefaultRunnerClass != "" || len(c.ResourceClasses) > 0) {
		errs = append(errs, errors.New("default-runner-class and resource-classes apply to runner classes from the state table: with --runner-classes-file, set default_runner_class and resource_classes in the file"))
	}
	errs = append(errs, c.validateDashboard(), c.validateQuotas())
	return errors.Join(errs...)
}

// OwnerRunnerScopes are the owners for which owner-level runner credentials may be minted:
// OwnerRunners, else the warm pool scope when it is an owner.
func (c Config) OwnerRunnerScopes() []string {
	if len(c.OwnerRunners) > 0 {
		return slices.Clone(c.OwnerRunners)
	}
	if c.WarmPoolScope != "" && !strings.Contains(c.WarmPoolScope, "/") {
		return []string{c.WarmPoolScope}
	}
	return nil
}

// Scopes is where refresh looks for leftover runners: GitHubScopes, else Allowed.
func (c Config) Scopes() []string {
	if len(c.GitHubScopes) > 0 {
		return slices.Clone(c.GitHubScopes)
	}
	return slices.Clone(c.Allowed)
}

// Markdown renders the settings as the table in docs/reconciler.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| Flag | Environment variable | Default | Meaning |\n|---|---|---|---|\n")
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", s.flag, s.env, def, s.doc)
	}
	return b.String()
}

func defaultReplicaID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "replica"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strconv.FormatInt(time.Now().UnixNano()%1e6, 36))
}
