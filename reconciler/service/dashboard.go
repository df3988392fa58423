// The dashboard's wiring: history recorded around the API's provisions and releases (decorators,
// so the domain packages know nothing of it), a pool sample per sampling interval taken by the
// leader's convergence job, prices from the price file and AWS, the cost metrics, and the
// dashboard's own listener when --dashboard-listen is set.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pricing"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/api"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
)

// dashboardParts are the dashboard's pieces of a Service.
type dashboardParts struct {
	history *history.Store
	dash    *dashboard.Dashboard
	srv     *http.Server
	ln      net.Listener

	mu         sync.Mutex
	lastSample time.Time // the last sampling interval known to have its sample
}

// Pricer returns the history's price function over a price book built from the configuration:
// the price file, then (with --aws-prices) the Price List API and EC2's spot price history.
func Pricer(cfg config.Config, awsCfg aws.Config, spot pricing.SpotAPI, now func() time.Time, log *slog.Logger) history.Pricer {
	o := pricing.Options{File: cfg.Dashboard.Prices, Now: now, Logger: log}
	if cfg.Dashboard.AWSPrices {
		// The Price List API answers in us-east-1 for every region's prices.
		pl := awspricing.NewFromConfig(awsCfg, func(po *awspricing.Options) { po.Region = "us-east-1" })
		o.PriceList = pricing.PriceList{API: pl, Region: awsCfg.Region}
		if spot != nil {
			o.Spot = pricing.SpotHistory{API: spot, Now: now}
		}
	}
	return pricing.New(o).PerHour
}

// setupDashboard builds the history, the dashboard (the cost reports of pages and metrics) and,
// wraps the provisioner and releaser the API calls.
func (s *Service) setupDashboard(cfg config.Config, db history.DynamoDBAPI, price history.Pricer, prov api.Provisioner, rel api.Releaser) (api.Provisioner, api.Releaser, error) {
	s.dashboard.history = history.New(db, cfg.Table, history.Options{
		Retention: cfg.Dashboard.Retention, SampleInterval: cfg.Dashboard.SampleInterval, Now: s.o.Now,
	})
	d, err := dashboard.New(dashboard.Options{
		Store: s.store, History: s.dashboard.history, Targets: s.poolTargets, Price: price, Quotas: s.quotas.rows, Postures: s.classes.postures,
		Deployment: cfg.DeploymentID, Now: s.o.Now, Logger: s.log.With("component", "dashboard"),
	})
	if err != nil {
		return nil, nil, err
	}
	s.dashboard.dash = d
	s.metrics.RegisterCost(func(ctx context.Context) (history.Report, error) {
		return d.CostWithin(ctx, 24*time.Hour, 5*time.Minute)
	})
	rec := &recorder{h: s.dashboard.history, runs: s.store, log: s.log.With("component", "history"), now: s.o.Now, defaultClass: s.classes.def}
	return recordingProvisioner{next: prov, rec: rec}, recordingReleaser{next: rel, rec: rec}, nil
}

