// Package service assembles the reconciler: AWS clients from the SDK's default chain (so
// AWS_ENDPOINT_URL_* points it at the local stack), GitHub access (App or PAT), the domain's
// provisioner, releaser and refresher over one state table (runner classes from a file or from the
// table, classes.go; instance keys, keys.go), the HTTP API, the cron jobs run under the leader
// lease, and, with a pool job queue, warm pools: the webhook route, the pool worker and
// convergence (warm.go). `runnerpool serve` runs one Service; tests and the demo run several in
// one process, each with its own clients, listener and lease holder name.
//
// Shutdown (Run's context ends, e.g. SIGTERM): the API stops taking provisions and releases (503
// shutting_down, /readyz not ready), the cron jobs stop and the lease is released at once (renew
// nothing: another replica takes over), in-flight provisions and releases get the drain timeout to
// finish, then their context is cancelled and the provisioner rolls them back through its
// unsuccessful path; Run returns once they have answered.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/robfig/cron/v3"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/auth"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/leader"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics/emf"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
)

// Converger converges the warm pools once; *poolsize.Converger satisfies it.
type Converger interface {
	Converge(ctx context.Context) error
}

// Refresher runs one refresh pass; *refresh.Refresher satisfies it.
type Refresher interface {
	Run(ctx context.Context) (refresh.Report, error)
}

// Job names.
const (
	JobRefresh  = "refresh"
	JobConverge = "converge"
)

// Options are what the configuration does not say: injected clients and hooks.
type Options struct {
	// AWS is the SDK configuration; nil loads the default chain (environment, shared files,
	// instance role, AWS_ENDPOINT_URL_*).
	AWS *aws.Config
	// HTTPClient is the base of the GitHub and OIDC clients (default: 30 s timeout).
	HTTPClient *http.Client
	// Converger is the warm-pool convergence; nil: the service builds one over the state table's
	// warm pools when warm pools are enabled (--pool-job-queue-url), else convergence does nothing.
	Converger Converger
	// OnJob, if set, is called after every cron job run of the leader (tests and the demo watch
	// refresh and convergence with it).
	OnJob func(job string, err error)
	// AutoscaleNow, if set, is the autoscaled pools' policy clock instead of Now (the bench plays
	// a week of demand on it through the replica's own convergence).
	AutoscaleNow func() time.Time
	Logger       *slog.Logger
	Now          func() time.Time
	// EMFOut receives the embedded metric format lines (--emf-interval); nil: stdout, which the
	// ECS task's awslogs driver sends to CloudWatch Logs.
	EMFOut io.Writer
}

// Service is one reconciler replica, in named parts: what it was built from, the control plane it
// wired (controlplane.Components and the service's own runner classes, caps and launch template
// versions), the leadership and its cron jobs, the warm-pool workers, the HTTP servers, and the
// shutdown state.
type Service struct {
	cfg     config.Config
	o       Options
	log     *slog.Logger
	metrics *metrics.Metrics
	emf     *emf.Exporter // nil without --emf-interval
	store   *store.Store
	api     *api.API
	auth    *auth.Verifier

	domain
	leadership
	warmParts
	servers
	dashboard dashboardParts // dashboard.go
	shutdown
}

// domain is the control plane the replica serves with.
type domain struct {
	cp        *controlplane.Components
	refresher Refresher
	converger Converger
	classes   *classSource
	cache     *cacheUpkeep // nil without a cache bucket (cache_upkeep.go)
	pools     *poolQueues  // classes.go
	versions  *launchtemplate.Versions
	release   *runnerrelease.Cache         // runner_release.go; nil without GitHub scopes
	pins      atomic.Pointer[[]PinWarning] // runner_pins.go
	quotas    *quotas                      // quota.go
	ghCheck   permissionChecker            // the GitHub client, for the start-up check (ghcheck.go)
}

// leadership is the leader lease and the cron jobs run under it (cron.go).
type leadership struct {
	elector *leader.Elector
	cron    *cron.Cron
	jobs    map[string]cron.Job // wrapped with the chain (SkipIfStillRunning, Recover)
	kicked  sync.WaitGroup      // job runs started on gaining the lease
}

