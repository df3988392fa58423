// The current Actions runner release (internal/runnerrelease): every replica refreshes it (from the
// table, from GitHub once an hour) and launches it through each class's launch template version; the
// warm pools' spec hash includes it, so they roll over to a new release.
package service

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
)

// releaseCheck is how often a replica looks at the table's release (GitHub is read at most once an
// hour by whichever replica finds the table's copy older than that).
const releaseCheck = 5 * time.Minute

// newRunnerRelease returns the deployment's release cache, kept under its first GitHub scope and
// read with whichever scope's credential a source answers (internal/runnerrelease sources.go).
func (s *Service) newRunnerRelease(cfg config.Config, gh *ghaccess.Client) {
	scopes := cfg.Scopes()
	if len(scopes) == 0 {
		return
	}
	s.release = runnerrelease.New(gh, s.store, runnerrelease.Options{Scope: scopes[0], Scopes: scopes, Enterprise: cfg.GitHubEnterprise, Now: s.o.Now, Logger: s.log.With("component", "runner-release")})
}

// currentRelease is the release launches install, ok false until one is known.
func (s *Service) currentRelease() (runnerversion.Release, bool) {
	if s.release == nil {
		return runnerversion.Release{}, false
	}
	return s.release.Current()
}

// runnerDue says why an instance's runner must not serve another run (runnerrelease.Cache.Due under
// the operator's lag), "" when it may.
func (s *Service) runnerDue(rec store.Instance) string {
	if s.release == nil {
		return ""
	}
	lag, err := runnerversion.CheckLag(s.cfg.RunnerUpgradeLag) // zero: the default
	if err != nil {
		lag = runnerversion.DefaultLag
	}
	return s.release.Due(rec, lag, s.o.Now())
}

// checkRunnerRelease is the start-up check of the runner release (runnerrelease.Cache.Check): an
// error stops Run, naming the permission each source needs.
func (s *Service) checkRunnerRelease(ctx context.Context) error {
	if s.release == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.release.Check(ctx); err != nil {
		s.log.Error("runner release: start-up check failed", "err", err)
		return fmt.Errorf("start-up check: %w", err)
	}
	return nil
}

// refreshRelease keeps the release current until ctx ends; a failure keeps the last one known.
func (s *Service) refreshRelease(ctx context.Context) {
	if s.release == nil {
		return
	}
	t := time.NewTicker(releaseCheck)
	defer t.Stop()
	for {
		rel, err := s.release.Refresh(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "runner release not refreshed", "err", err)
		}
		if rel.Version != "" {
			s.metrics.RunnerRelease(rel.Version, rel.Published)
			live := s.observeRunnerVersions(ctx, rel)
			s.observePins(ctx) // runner_pins.go
			s.checkOutdated(ctx, live)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// observeRunnerVersions sets the runner-version metrics from the live records: how many run each
// version, and how long the oldest has been behind the current release.
func (s *Service) observeRunnerVersions(ctx context.Context, cur runnerversion.Release) []store.Instance {
	live, err := s.store.LiveBrief(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "runner versions not observed", "err", err)
		return nil
	}
	counts, behind := RunnerVersions(live, cur, s.o.Now())
	s.metrics.RunnerVersions(counts, behind)
	return live
}

// checkOutdated looks, on the leader, at what the agents of serving instances report about GitHub
// refusing their runner (runnerrelease.CheckOutdated: a security release, on enough evidence).
func (s *Service) checkOutdated(ctx context.Context, live []store.Instance) {
	if !s.Leading() || len(live) == 0 {
		return
	}
	if _, err := s.release.CheckOutdated(ctx, s.store, live); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "runner release: outdated reports not checked", "err", err)
	}
}

// RunnerVersions counts live records by runner version ("unknown" when not recorded) and says how long
// the oldest known one has been behind cur: since cur was first seen, 0 when none is older.
func RunnerVersions(live []store.Instance, cur runnerversion.Release, now time.Time) (map[string]int, time.Duration) {
	counts := map[string]int{}
	var behind time.Duration
	cv, err := runnerversion.Parse(cur.Version)
	for _, in := range live {
		v := in.RunnerVersion
		if v == "" {
			v = "unknown"
		}
		counts[v]++
		if iv, perr := runnerversion.Parse(in.RunnerVersion); err == nil && perr == nil && iv.Less(cv) && !cur.Published.IsZero() {
			behind = max(behind, now.Sub(cur.Published))
		}
	}
	return counts, behind
}

// closeListeners closes what New opened, for a Run that stops before serving.
func (s *Service) closeListeners() {
	for _, ln := range []net.Listener{s.ln, s.opsLn, s.dashboard.ln} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}
