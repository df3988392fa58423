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

	"github.com/runnerpool/terraform-provider-runnerpool/internal/controlplane"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/webhook"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// warmOptions are the warm-pool components' options for the composition root (nil unless warm
// pools are enabled): the pools from the state table's configuration items, convergence with the
// instance caps, the autoscaled pools' prices and metrics, the pool worker's timings, and the scale
// set listeners over the pool job queue.
func (s *Service) warmOptions(cfg config.Config, cl clients, price history.Pricer) *controlplane.Warm {
	if !cfg.WarmPools() {
		return nil
	}
	return &controlplane.Warm{
		JobQueueURL: cfg.PoolJobQueueURL, CatalogTTL: cfg.ConfigCacheTTL,
		Targets: warmpool.ConfigTargets(declared.NewRepository(s.store), warmpool.ConfigOptions{
			Queue: s.pools.get, Scope: cfg.WarmPoolScope,
			ResourceClasses: warmSizes(cfg), Versions: s.versions,
		}),
		Converger: poolsize.Options{
			Logger: s.log.With("component", "converger"), OnCapped: s.metrics.QuotaRefused,
			Autoscale: poolsize.AutoscaleOptions{Store: s.store, Price: poolsize.PriceFunc(price), Now: s.o.AutoscaleNow},
			OnAutoscale: func(pr poolsize.PoolReport) {
				a := pr.Autoscale
				s.metrics.Autoscale(pr.Pool, pr.TargetHot, pr.TargetStopped, a.WindowHot, a.WindowStopped, a.Forecast, a.Conflict != "")
				s.metrics.AutoscaleQueue(pr.Pool, time.Duration(a.QueueP95MS)*time.Millisecond, a.QueueJobs, time.Duration(a.GoalMS)*time.Millisecond)
			},
		},
		Backstop: pooljob.BackstopConfig{OnInferred: s.metrics.PoolJobCompletionInferred, Logger: s.log.With("component", "backstop")},
		Worker: pooljob.WorkerConfig{
			Rerun: func(ctx context.Context, j warmpool.Job) error {
				return s.serveRerun(ctx, s.classes.ProvisionTimeout(ctx, cfg.ProvisionTimeout, "*"), j)
			},
			ClaimTimeout: cfg.ClaimTimeout, CreatedTimeout: cfg.CreatedTimeout, Logger: s.log.With("component", "pool_worker"),
		},
		ScaleSets: s.scaleSetListeners(cfg, cl.gh),
	}
}

// setupWarmPools takes the converger (unless Options.Converger gave one) and the pool worker from
// the wired control plane, and builds the webhook handler over its pool catalog and job queue.
func (s *Service) setupWarmPools(cfg config.Config, cl clients) error {
	if s.converger == nil {
		s.converger = s.cp.Converger
	}
	h, err := webhook.New(webhook.Config{
		Secret: cfg.WebhookSecret, Deliveries: s.store, Pools: s.cp.Catalog, Jobs: s.cp.Jobs, GitHub: cl.gh, Logger: s.log.With("component", "webhook"),
		DependabotPool: cfg.DependabotPool, OnLeftAlone: s.metrics.WebhookJobLeftAlone, Reruns: true,
		// s.auth is built after the warm pools; read it at delivery time.
		Allowed: func(repository string) bool { return s.auth.AllowsRepository(repository) },
	})
	if err != nil {
		return err
	}
	s.worker, s.webhook = s.cp.Worker, h
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