// warmParts are the warm pools' webhook endpoint, pool worker and scale set listeners (nil unless
// --pool-job-queue-url is set; warm.go, scalesets.go).
type warmParts struct {
	webhook    http.Handler
	worker     *pooljob.Worker
	workerStop context.CancelFunc // stops receiving pool jobs
	workerDone chan struct{}      // closed when the worker returned
	// rerunProv is the API's provisioner, which serves the worker's re-run jobs (set once built).
	rerunProv     api.Provisioner
	scaleSets     *scalesets.Manager
	scaleSetsStop context.CancelFunc
	scaleSetsDone chan struct{}
}

// servers are the API's and the operations endpoints' servers and listeners.
type servers struct {
	srv, opsSrv *http.Server
	ln, opsLn   net.Listener
}

// shutdown is the state of in-flight work and of a stop.
type shutdown struct {
	work       context.Context
	cancelWork context.CancelFunc

	mu        sync.Mutex
	abandoned bool
	ready     readyCache
}

// clients are the replica's connections: the state table, EC2, SQS and GitHub, with the AWS
// configuration they came from.
type clients struct {
	aws aws.Config
	db  *dynamodb.Client
	ec2 *ec2.Client
	sqs *sqs.Client
	gh  *ghaccess.Client
}

// New builds a replica from the configuration and starts listening (so Addr is known), but serves
// nothing until Run.
func New(ctx context.Context, cfg config.Config, o Options) (_ *Service, err error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	s := &Service{cfg: cfg, o: o, log: o.Logger}
	s.converger, s.jobs = o.Converger, map[string]cron.Job{}
	cl, err := s.connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	price, err := s.wire(ctx, cfg, cl)
	if err != nil {
		return nil, err
	}
	s.work, s.cancelWork = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.cancelWork()
		}
	}()
	if err := s.setupAPI(ctx, cfg, cl, price); err != nil {
		return nil, err
	}
	if err := s.setupLeadership(cfg); err != nil {
		return nil, err
	}
	if err := s.listen(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// connect makes the replica's clients: every AWS call counted and bounded by the call timeout,
// the state table with its instance keys, GitHub access (App or PAT) for the allow-list.
func (s *Service) connect(ctx context.Context, cfg config.Config) (clients, error) {
	var cl clients
	if s.o.AWS != nil {
		cl.aws = s.o.AWS.Copy()
	} else {
		var err error
		if cl.aws, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
			return clients{}, fmt.Errorf("loading the AWS configuration: %w", err)
		}
	}
	// Every attempt of every AWS call has a deadline: an answer that hangs fails the attempt, which
	// the SDK retries, bounded by the caller's deadline.
	cl.aws.HTTPClient = awslimit.CallTimeout(cl.aws.HTTPClient, cfg.AWSCallTimeout)
	// Every AWS call of every client is counted by service, operation and result.
	s.metrics = metrics.New(metrics.Options{Replica: cfg.ReplicaID, Logger: s.log, PoolCounts: s.poolSamples})
	if cfg.EMFInterval > 0 {
		out := s.o.EMFOut
		if out == nil {
			out = os.Stdout
		}
		var err error
		s.emf, err = emf.New(emf.Options{Gatherer: s.metrics.Registry(), Namespace: cfg.EMFNamespace,
			Dimensions: map[string]string{emf.DeploymentDimension: cfg.DeploymentID}, Out: out, Now: s.o.Now, Logger: s.log})
		if err != nil {
			return clients{}, err
		}
	}
	cl.aws.APIOptions = append(cl.aws.APIOptions, s.metrics.AWSMiddleware)
	cl.db = dynamodb.NewFromConfig(cl.aws, func(do *dynamodb.Options) {
		do.DisableValidateResponseChecksum = cfg.DynamoDBSkipCRC32
	})
	keyPrefix, err := instanceKeyPrefix(ctx, cfg, cl.aws, sts.NewFromConfig(cl.aws))
	if err != nil {
		return clients{}, err
	}
	s.store = store.New(cl.db, cfg.Table, store.WithClock(s.o.Now), store.WithInstanceKeyPrefix(keyPrefix),
		store.WithForeignItems(s.metrics.ForeignItems), store.WithLogger(s.log))
	cl.sqs = sqs.NewFromConfig(cl.aws)
	cl.ec2 = ec2.NewFromConfig(cl.aws, awslimit.WithEC2Limits(awslimit.Default()))
	cl.gh, err = ghaccess.New(ghaccess.Config{
		APIURL: cfg.GitHubAPIURL, Token: cfg.GitHubToken, AppID: cfg.GitHubAppID, PrivateKeyPEM: cfg.GitHubAppKeyPEM,
		HTTPClient:      &http.Client{Timeout: s.o.HTTPClient.Timeout, Transport: s.metrics.GitHubTransport(s.o.HTTPClient.Transport)},
		Logger:          s.log,
		ListingInterval: cfg.GitHubListingInterval, ListingPagesPerMinute: cfg.GitHubListingPages,
		// Runner credentials only for the deployment's allow-list (owner-level ones where configured).
		Allowed: cfg.Allowed, OwnerRunners: cfg.OwnerRunnerScopes(),
	})
	if err != nil {
		return clients{}, err
	}
	s.ghCheck = cl.gh
	return cl, nil
}

