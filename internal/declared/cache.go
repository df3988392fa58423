// A runner class's cache block: whether its instances serve GitHub's cache protocol from the
// deployment's bucket (internal/cache), and the per-repository limits the cache keeps to. The
// provider writes it with the class; the reconciler carries the switch into the class's launch
// template version (the agent starts the cache server only when it is on) and enforces the limits
// where the control plane sees the bucket: at presign and in the eviction pass.
package declared

import (
	"fmt"
	"time"
)

// Cache is a runner class's cache block.
type Cache struct {
	// Enabled switches the cache on for the class's instances.
	Enabled bool `json:"enabled"`
	// RepositoryLimitGiB is the most a repository's caches may hold in the bucket, in GiB; over
	// it, the least recently used entries are evicted. 0 is DefaultCacheRepositoryLimitGiB.
	RepositoryLimitGiB int `json:"repository_limit_gib,omitempty"`
	// MaxAge evicts an entry not used within it. 0 is DefaultCacheMaxAge.
	MaxAge Duration `json:"max_age,omitempty"`
}

// Limits of a cache block. The defaults are GitHub's own cache service's: 10 GB per repository,
// entries not accessed in 7 days removed ("Usage limits and eviction policy",
// https://docs.github.com/en/actions/reference/workflows-and-actions/dependency-caching#usage-limits-and-eviction-policy).
const (
	DefaultCacheRepositoryLimitGiB = 10
	MaxCacheRepositoryLimitGiB     = 10240
	DefaultCacheMaxAge             = 7 * 24 * time.Hour
	MinCacheMaxAge                 = time.Hour
	MaxCacheMaxAge                 = 90 * 24 * time.Hour
)

// On reports whether the block switches the cache on (a nil block is off).
func (c *Cache) On() bool { return c != nil && c.Enabled }

// RepositoryLimit is the per-repository limit in bytes (the default when unset).
func (c *Cache) RepositoryLimit() int64 {
	if c == nil || c.RepositoryLimitGiB <= 0 {
		return DefaultCacheRepositoryLimitGiB << 30
	}
	return int64(c.RepositoryLimitGiB) << 30
}

// Age is the maximum age of an unused entry (the default when unset).
func (c *Cache) Age() time.Duration {
	if c == nil || c.MaxAge <= 0 {
		return DefaultCacheMaxAge
	}
	return c.MaxAge.Std()
}

// validate adds the block's problems.
func (c *Cache) validate(col *collector) {
	if c.RepositoryLimitGiB < 0 || c.RepositoryLimitGiB > MaxCacheRepositoryLimitGiB {
		col.add("cache.repository_limit_gib", fmt.Errorf("repository limit %d GiB: must be between 1 and %d (absent: %d)", c.RepositoryLimitGiB, MaxCacheRepositoryLimitGiB, DefaultCacheRepositoryLimitGiB))
	}
	if c.MaxAge != 0 {
		col.add("cache.max_age", ValidateDuration("cache max age", c.MaxAge.Std(), MinCacheMaxAge, MaxCacheMaxAge))
	}
}
