// Package runnerrelease keeps the current Actions runner release: read from GitHub at most once an
// hour (Every), kept in the state table so every replica launches the same release, and kept as it
// was through a GitHub outage.
//
// GitHub publishes the release in three places, each readable with other rights (sources.go): the
// "list runner applications" endpoint of a repository (Administration read, which registering a
// repository runner needs anyway), of an organisation (its Self-hosted runners read, which only
// owner-level runners need), and actions/runner's public releases (no permission). The cache
// tries them in that order, over every configured scope, takes the first answer and says which
// source gave it. The public releases also give each release's real publication time, where GitHub's
// 30-day window starts; only when they cannot be read is a release's Published the time a reconciler
// first saw it (later than GitHub's, so the window closes sooner than runnerpool thinks).
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

// Source reads releases from GitHub; *ghaccess.Client satisfies it.
type Source interface {
	// RunnerRelease is the current release as the "list runner applications" endpoint of scope
	// ("owner/repo" or "owner") answers it.
	RunnerRelease(ctx context.Context, scope string) (runnerversion.Release, error)
	// PublishedRunnerReleases are actions/runner's public releases, read with scope's credential.
	PublishedRunnerReleases(ctx context.Context, scope string) ([]runnerversion.Release, error)
}

// Table keeps the release; *store.Store satisfies it.
type Table interface {
	GetRunnerRelease(ctx context.Context, scope string) (store.RunnerRelease, error)
	PutRunnerRelease(ctx context.Context, rr store.RunnerRelease) error
}

// Options configure a Cache.
type Options struct {
	// Scope keys the release in the table: the deployment's first GitHub scope. Required.
	Scope string
	// Scopes are every configured scope ("owner/repo" or "owner"), whose credentials the sources are
	// read with; [Scope] when empty.
	Scopes []string
	// Enterprise, when set, is the slug of the enterprise whose downloads endpoint is read after the
	// scopes' (sources.go): for a classic PAT with manage_runners:enterprise.
	Enterprise string
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
	if len(o.Scopes) == 0 {
		o.Scopes = []string{o.Scope}
	}
	return &Cache{src: src, table: table, o: o}
}

// Current returns the release last known, ok false when none is.
func (c *Cache) Current() (runnerversion.Release, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur.Release, c.cur.Release.Version != ""
}

// Known returns what the cache knows: the current release, the source that gave it, and every
// release published (version and publication time; empty when the public releases were not read).
func (c *Cache) Known() store.RunnerRelease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Refresh brings the release up to date: the table's when it was read within Every, else GitHub's,
// kept in the table. When no source answers the last known release stays current and the error,
// an *UnreadableError, is returned.
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
	ans, err := c.read(ctx)
	if err != nil {
		last, _ := c.Current()
		return last, err
	}
	rel := ans.Release
	last, known := c.Current()
	rel.Published = now // first seen: when the public releases do not say
	if known && last.Version == rel.Version {
		rel.Published, rel.Security = last.Published, last.Security
	}
	if p, ok := published(ans.Releases, rel.Version); ok {
		rel.Published = p // GitHub's own: the 30-day window starts here
	}
	rr := store.RunnerRelease{Scope: c.o.Scope, Release: rel, FetchedAt: now, Source: ans.Source, Releases: ans.Releases}
	if err := c.table.PutRunnerRelease(ctx, rr); err != nil {
		c.o.Logger.WarnContext(ctx, "runner release: keeping it in the table", "version", rel.Version, "err", err)
	}
	if !known || last.Version != rel.Version || c.Known().Source != ans.Source {
		c.o.Logger.InfoContext(ctx, "runner release: current release", "version", rel.Version, "previous", last.Version,
			"source", ans.Source, "published", rel.Published.UTC().Format(time.RFC3339), "errors", ans.Skipped)
	}
	c.set(rr)
	return rel, nil
}

func (c *Cache) set(rr store.RunnerRelease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = rr
}

// published is the publication time of version among releases.
func published(releases []runnerversion.Release, version string) (time.Time, bool) {
	for _, r := range releases {
		if r.Version == version && !r.Published.IsZero() {
			return r.Published, true
		}
	}
	return time.Time{}, false
}

// Due says why an instance's runner must not serve another run: it is behind the current release by
// more than lag (runnerversion.Due; lag is the operator's, already checked), or the current release
// is a security release (outdated.go), "" when it may, or when its version or the current release
// is unknown.
func (c *Cache) Due(rec store.Instance, lag time.Duration, now time.Time) string {
	cur, ok := c.Current()
	if !ok || rec.RunnerVersion == "" || !runnerversion.Due(rec.RunnerVersion, cur, lag, now) {
		return ""
	}
	if cur.Security {
		return fmt.Sprintf("its runner %s is older than %s, which GitHub requires at once (a security release): retired", rec.RunnerVersion, cur.Version)
	}
	return fmt.Sprintf("its runner %s is behind the current release %s (published %s) by more than the upgrade lag %s: retired",
		rec.RunnerVersion, cur.Version, cur.Published.UTC().Format(time.RFC3339), lag)
}