// wire builds the control plane through the composition root (internal/controlplane): the
// service's runner classes (classes.go), instance caps (quota.go) and launch template versions
// around it. It returns the price book (the cost reports' and the autoscaled pools' prices).
func (s *Service) wire(ctx context.Context, cfg config.Config, cl clients) (history.Pricer, error) {
	s.newRunnerRelease(cfg, cl.gh)
	s.quotas = newQuotas(cfg, cl.db, s.store, func(class string) int { return s.classes.classMax(class) }, s.o.Now, s.log)
	s.quotas.timeout = func(ctx context.Context, base time.Duration, class string) time.Duration {
		return s.classes.ProvisionTimeout(ctx, base, class)
	}
	// One launch template version per runner class spec, shared by provisions and warm pools.
	s.versions = launchtemplate.New(cl.ec2, launchtemplate.Options{Now: s.o.Now, Logger: s.log, Release: s.currentRelease, RegistrationWait: cfg.RegistrationWait})
	s.pools = &poolQueues{sqs: cl.sqs, opts: pool.ScopeOptions{Now: s.o.Now, Logger: s.log}}
	price := Pricer(cfg, cl.aws, cl.ec2, s.o.Now, s.log)
	// The runner classes' rules are read when a release or a pass asks: s.classes is made by the
	// Classes step, before either exists.
	cp, err := controlplane.New(controlplane.Clients{Store: s.store, EC2: cl.ec2, SQS: cl.sqs, GitHub: cl.gh}, controlplane.Options{
		DeploymentID: cfg.DeploymentID, Now: s.o.Now, Logger: s.log, Capacity: s.quotas.caps,
		Claim: claim.Options{
			ClaimTimeout: cfg.ClaimTimeout, AckWait: cfg.ClaimAckWait, RegistrationWait: cfg.ClaimRegistrationWait,
			PollInterval: cfg.PollInterval, ClaimPollInterval: cfg.ClaimPollInterval,
		},
		Provision: provision.Options{PollInterval: cfg.PollInterval, RollbackTimeout: cfg.RollbackTimeout,
			Pickup: pool.PickupOptions{OnDrop: s.metrics.PoolMessageDropped}},
		Release: release.Options{
			SignalWait: cfg.ReleaseSignalWait, PollInterval: cfg.PollInterval, OnSpotInterruption: s.metrics.SpotInterruption,
			OnReleased: s.cacheReport, Reuse: func(class string) (string, error) { return s.classes.Reuse(class) }, JobAccess: s.jobAccess, RunnerDue: s.runnerDue,
		},
		Refresh: refresh.Options{
			OrphanGrace: cfg.OrphanGrace, Scopes: cfg.Scopes(), JobAccess: s.jobAccess, RunnerDue: s.runnerDue,
			TakeOver: func(ctx context.Context, key string) (bool, error) { return s.classes.TakeOverAbandoned(ctx, key) },
		},
		Classes: func(newProv controlplane.NewProvisioner) (pool.Resolver, error) {
			if err := s.setupClasses(ctx, cfg, s.pools.get, func(classes map[string]runnerclass.Resolved, resources map[string]provision.ResourceClass, def string) *provision.Provisioner {
				return newProv(provision.Config{
					ResourceClasses: resources, RunnerClasses: classes, DefaultRunnerClass: def,
					CreatedTimeout: cfg.CreatedTimeout, RegistrationWait: cfg.RegistrationWait,
				})
			}); err != nil {
				return nil, err
			}
			return s.classes, nil
		},
		Warm: s.warmOptions(cfg, cl, price),
	})
	if err != nil {
		return nil, err
	}
	s.cp, s.refresher = cp, cp.Refresher
	if cfg.WarmPools() {
		if err := s.setupWarmPools(cfg, cl); err != nil {
			return nil, err
		}
	}
	return price, nil
}

