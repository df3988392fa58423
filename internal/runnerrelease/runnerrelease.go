// Package runnerrelease keeps the current Actions runner release: read from GitHub's "list runner
// applications" endpoint at most once an hour (Every), kept in the state table so every replica
// launches the same release, and kept as it was through a GitHub outage. The endpoint gives no
// publication date, so a release's Published is when a reconciler first saw it: the lag before idle
// instances are upgraded counts from there.
package runnerrelease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Every is how often the release is read from GitHub.
const Every = time.Hour

// Source reads the current release for a scope; *ghaccess.Client satisfies it.
type Source interface {
	RunnerRelease(ctx context.Context, scope string) (runnerversion.Release, error)
}

// Table keeps the release; *store.Store satisfies it.
type Table interface {
	GetRunnerRelease(ctx context.Context, scope string) (store.RunnerRelease, error)
	PutRunnerRelease(ctx context.Context, rr store.RunnerRelease) error
}

// Options configure a Cache.
type Options struct {
	// Scope is the GitHub owner (or owner/repo) whose release is read: the deployment's. Required.
	Scope string
	// Every overrides Every (tests).
	Every  time.Duration
	Now    func() time.Time
	Logger *slog.Logger
}

// Cache is the current release as this replica knows it. Safe for concurrent use.
type Cache struct {
	src   Source
	table Table
	o     Options

	mu  sync.Mutex
	cur store.RunnerRelease // zero until a release is known
}

// New returns a cache; it knows no release until the first Refresh.
func New(src Source, table Table, o Options) *Cache {
	if o.Every <= 0 {
		o.Every = Every
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Cache{src: src, table: table, o: o}
}

// Current returns the release last known, ok false when none is.
func (c *Cache) Current() (runnerversion.Release, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur.Release, c.cur.Release.Version != ""
}

// Refresh brings the release up to date: the table's when it was read within Every, else GitHub's,
// kept in the table. When GitHub fails the last known release stays current and the error is
// returned.
func (c *Cache) Refresh(ctx context.Context) (runnerversion.Release, error) {
	now := c.o.Now()
	kept, err := c.table.GetRunnerRelease(ctx, c.o.Scope)
	switch {
	case err == nil && now.Sub(kept.FetchedAt) < c.o.Every:
		c.set(kept)
		return kept.Release, nil
	case err == nil:
		c.set(kept) // older than Every, still the best known until GitHub answers
	case !errors.Is(err, store.ErrNotFound):
		c.o.Logger.WarnContext(ctx, "runner release: reading the table", "err", err)
	}
	rel, err := c.src.RunnerRelease(ctx, c.o.Scope)
	if err != nil {
		last, _ := c.Current()
		return last, fmt.Errorf("runner release of %s: GitHub did not answer, keeping %q: %w", c.o.Scope, last.Version, err)
	}
	last, known := c.Current()
	rel.Published = now
	if known && last.Version == rel.Version {
		rel.Published, rel.Security = last.Published, last.Security
	}
	rr := store.RunnerRelease{Scope: c.o.Scope, Release: rel, FetchedAt: now}
	if err := c.table.PutRunnerRelease(ctx, rr); err != nil {
		c.o.Logger.WarnContext(ctx, "runner release: keeping it in the table", "version", rel.Version, "err", err)
	}
	if !known || last.Version != rel.Version {
		c.o.Logger.InfoContext(ctx, "runner release: new current release", "version", rel.Version, "previous", last.Version)
	}
	c.set(rr)
	return rel, nil
}

func (c *Cache) set(rr store.RunnerRelease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = rr
}

// Due says why an instance's runner must not serve another run: it is behind the current release by
// more than lag (runnerversion.Due; lag is the operator's, already checked), "" when it may, or when
// its version or the current release is unknown.
func (c *Cache) Due(rec store.Instance, lag time.Duration, now time.Time) string {
	cur, ok := c.Current()
	if !ok || rec.RunnerVersion == "" || !runnerversion.Due(rec.RunnerVersion, cur, lag, now) {
		return ""
	}
	return fmt.Sprintf("its runner %s is behind the current release %s (first seen %s) by more than the upgrade lag %s: retired",
		rec.RunnerVersion, cur.Version, cur.Published.UTC().Format(time.RFC3339), lag)
}