// listenDashboard opens the dashboard's listener when --dashboard-listen is set; on failure it
// closes the service's other listeners (New's last step).
func (s *Service) listenDashboard(cfg config.Config) error {
	if cfg.Dashboard.Listen == "" {
		return nil
	}
	s.dashboard.srv = &http.Server{
		Handler: s.dashboard.dash.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	var err error
	if s.dashboard.ln, err = net.Listen("tcp", cfg.Dashboard.Listen); err != nil {
		_ = s.ln.Close()
		if s.opsLn != nil {
			_ = s.opsLn.Close()
		}
		return fmt.Errorf("listening on %s (dashboard): %w", cfg.Dashboard.Listen, err)
	}
	return nil
}

// DashboardURL is the dashboard's address, or "" when it is not served.
func (s *Service) DashboardURL() string {
	if s.dashboard.ln == nil {
		return ""
	}
	return "http://" + s.dashboard.ln.Addr().String()
}

// Dashboard is the dashboard (its handler and cost reports), served or not.
func (s *Service) Dashboard() *dashboard.Dashboard { return s.dashboard.dash }

// History is the store of run history and pool samples.
func (s *Service) History() *history.Store { return s.dashboard.history }

func (s *Service) serveDashboard(errs chan<- error) {
	if s.dashboard.srv != nil {
		go func() { errs <- s.dashboard.srv.Serve(s.dashboard.ln) }()
	}
}

func (s *Service) shutdownDashboard(ctx context.Context) error {
	if s.dashboard.srv == nil {
		return nil
	}
	return s.dashboard.srv.Shutdown(ctx)
}

// ---- recording ---------------------------------------------------------------------------------

// recorder writes history entries. A failure is logged and never fails the provision or release
// it describes: history is for people, the run records are the state.
type recorder struct {
	h    *history.Store
	runs interface {
		GetRun(ctx context.Context, key string) (store.Run, error)
	}
	log          *slog.Logger
	now          func() time.Time
	defaultClass string // what a request without a runner class gets
}

// detached bounds a history write independently of the request, which may be cancelled already.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

func (r *recorder) provisioned(ctx context.Context, req provision.Request, res provision.Result) {
	ctx, cancel := detached(ctx)
	defer cancel()
	started := res.StartedAt
	if started.IsZero() {
		// A result stored before results carried their start: the run record has it.
		run, err := r.runs.GetRun(ctx, res.RunKey)
		if err != nil {
			r.log.Warn("history: provision not recorded", "run", res.RunKey, "error", err)
			return
		}
		started = run.CreatedAt
	}
	p := history.Provision{
		RunKey: res.RunKey, Repository: req.Repository, RunID: req.RunID, Attempt: req.Attempt, RunnerClass: req.RunnerClass,
		StartedAt: started, FinishedAt: r.now(), Status: res.Status, Outcome: res.Outcome, Error: res.Error,
		Steps: history.Steps{
			Select: res.Timing.Select, Start: res.Timing.Start, Create: res.Timing.Create, Register: res.Timing.Validate,
			Post: res.Timing.Post, Total: res.Timing.Total,
		},
	}
	if p.RunnerClass == "" {
		p.RunnerClass = r.defaultClass
	}
	for _, x := range res.Runners {
		p.Runners = append(p.Runners, history.Runner{InstanceID: x.InstanceID, InstanceType: x.InstanceType, UsageClass: x.UsageClass, Zone: x.Zone, Source: x.Source})
	}
	if err := r.h.RecordProvision(ctx, p); err != nil {
		r.log.Warn("history: provision not recorded", "run", res.RunKey, "error", err)
	}
}

func (r *recorder) released(ctx context.Context, runKey string, began time.Time, rep release.Report) {
	if len(rep.Instances) == 0 {
		return // nothing released (a repeated release): the first one's entry stands
	}
	ctx, cancel := detached(ctx)
	defer cancel()
	run, err := r.runs.GetRun(ctx, runKey)
	if err != nil {
		r.log.Warn("history: release not recorded", "run", runKey, "error", err)
		return
	}
	out := map[string]string{}
	for _, in := range rep.Instances {
		out[in.ID] = string(in.Outcome)
	}
	if err := r.h.RecordRelease(ctx, history.Release{
		RunKey: runKey, StartedAt: run.CreatedAt, ReleaseAt: began, FinishedAt: r.now(), Outcomes: out, Message: rep.Message,
	}); err != nil {
		r.log.Warn("history: release not recorded", "run", runKey, "error", err)
	}
}

type recordingProvisioner struct {
	next api.Provisioner
	rec  *recorder
}

func (p recordingProvisioner) Provision(ctx context.Context, req provision.Request) (provision.Result, error) {
	res, err := p.next.Provision(ctx, req)
	if res.RunKey != "" && res.Status != "" {
		p.rec.provisioned(ctx, req, res)
	}
	return res, err
}

type recordingReleaser struct {
	next api.Releaser
	rec  *recorder
}

func (r recordingReleaser) Release(ctx context.Context, runKey string, idleTime time.Duration) (release.Report, error) {
	began := r.rec.now()
	rep, err := r.next.Release(ctx, runKey, idleTime)
	r.rec.released(ctx, runKey, began, rep)
	return rep, err
}

// ---- pool samples ------------------------------------------------------------------------------

// poolTargets is every configured warm pool's schedule, target and next change now (the
// configuration items only: no counts), keyed by runner class and pool.
func (s *Service) poolTargets(ctx context.Context, now time.Time) ([]history.PoolCount, error) {
	if !s.cfg.WarmPools() {
		return nil, nil
	}
	snap, err := declared.NewRepository(s.store).Load(ctx)
	if err != nil {
		return nil, err
	}
	var out []history.PoolCount
	for _, p := range snap.Pools() {
		c := history.PoolCount{RunnerClass: p.RunnerClass, Pool: p.Name}
		if t, err := snap.Target(p.Name, now); err == nil {
			c.Schedule, c.TargetHot, c.TargetStop = t.Schedule, t.Hot, t.Stopped
		}
		// An autoscaled pool's target is the leader's last decision within the window's maxima.
		if p.Autoscale != nil {
			c.Autoscale = &history.PoolAutoscale{Goal: p.Autoscale.QueueTimeP95.Std()}
			if st, err := s.store.GetAutoscale(ctx, p.Name); err == nil {
				d := st.Decision
				c.TargetHot, c.TargetStop = st.Hot, st.Stopped
				*c.Autoscale = history.PoolAutoscale{DecidedAt: st.DecidedAt, Forecast: d.Forecast, WindowHot: d.WindowHot, WindowStopped: d.WindowStopped,
					Goal: c.Autoscale.Goal, QueueP95: time.Duration(d.QueueP95MS) * time.Millisecond, QueueJobs: d.QueueJobs,
					Conflict: d.Conflict, Reasons: d.Reasons}
			} else if !errors.Is(err, store.ErrNotFound) {
				s.log.Warn("pool sample: autoscale decision not read", "pool", p.Name, "err", err)
			}
		}
		if cal, err := p.Calendar(); err == nil {
			if at, t := cal.NextChange(now); !at.IsZero() {
				c.NextChange, c.NextHot, c.NextStopped = at.UTC(), t.Hot, t.Stopped
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// poolCounts is every runner class's and warm pool's state now (the pool sample): live counts
// (indexed queries per state), the schedule's target and next change (poolTargets), and what EC2
// bills.
func (s *Service) poolCounts(ctx context.Context, now time.Time) ([]history.PoolCount, error) {
	live, err := s.store.Live(ctx)
	if err != nil {
		return nil, err
	}
	targets, err := s.poolTargets(ctx, now)
	if err != nil {
		return nil, err
	}
	type key struct{ class, pool string }
	counts := map[key]*history.PoolCount{}
	get := func(class, pool string) *history.PoolCount {
		k := key{class, pool}
		if counts[k] == nil {
			counts[k] = &history.PoolCount{RunnerClass: class, Pool: pool, States: map[string]int{}, Billed: map[string]int{}}
		}
		return counts[k]
	}
	for _, t := range targets {
		c := get(t.RunnerClass, t.Pool)
		c.Schedule, c.TargetHot, c.TargetStop, c.NextChange, c.NextHot, c.NextStopped = t.Schedule, t.TargetHot, t.TargetStop, t.NextChange, t.NextHot, t.NextStopped
	}
	for _, in := range live {
		c := get(in.RunnerClass, in.Pool)
		c.States[string(in.State)]++
		// A warm pool pays for the instances that wait for work and for the pool jobs it serves; a
		// runner class pays for its released runners waiting in the pool (idle); instances held by a
		// step-driven run are that run's cost.
		switch {
		case in.State == store.StateStopped, in.State == store.StateTerminating:
		case in.Pool == "" && in.State == store.StateIdle:
			c.Billed[in.InstanceType+"/"+in.UsageClass]++
		case in.Pool == "":
		case in.RunID == "" || strings.HasPrefix(in.RunID, warmpool.JobRunPrefix):
			c.Billed[in.InstanceType+"/"+in.UsageClass]++
		}
	}
	out := make([]history.PoolCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	return out, nil
}

// sampleHistory records the pool sample of the current sampling interval, once: a replica skips
// without a table call when it already wrote or saw this interval's sample.
func (s *Service) sampleHistory(ctx context.Context) {
	h := s.dashboard.history
	if h == nil {
		return
	}
	now := s.o.Now()
	bucket := now.UTC().Truncate(h.SampleInterval())
	s.dashboard.mu.Lock()
	done := !s.dashboard.lastSample.Before(bucket)
	s.dashboard.mu.Unlock()
	if done {
		return
	}
	if has, err := h.HasSample(ctx, now); err == nil && has {
		s.markSampled(bucket)
		return
	}
	counts, err := s.poolCounts(ctx, now)
	if err == nil {
		_, err = h.RecordSample(ctx, now, counts)
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.log.Warn("history: pool sample not recorded", "error", err)
		}
		return
	}
	s.markSampled(bucket)
}

func (s *Service) markSampled(bucket time.Time) {
	s.dashboard.mu.Lock()
	s.dashboard.lastSample = bucket
	s.dashboard.mu.Unlock()
}