// cacheReport counts what an agent's cache server reports of a run at its release (signed).
func (s *Service) cacheReport(_, detail string) {
	if st, ok := cache.ParseReport(detail); ok {
		s.metrics.CacheReport(st.LocalHits, st.RemoteHits, st.Misses, st.BytesServed, st.BytesSaved)
	}
}

// jobAccess is the runner classes' job access rule, read when asked.
func (s *Service) jobAccess(class string) (string, bool) { return s.classes.JobAccess(class) }

// setupAPI builds the OIDC verifier, the dashboard and history, the quota and history decorators
// of provisions and releases, and the API over them.
func (s *Service) setupAPI(ctx context.Context, cfg config.Config, cl clients, price history.Pricer) (err error) {
	s.auth, err = auth.New(auth.Config{
		Issuer: cfg.OIDCIssuer, Audience: cfg.OIDCAudience, Allowed: cfg.Allowed, HTTPClient: s.o.HTTPClient, Now: s.o.Now, Logger: s.log,
		RefetchInterval: cfg.OIDCKeyRefetchInterval,
	})
	if err != nil {
		return err
	}
	prov, relr, err := s.setupDashboard(cfg, cl.db, price, s.classes, s.cp.Releaser)
	if err != nil {
		return err
	}
	if err := s.quotas.checkWarmPools(ctx, s.store, cfg.WarmPools()); err != nil {
		return err
	}
	prov, relr = quotaProvisioner{next: prov, q: s.quotas}, quotaReleaser{next: relr, q: s.quotas}
	s.rerunProv = prov
	s.cache = newCacheUpkeep(cfg, cl.aws)
	s.api, err = api.New(api.Options{
		Provisioner: prov, Releaser: relr, Runs: s.classes, Store: s.store, Auth: s.auth, Metrics: s.metrics, Logger: s.log, Work: s.work,
		MaxBodyBytes: cfg.MaxBodyBytes, TrustedProxies: cfg.TrustedProxies, RequestTimeout: cfg.RequestTimeout, ProvisionTimeout: cfg.ProvisionTimeout,
		ReleaseTimeout: cfg.ReleaseTimeout, IdleTime: cfg.IdleTime, MaxIdleTime: cfg.MaxIdleTime,
		RunnerClassIdleTime: s.classes.idleTime, DefaultRunnerClass: s.classes.def, Webhook: s.webhook,
		RunnerClassProvisionTimeout: func(ctx context.Context, class string) time.Duration {
			return s.classes.ProvisionTimeout(ctx, cfg.ProvisionTimeout, class)
		},
		Ready: s.readiness, Now: s.o.Now, Cache: cacheAuthority(cfg, cl.aws), CacheRequests: cacheRequests{s},
		DefaultBranches: cl.gh, CacheLimits: s.classes.cacheLimits, CacheUses: s.cacheUses(),
	})
	return err
}

// cacheAuthority is the runner cache's presigner (nil without a bucket): the replica's own
// credentials, the S3 endpoint of AWS_ENDPOINT_URL_S3 where set (an emulator, path-style).
func cacheAuthority(cfg config.Config, a aws.Config) *cache.Authority {
	if cfg.CacheBucket == "" {
		return nil
	}
	return &cache.Authority{Bucket: cfg.CacheBucket, Region: a.Region, Endpoint: os.Getenv("AWS_ENDPOINT_URL_S3"), Credentials: a.Credentials}
}

// setupLeadership builds the leader lease and schedules the cron jobs under it.
func (s *Service) setupLeadership(cfg config.Config) (err error) {
	s.elector, err = leader.New(s.store, leader.Options{
		Name: cfg.LeaseName, Holder: cfg.ReplicaID, TTL: cfg.LeaseTTL, Now: s.o.Now, Logger: s.log, OnChange: s.leadershipChanged,
		OnError: func(error) { s.metrics.Error(metrics.ErrLease) },
	})
	if err != nil {
		return err
	}
	return s.schedule()
}

