// Warm pools in the reconciler (seed 002), enabled by --pool-job-queue-url: the GitHub webhook
// endpoint (POST /v1/webhooks/github, every replica) routes workflow jobs labelled pool=NAME to the
// pool job queue; the pool worker (every replica) serves them from the warm pools, hot instances
// first, then stopped ones, then cold starts; the converger (the leader's converge cron job) keeps
// each pool at its schedule's size. Pools and runner classes are the configuration items the
// Terraform provider writes to the state table; the webhook and the worker read them through a
// catalog cached for --config-cache-ttl, the converger reads them on every pass.
//
// The worker stops like provisions do on shutdown: it receives no new batch once the service drains,
// the batch it holds has the drain timeout to finish, then it is cancelled and hands its jobs back to
// the queue (another replica serves them).
package service

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"

	tableconfig "github.com/runnerpool/terraform-provider-runnerpool/internal/config"
)

// warmDeps are the clients and domain objects the warm-pool components share with the rest.
type warmDeps struct {
	sqs     *sqs.Client
	ec2     *ec2.Client
	fleet   *fleet.Fleet
	starter *claim.Starter
	reg     *claim.Registrar
	gh      *ghaccess.Client
	rel     *release.Releaser
	price   history.Pricer // the price book (price file first): an autoscaled pool's prices
}

// setupWarmPools builds the converger (unless Options.Converger gave one), the pool worker and the
// webhook handler.
func (s *Service) setupWarmPools(cfg config.Config, d warmDeps) error {
	targets := warmpool.ConfigTargets(tableconfig.NewRepository(s.store), warmpool.ConfigOptions{
		Queue: s.pools.get, Scope: cfg.WarmPoolScope,
		ResourceClasses: warmSizes(cfg), Versions: s.versions,
	})
	catalog := warmpool.NewCatalog(targets, cfg.ConfigCacheTTL, s.o.Now)
	jobs := warmpool.NewJobQueue(d.sqs, cfg.PoolJobQueueURL, s.store)
	if s.converger == nil {
		conv, err := warmpool.NewConverger(s.store, d.ec2, d.fleet, targets, warmpool.Options{
			DeploymentID: cfg.DeploymentID, Jobs: jobs, Now: s.o.Now, Logger: s.log.With("component", "converger"),
			Capacity: s.quotas.caps, OnCapped: s.metrics.QuotaRefused,
			Autoscale: warmpool.AutoscaleOptions{Store: s.store, Price: warmpool.PriceFunc(d.price)},
			OnAutoscale: func(pr warmpool.PoolReport) {
				a := pr.Autoscale
				s.metrics.Autoscale(pr.Pool, pr.TargetHot, pr.TargetStopped, a.WindowHot, a.WindowStopped, a.Forecast, a.Conflict != "")
				s.metrics.AutoscaleQueue(pr.Pool, time.Duration(a.QueueP95MS)*time.Millisecond, a.QueueJobs, time.Duration(a.GoalMS)*time.Millisecond)
			},
		})
		if err != nil {
			return err
		}
		s.converger = conv
	}
	ss, err := s.setupScaleSets(cfg, d.gh, jobs)
	if err != nil {
		return err
	}
	s.scaleSets = ss
	jobs.WithdrawRunners(ss)
	w, err := warmpool.NewWorker(warmpool.WorkerConfig{
		Store: s.store, EC2: d.ec2, Fleet: d.fleet, Starter: d.starter, Discarder: d.reg, GitHub: d.gh, Jobs: jobs, Pools: catalog,
		ScaleSets:    ss,
		DeploymentID: cfg.DeploymentID, Capacity: s.quotas.caps,
		Recycle: func(ctx context.Context, runID string, idleTime time.Duration) error {
			_, err := d.rel.Release(ctx, runID, idleTime)
			return err
		},
		Rerun:        func(ctx context.Context, j warmpool.Job) error { return s.serveRerun(ctx, cfg.ProvisionTimeout, j) },
		ClaimTimeout: cfg.ClaimTimeout, CreatedTimeout: cfg.CreatedTimeout, Now: s.o.Now, Logger: s.log.With("component", "pool_worker"),
	})
	if err != nil {
		return err
	}
	h, err := webhook.New(webhook.Config{
		Secret: cfg.WebhookSecret, Deliveries: s.store, Pools: catalog, Jobs: jobs, GitHub: d.gh, Logger: s.log.With("component", "webhook"),
		DependabotPool: cfg.DependabotPool, OnLeftAlone: s.metrics.WebhookJobLeftAlone, Reruns: true,
		// s.auth is built after the warm pools; read it at delivery time.
		Allowed: func(repository string) bool { return s.auth.AllowsRepository(repository) },
	})
	if err != nil {
		return err
	}
	s.worker, s.webhook = w, h
	return nil
}

// serveRerun serves a re-run's job (warmpool.Job.Rerun) with the API's provisioner, quota checks
// included, within the provision timeout.
func (s *Service) serveRerun(ctx context.Context, timeout time.Duration, j warmpool.Job) error {
	if s.rerunProv == nil {
		return errors.New("the provisioner is not built yet")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := provision.ServeRerun(ctx, s.store, s.rerunProv, provision.Rerun{
		RepositoryID: strconv.FormatInt(j.RepositoryID, 10), RunID: strconv.FormatInt(j.RunID, 10),
		Attempt: int(j.RunAttempt), Labels: j.Labels,
	})
	if err != nil {
		return err
	}
	s.log.Info("re-run job served", "job", j.JobID, "run", j.RunID, "attempt", j.RunAttempt, "labels", j.Labels, "outcome", out)
	return nil
}

// startWorker runs the pool worker until stopWorker (no new batch) or the work context (the batch
// in progress is cut short).
func (s *Service) startWorker() {
	if s.worker == nil {
		return
	}
	stop, cancel := context.WithCancel(context.Background())
	s.workerStop, s.workerDone = cancel, make(chan struct{})
	go func() {
		defer close(s.workerDone)
		_ = s.worker.Serve(stop, s.work)
	}()
}

// stopWorker makes the worker take no new batch.
func (s *Service) stopWorker() {
	if s.workerStop != nil {
		s.workerStop()
	}
}

// waitWorker waits for the worker to return, or ctx to end.
func (s *Service) waitWorker(ctx context.Context) error {
	if s.workerDone == nil {
		return nil
	}
	select {
	case <-s.workerDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// warmSizes are the deployment's resource classes, for the resource class of warm instances.
func warmSizes(cfg config.Config) map[string]warmpool.Size {
	in := cfg.ResourceClasses
	if cfg.ClassesFile != "" {
		in = cfg.Classes.ResourceClasses
	}
	out := make(map[string]warmpool.Size, len(in))
	for name, r := range in {
		out[name] = warmpool.Size{CPU: r.CPU, MemoryMiB: r.MemoryMiB}
	}
	return out
}
