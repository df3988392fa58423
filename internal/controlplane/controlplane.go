// Package controlplane is the composition root of the control plane: it wires the domain
// components one reconciler replica holds (the claim registrar, claimer and starter, the fleet,
// the provisioners, the releaser, the refresher and, with warm pools, the pool job queue,
// convergence and the pool worker) over the clients it is given. The service (reconciler/service),
// the sandbox, the bench and the demo all build the control plane here, so what the tests and the
// bench measure is wired as `runnerpool serve` wires it.
//
// Options take the domain packages' own option structs; New sets what the components share (the
// clock, the logger, the deployment, the instance caps, the claimer's hand-back to the releaser)
// and leaves the rest as the caller set it.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// Clients are what the control plane talks to.
type Clients struct {
	Store  *store.Store
	EC2    *ec2.Client
	SQS    *sqs.Client // pool queues and the pool job queue
	GitHub *ghaccess.Client
}

// NewProvisioner builds a provisioner over a snapshot of runner classes; every one shares the
// claimer, registrar, fleet, starter and instance caps of the control plane.
type NewProvisioner func(provision.Config) *provision.Provisioner

// Options configure New. Zero values take the domain packages' defaults.
type Options struct {
	DeploymentID string
	Now          func() time.Time // default time.Now
	Logger       *slog.Logger     // default slog.Default()

	// Claim are the claim timings; HandBack (the releaser's), Now and Logger are set by New.
	Claim claim.Options
	// Provision are the provisions' timings and hooks; Starter, Capacity, Now and Logger are set
	// by New.
	Provision provision.Options
	// Release are the releases' options; Now and Logger are set by New.
	Release release.Options
	// Refresh are the refresh passes' options; DeploymentID, SQS, Now and Logger are set by New.
	Refresh refresh.Options
	// Capacity holds the instance caps that provisions, convergence and pool jobs reserve against
	// (nil: none).
	Capacity *quota.Caps

	// Classes makes the runner classes in force from the provisioner factory (required). It is
	// called once, before the releaser and the refresher, which find runner classes' pool queues
	// through what it returns (refresh also checks every queue of a refresh.QueueLister).
	Classes func(NewProvisioner) (pool.Resolver, error)

	// Warm enables warm pools (nil: none).
	Warm *Warm
}

// Warm configures the warm-pool components.
type Warm struct {
	// JobQueueURL is the pool job queue (empty: convergence alone, no pool jobs and no worker).
	JobQueueURL string
	// Targets are the warm pools (required): warmpool.ConfigTargets over the state table's
	// configuration items, or warmpool.StaticTargets.
	Targets warmpool.Targets
	// CatalogTTL is how long the pool worker's copy of the pools lives (default warmpool's).
	CatalogTTL time.Duration
	// Converger are convergence's options; DeploymentID, Jobs, Capacity, Now and Logger are set by
	// New.
	Converger poolsize.Options
	// Worker holds the pool worker's timings (ClaimTimeout, CreatedTimeout, WaitTime, Lease,
	// RetryDelay, MaxJobAge); its clients, Recycle (the releaser's), Capacity, Now and Logger are
	// set by New.
	Worker pooljob.WorkerConfig
	// Backstop holds the lost-completion backstop's bound and hook (MaxScopes, OnInferred); its
	// ledger, GitHub and job queue are set by New, and its Logger when nil. Convergence runs it.
	Backstop pooljob.BackstopConfig
	// ScaleSets, when set, makes the scale set listeners over the pool job queue: the worker mints
	// scale set jobs' runners through them, and the queue withdraws unused runners through them
	// when they can (pooljob.RunnerWithdrawer).
	ScaleSets func(*pooljob.JobQueue) (pooljob.ScaleSetRunners, error)
}

// Components are the wired control plane.
type Components struct {
	Registrar *claim.Registrar
	Claimer   *claim.Claimer
	Starter   *claim.Starter // nil without warm pools
	Fleet     *fleet.Fleet
	Releaser  *release.Releaser
	Refresher *refresh.Refresher
	// Provisioner builds a provisioner over a snapshot of runner classes (NewProvisioner).
	Provisioner NewProvisioner
	// Warm pools (nil without).
	Jobs      *pooljob.JobQueue
	Catalog   *warmpool.Catalog
	Converger *poolsize.Converger
	Worker    *pooljob.Worker
	ScaleSets pooljob.ScaleSetRunners
	// Backstop ends pool jobs whose completion never came; convergence runs it (nil without a
	// pool job queue or a GitHub client).
	Backstop *pooljob.Backstop
}