// listen opens the API's, the operations endpoints' and the dashboard's listeners.
func (s *Service) listen(cfg config.Config) (err error) {
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	s.srv = &http.Server{
		// No ReadTimeout or WriteTimeout: a provision may take minutes. Headers have their own
		// limit, bodies a per-request read deadline (package api).
		Handler: s.api.Handler(cfg.MetricsListen == ""), ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: errLog,
	}
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	if cfg.MetricsListen != "" {
		s.opsSrv = &http.Server{Handler: s.api.OpsHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute, ErrorLog: errLog}
		if s.opsLn, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			_ = s.ln.Close()
			return fmt.Errorf("listening on %s: %w", cfg.MetricsListen, err)
		}
	}
	return s.listenDashboard(cfg)
}

// Components are the replica's wired control plane (the composition root's): the bench and tests
// drive its parts, e.g. a convergence pass, as the replica's own jobs do.
func (s *Service) Components() *controlplane.Components { return s.cp }

// URL is the base URL of the API, e.g. http://127.0.0.1:8080.
func (s *Service) URL() string { return "http://" + s.ln.Addr().String() }

// OpsURL is the base URL of /metrics, /healthz and /readyz.
func (s *Service) OpsURL() string {
	if s.opsLn != nil {
		return "http://" + s.opsLn.Addr().String()
	}
	return s.URL()
}

// Metrics is the replica's metrics.
func (s *Service) Metrics() *metrics.Metrics { return s.metrics }

// Leading reports whether this replica holds the leader lease now.
func (s *Service) Leading() bool {
	_, ok := s.elector.Leading()
	return ok
}

// Abandon makes Run stop like a crashed process as far as others can tell: the lease is not
// released (another replica takes over once it expires) and in-flight work is cancelled at once,
// without a drain. For tests and demos of failover.
func (s *Service) Abandon() {
	s.mu.Lock()
	s.abandoned = true
	s.mu.Unlock()
	s.elector.Abandon()
}

// Run serves until ctx ends, then shuts down gracefully (see the package comment). It returns the
// error that stopped the server, if one did.
func (s *Service) Run(ctx context.Context) error {
	if err := s.checkRunnerRelease(ctx); err != nil { // runner_release.go
		s.closeListeners()
		return err
	}
	serveErr := make(chan error, 3)
	s.serveDashboard(serveErr)
	go func() { serveErr <- s.srv.Serve(s.ln) }()
	if s.opsSrv != nil {
		go func() { serveErr <- s.opsSrv.Serve(s.opsLn) }()
	}
	leadCtx, stopLeading := context.WithCancel(context.Background())
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		s.elector.Run(leadCtx)
	}()
	s.cron.Start()
	s.startWorker()
	s.startScaleSets()
	go s.checkGitHubPermissions(leadCtx, s.ghCheck) // ghcheck.go
	go s.refreshRelease(leadCtx)                    // runner_release.go
	if s.emf != nil {
		go s.emf.Run(leadCtx, s.cfg.EMFInterval)
	}
	s.log.Info("reconciler serving", "url", s.URL(), "config", s.cfg)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("serving: %w", err)
		}
	}

	s.mu.Lock()
	abandoned := s.abandoned
	s.mu.Unlock()
	s.log.Info("reconciler shutting down", "abandoned", abandoned, "in_flight", s.api.InFlight())
	s.api.Drain()
	s.stopWorker()
	s.stopScaleSets(abandoned)
	// Cron first: no new job starts; leadership ends, which cancels the running ones; the lease
	// is released so another replica takes the jobs over now rather than after the TTL.
	cronStopped := s.cron.Stop()
	stopLeading()
	<-leaderDone
	cronDone := make(chan struct{})
	go func() {
		<-cronStopped.Done()
		s.kicked.Wait()
		close(cronDone)
	}()
	select {
	case <-cronDone:
	case <-time.After(30 * time.Second):
		s.log.Warn("a cron job did not stop within 30s of cancellation")
	}

	s.drain(abandoned)
	s.cancelWork()
	s.log.Info("reconciler stopped")
	return runErr
}

