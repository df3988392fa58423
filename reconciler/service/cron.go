// The cron jobs: refresh and warm-pool convergence on their schedules (robfig/cron, with
// SkipIfStillRunning so a slow pass is never stacked, and Recover so a panic is logged, not fatal).
// Every replica runs the scheduler; a job does its work only while this replica holds the leader
// lease, under a context that is cancelled when leadership ends. On gaining the lease the new
// leader runs both jobs at once instead of waiting for their next tick.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/metrics"
)

func (s *Service) schedule() error {
	cl := cronLogger{s.log}
	s.cron = cron.New(
		cron.WithParser(config.ScheduleParser),
		cron.WithLogger(cl),
		cron.WithChain(cron.Recover(cl), cron.SkipIfStillRunning(cl)),
	)
	for _, j := range []struct {
		name, spec string
		run        func(ctx context.Context) error
	}{
		{JobRefresh, s.cfg.RefreshSchedule, s.refresh},
		{JobConverge, s.cfg.ConvergeSchedule, s.converge},
	} {
		id, err := s.cron.AddJob(j.spec, s.job(j.name, j.run))
		if err != nil {
			return fmt.Errorf("schedule of %s %q: %w", j.name, j.spec, err)
		}
		s.jobs[j.name] = s.cron.Entry(id).WrappedJob
	}
	return nil
}

func (s *Service) refresh(ctx context.Context) error {
	// The pool check covers the queues of the runner classes in force: re-read them if stale.
	if err := s.classes.refresh(ctx); err != nil {
		s.log.Warn("runner classes not read before refresh", "err", err)
	}
	rep, err := s.refresher.Run(ctx)
	// Quotas are recounted from the records refresh just put right, from its own listing.
	// The runner cache's eviction pass, at most once an hour (cache_upkeep.go).
	return errors.Join(err, s.quotas.repair(ctx, rep), s.cacheEvict(ctx))
}

// converge is nil-safe: without a Converger (warm pools not enabled) it does nothing.
func (s *Service) converge(ctx context.Context) error {
	defer s.sampleHistory(ctx) // the pools' history: one sample per interval (dashboard.go)
	if s.converger == nil {
		return nil
	}
	return s.converger.Converge(ctx)
}

// job wraps a job so that it runs only on the leader, bounded by the job timeout, observed.
func (s *Service) job(name string, run func(ctx context.Context) error) cron.Job {
	return cron.FuncJob(func() {
		lctx, ok := s.elector.Leading()
		if !ok {
			s.metrics.CronRun(name, "skipped_not_leader", 0)
			return
		}
		ctx, cancel := context.WithTimeout(lctx, s.cfg.JobTimeout)
		defer cancel()
		start := time.Now()
		err := s.runJob(ctx, name, run)
		d := time.Since(start)
		result := "ok"
		if err != nil {
			result = "error"
			kind := metrics.ErrRefresh
			if name == JobConverge {
				kind = metrics.ErrConverge
			}
			s.metrics.Error(kind)
			s.log.Error("cron job failed", "job", name, "duration_ms", d.Milliseconds(), "error", err)
		} else {
			s.log.Debug("cron job done", "job", name, "duration_ms", d.Milliseconds())
		}
		s.metrics.CronRun(name, result, d)
		if s.o.OnJob != nil {
			s.o.OnJob(name, err)
		}
	})
}

// runJob turns a panic of the job into an error (cron.Recover is the second line of defence).
func (s *Service) runJob(ctx context.Context, name string, run func(ctx context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.metrics.Error(metrics.ErrPanic)
			s.log.Error("cron job panicked", "job", name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("%s panicked: %v", name, v)
		}
	}()
	return run(ctx)
}

// leadershipChanged runs both jobs at once on gaining the lease (through their wrapped chain, so
// SkipIfStillRunning applies), and updates the leader gauge.
func (s *Service) leadershipChanged(leading bool) {
	s.metrics.SetLeader(leading)
	if !leading {
		return
	}
	for _, j := range s.jobs {
		s.kicked.Add(1)
		go func() {
			defer s.kicked.Done()
			j.Run()
		}()
	}
}

// cronLogger sends robfig/cron's logs to slog: its routine messages at debug, skips and errors
// higher.
type cronLogger struct{ l *slog.Logger }

func (c cronLogger) Info(msg string, kv ...any) {
	level := slog.LevelDebug
	if msg == "skip" {
		level = slog.LevelInfo
		msg = "skipped: the previous run is still running"
	}
	c.l.Log(context.Background(), level, "cron: "+msg, kv...)
}

func (c cronLogger) Error(err error, msg string, kv ...any) {
	c.l.Error("cron: "+msg, append(kv, "error", err)...)
}