// New wires the control plane over the clients.
func New(cl Clients, o Options) (*Components, error) {
	switch {
	case cl.Store == nil || cl.EC2 == nil:
		return nil, errors.New("controlplane: a store and an EC2 client are required")
	case o.Classes == nil:
		return nil, errors.New("controlplane: Options.Classes is required")
	case o.Warm != nil && o.Warm.Targets == nil:
		return nil, errors.New("controlplane: warm pools need their targets")
	case o.Warm != nil && o.Warm.JobQueueURL != "" && cl.SQS == nil:
		return nil, errors.New("controlplane: a pool job queue needs an SQS client")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &Components{}
	claims := o.Claim
	claims.Now, claims.Logger = o.Now, o.Logger
	// A rolled-back provision's hand-back of an instance that may hold a runner of the run is a
	// release of it (release.Releaser.HandBack); the releaser needs the runner classes, made below.
	claims.HandBack = func(ctx context.Context, runID, scope string, rec store.Instance, idleUntil time.Time) error {
		return c.Releaser.HandBack(ctx, runID, scope, rec, idleUntil)
	}
	c.Registrar = claim.NewRegistrar(cl.Store, cl.GitHub, cl.EC2, claims)
	c.Claimer = claim.NewClaimer(cl.Store, c.Registrar, claims)
	c.Fleet = fleet.New(cl.EC2, fleet.Options{Now: o.Now, Logger: o.Logger})
	if o.Warm != nil {
		// Step-driven provisions take hot warm-pool instances through the pool queue (claimer),
		// then stopped ones (starter), then create the rest.
		c.Starter = claim.NewStarter(cl.Store, cl.EC2, c.Registrar, claims)
	}
	popts := o.Provision
	popts.Starter, popts.Now, popts.Logger = c.Starter, o.Now, o.Logger
	if o.Capacity != nil {
		popts.Capacity = o.Capacity
	}
	c.Provisioner = func(cfg provision.Config) *provision.Provisioner {
		if cfg.DeploymentID == "" {
			cfg.DeploymentID = o.DeploymentID
		}
		return provision.New(cl.Store, c.Claimer, c.Registrar, c.Fleet, cl.EC2, cfg, popts)
	}
	resolver, err := o.Classes(c.Provisioner)
	if err != nil {
		return nil, err
	}

	ropts := o.Release
	ropts.Now, ropts.Logger = o.Now, o.Logger
	c.Releaser = release.New(cl.Store, resolver, cl.GitHub, cl.EC2, ropts)
	fopts := o.Refresh
	fopts.DeploymentID, fopts.Now, fopts.Logger = o.DeploymentID, o.Now, o.Logger
	if cl.SQS != nil {
		fopts.SQS = cl.SQS
	}
	c.Refresher = refresh.New(cl.Store, cl.EC2, refreshGitHub(cl.GitHub), resolver, fopts)
	if o.Warm != nil {
		if err := c.warm(cl, o); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// warm wires the pool job queue, convergence and the pool worker.
func (c *Components) warm(cl Clients, o Options) error {
	w := o.Warm
	c.Catalog = warmpool.NewCatalog(w.Targets, w.CatalogTTL, o.Now)
	copts := w.Converger
	copts.DeploymentID, copts.Now = o.DeploymentID, o.Now
	if w.JobQueueURL != "" {
		c.Jobs = pooljob.NewJobQueue(cl.SQS, w.JobQueueURL, cl.Store)
		copts.Jobs = c.Jobs
		if cl.GitHub != nil {
			// Convergence runs the backstop for pool jobs whose completion never came, over the
			// records its pass read (pooljob/backstop.go): one place for webhook and scale set jobs.
			bc := w.Backstop
			bc.Ledger, bc.GitHub, bc.Jobs = cl.Store, cl.GitHub, c.Jobs
			if bc.Logger == nil {
				bc.Logger = o.Logger
			}
			bs, err := pooljob.NewBackstop(bc)
			if err != nil {
				return fmt.Errorf("pool job backstop: %w", err)
			}
			c.Backstop, copts.Backstop = bs, bs
		}
	}
	if copts.Logger == nil {
		copts.Logger = o.Logger
	}
	if o.Capacity != nil {
		copts.Capacity = o.Capacity
	}
	conv, err := poolsize.NewConverger(cl.Store, cl.EC2, c.Fleet, w.Targets, copts)
	if err != nil {
		return fmt.Errorf("convergence: %w", err)
	}
	c.Converger = conv
	if c.Jobs == nil {
		return nil
	}
	if w.ScaleSets != nil {
		ss, err := w.ScaleSets(c.Jobs)
		if err != nil {
			return fmt.Errorf("scale set listeners: %w", err)
		}
		c.ScaleSets = ss
		if wd, ok := ss.(pooljob.RunnerWithdrawer); ok {
			c.Jobs.WithdrawRunners(wd)
		}
	}
	wc := w.Worker
	wc.Store, wc.EC2, wc.Fleet, wc.Starter, wc.Discarder, wc.GitHub = cl.Store, cl.EC2, c.Fleet, c.Starter, c.Registrar, cl.GitHub
	wc.Jobs, wc.Pools, wc.ScaleSets, wc.DeploymentID, wc.Now = c.Jobs, c.Catalog, c.ScaleSets, o.DeploymentID, o.Now
	if wc.Logger == nil {
		wc.Logger = o.Logger
	}
	if o.Capacity != nil {
		wc.Capacity = o.Capacity
	}
	wc.Recycle = func(ctx context.Context, runID string, idleTime time.Duration) error {
		_, err := c.Releaser.Release(ctx, runID, idleTime)
		return err
	}
	worker, err := pooljob.NewWorker(wc)
	if err != nil {
		return fmt.Errorf("pool worker: %w", err)
	}
	c.Worker = worker
	return nil
}

// refreshGitHub is the refresher's GitHub: none (the phase that needs it does nothing) when the
// control plane has no client, rather than a typed nil.
func refreshGitHub(gh *ghaccess.Client) refresh.GitHub {
	if gh == nil {
		return nil
	}
	return gh
}