// drain gives in-flight provisions, releases and the pool worker's batch the drain timeout (none
// when abandoned), then cancels them and waits for their roll-back.
func (s *Service) drain(abandoned bool) {
	drain := s.cfg.DrainTimeout
	if abandoned {
		drain = 0
	}
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	err := s.shutdownServers(dctx)
	werr := s.waitWorker(dctx)
	cancel()
	if err != nil || werr != nil {
		// The drain timeout passed with provisions, releases or a pool-job batch still running:
		// cancel them. The provisioner rolls back (claimed instances back to the pool, created
		// ones terminated) and the handlers answer what was undone; the pool worker hands its
		// jobs back to the queue. Wait for that.
		s.log.Warn("drain timeout passed; cancelling in-flight operations", "in_flight", s.api.InFlight(), "pool_worker_busy", werr != nil)
		s.cancelWork()
		wctx, wcancel := context.WithTimeout(context.Background(), s.cfg.RollbackTimeout+30*time.Second)
		if werr := s.api.Wait(wctx); werr != nil {
			s.log.Error("in-flight operations did not finish rolling back", "in_flight", s.api.InFlight(), "error", werr)
		}
		if werr := s.waitWorker(wctx); werr != nil {
			s.log.Error("the pool worker did not hand its jobs back", "error", werr)
		}
		wcancel()
		if err != nil {
			// Let the answers written by now reach their clients before closing.
			fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.shutdownServers(fctx)
			fcancel()
			_ = s.srv.Close()
			if s.opsSrv != nil {
				_ = s.opsSrv.Close()
			}
		}
	}
}

func (s *Service) shutdownServers(ctx context.Context) error {
	var errs []error
	if s.opsSrv != nil {
		errs = append(errs, s.opsSrv.Shutdown(ctx))
	}
	errs = append(errs, s.srv.Shutdown(ctx), s.shutdownDashboard(ctx))
	return errors.Join(errs...)
}

// readyCache keeps the last store check for a few seconds: a probe every second must not read
// the table every second.
type readyCache struct {
	at  time.Time
	err error
}

const readyCacheTTL = 5 * time.Second

func (s *Service) readiness(ctx context.Context) apiv1.ReadyResponse {
	st := s.elector.Status()
	resp := apiv1.ReadyResponse{
		Ready: true, Replica: s.cfg.ReplicaID, Leader: st.Leading, Checks: map[string]string{},
		Lease: &apiv1.LeaseStatus{Name: st.Name, Holder: st.Holder, ExpiresAt: st.ExpiresAt},
	}
	s.mu.Lock()
	cached := s.ready
	s.mu.Unlock()
	if time.Since(cached.at) > readyCacheTTL {
		_, err := s.store.CurrentLease(ctx, s.cfg.LeaseName)
		if errors.Is(err, store.ErrNotFound) {
			err = nil
		}
		cached = readyCache{at: time.Now(), err: err}
		s.mu.Lock()
		s.ready = cached
		s.mu.Unlock()
	}
	resp.Checks["dynamodb"] = "ok"
	if cached.err != nil {
		resp.Ready, resp.Checks["dynamodb"] = false, cached.err.Error()
	}
	resp.Checks["oidc"] = "ok"
	if err := s.auth.Ready(ctx); err != nil {
		resp.Ready, resp.Checks["oidc"] = false, err.Error()
	}
	s.pinChecks(resp.Checks) // runner_pins.go
	resp.Checks["lease"] = "follower"
	if st.Leading {
		resp.Checks["lease"] = "leader"
	}
	if st.LastError != nil {
		resp.Checks["lease"] = "error: " + st.LastError.Error()
	}
	return resp
}

// poolSamples feeds the pool gauges: brief records (class, pool, state are all it counts), so a
// scrape at 20,000 instances reads about half the bytes of the full records.
func (s *Service) poolSamples(ctx context.Context) ([]metrics.PoolSample, error) {
	live, err := s.store.LiveBrief(ctx)
	if err != nil {
		return nil, err
	}
	var out []metrics.PoolSample
	for _, p := range api.Pools(live, "", time.Now()).Pools {
		for state, n := range p.States {
			out = append(out, metrics.PoolSample{RunnerClass: p.RunnerClass, Pool: p.Pool, State: state, Count: n})
		}
	}
	return out, nil
}
