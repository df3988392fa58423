// runner_pins.go: a runner class that launches an older runner than the current release (its user
// data pins runner_version, which launches keep: internal/launchtemplate) is warned about before
// GitHub stops giving its runners jobs, 30 days after the first newer release (at once for a
// security release): a log line at each release check (error level once the date has passed), the
// runnerpool_runner_pin_deadline_timestamp_seconds gauge and a "runner_pin" line in /readyz.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// PinWarning is a runner class launching an older runner than the current release.
type PinWarning struct {
	Class, Version string
	// Deadline is when GitHub stops assigning jobs to its runners; Next the release that sets it.
	Deadline time.Time
	Next     string
}

// PinWarnings lists the classes (name -> runner version it launches) older than the known current
// release, with the date GitHub stops assigning their runners jobs, soonest first.
func PinWarnings(classes map[string]string, known store.RunnerRelease) []PinWarning {
	cur, err := runnerversion.Parse(known.Release.Version)
	if err != nil {
		return nil
	}
	releases := append(slices.Clone(known.Releases), known.Release)
	var out []PinWarning
	for class, v := range classes {
		iv, err := runnerversion.Parse(v)
		if err != nil || !iv.Less(cur) {
			continue
		}
		if d, next, ok := runnerversion.Deadline(v, releases); ok {
			out = append(out, PinWarning{Class: class, Version: iv.String(), Deadline: d, Next: next.Version})
		}
	}
	slices.SortFunc(out, func(a, b PinWarning) int {
		return cmpOr(a.Deadline.Compare(b.Deadline), strings.Compare(a.Class, b.Class))
	})
	return out
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// classRunners are the runner versions the cached runner classes launch (none before the first read).
func (s *Service) classRunners() map[string]string {
	out := map[string]string{}
	if set := s.classes.cached(); set != nil {
		for name, rc := range set.classes {
			if rc.RunnerVersion != "" {
				out[name] = rc.RunnerVersion
			}
		}
	}
	return out
}

// observePins warns about every pinned class (log, metric, /readyz).
func (s *Service) observePins(ctx context.Context) {
	if s.release == nil {
		return
	}
	warnings := PinWarnings(s.classRunners(), s.release.Known())
	s.pins.Store(&warnings)
	s.metrics.RunnerPins(pinGauges(warnings))
	now := s.o.Now()
	for _, w := range warnings {
		level := slog.LevelWarn
		if !now.Before(w.Deadline) {
			level = slog.LevelError
		}
		s.log.Log(ctx, level, "runner release: a runner class pins a runner GitHub stops giving jobs to", "class", w.Class,
			"version", w.Version, "deadline", w.Deadline.UTC().Format(time.RFC3339), "newer", w.Next, "in", w.Deadline.Sub(now).Round(time.Hour))
	}
}

func pinGauges(ws []PinWarning) map[[2]string]time.Time {
	out := map[[2]string]time.Time{}
	for _, w := range ws {
		out[[2]string{w.Class, w.Version}] = w.Deadline
	}
	return out
}

// pinChecks adds the current release, its source, and the pinned classes to /readyz's checks
// (they do not make it unready).
func (s *Service) pinChecks(checks map[string]string) {
	if s.release == nil {
		return
	}
	if k := s.release.Known(); k.Release.Version != "" {
		checks["runner_release"] = fmt.Sprintf("%s, published %s, from the %s", k.Release.Version, k.Release.Published.UTC().Format(time.DateOnly), k.Source)
	}
	p := s.pins.Load()
	if p == nil || len(*p) == 0 {
		return
	}
	lines := make([]string, 0, len(*p))
	for _, w := range *p {
		lines = append(lines, fmt.Sprintf("%s pins %s: GitHub stops giving it jobs on %s (%s published)", w.Class, w.Version, w.Deadline.UTC().Format(time.DateOnly), w.Next))
	}
	checks["runner_pin"] = strings.Join(lines, "; ")
}
