// The runner cache's upkeep (docs/cache.md): every replica counts the requests it presigns, per
// repository (history.CacheMeter), and adds them to the history at most once a minute; the leader
// runs the eviction pass over the bucket (internal/cachebucket) at most once an hour, with the
// limits of the runner classes that have the cache on, and records what each repository holds for
// the cost report.
package service

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cachebucket"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
)

const (
	cacheFlushEvery = time.Minute
	cacheEvictEvery = time.Hour
)

type cacheUpkeep struct {
	bucket string
	s3     cachebucket.S3API
	meter  history.CacheMeter
	uses   *cachebucket.Uses // the restores' use markers (cachebucket/uses.go)

	mu                 sync.Mutex
	flushedAt, evicted time.Time
	flushing           sync.WaitGroup
}

// newCacheUpkeep is nil without a cache bucket. An S3 endpoint of AWS_ENDPOINT_URL_S3 (an
// emulator) is addressed path-style, as the presigner addresses it.
func newCacheUpkeep(cfg config.Config, awsCfg aws.Config) *cacheUpkeep {
	if cfg.CacheBucket == "" {
		return nil
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.UsePathStyle = os.Getenv("AWS_ENDPOINT_URL_S3") != ""
	})
	return &cacheUpkeep{bucket: cfg.CacheBucket, s3: client, uses: &cachebucket.Uses{S3: client, Bucket: cfg.CacheBucket}}
}

// cacheUses records the restores the API presigns (nil without a cache bucket).
func (s *Service) cacheUses() interface {
	Used(ctx context.Context, object string) (bool, error)
} {
	if s.cache == nil {
		return nil
	}
	return s.cache.uses
}

// due reports whether every has passed since *last, and marks now when it has.
func (u *cacheUpkeep) due(last *time.Time, every time.Duration, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !last.IsZero() && now.Sub(*last) < every {
		return false
	}
	*last = now
	return true
}

// cacheRequests is the service as api.Options.CacheRequests: it counts each presigned request
// and flushes the counts, off the request's path, once a minute.
type cacheRequests struct{ s *Service }

// Count counts one presigned request of kind (get, put, list) for repository.
func (c cacheRequests) Count(repository, kind string) { c.s.cachePresigned(repository, kind) }

func (s *Service) cachePresigned(repository, kind string) {
	u, h := s.cache, s.dashboard.history
	if u == nil || h == nil {
		return
	}
	u.meter.Count(repository, kind)
	now := s.o.Now()
	if !u.due(&u.flushedAt, cacheFlushEvery, now) {
		return
	}
	u.flushing.Add(1)
	go func() {
		defer u.flushing.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := u.meter.Flush(ctx, h, now); err != nil {
			s.log.Warn("cache: recording presigned requests (kept for the next flush)", "error", err)
		}
	}()
}

// cacheEvict is the leader's eviction pass, at most once per cacheEvictEvery (from converge).
func (s *Service) cacheEvict(ctx context.Context) error {
	u := s.cache
	if u == nil || s.classes.load == nil || !u.due(&u.evicted, cacheEvictEvery, s.o.Now()) {
		return nil // no bucket, or runner classes from a file (which has no cache block)
	}
	snap, err := s.classes.load.Load(ctx)
	if err != nil {
		return fmt.Errorf("cache eviction: reading the runner classes: %w", err)
	}
	limits, ok := cachebucket.LimitsOf(snap.RunnerClasses)
	if !ok {
		return nil // no class has the cache on: the lifecycle rule alone keeps the bucket
	}
	res, err := cachebucket.Pass{S3: u.s3, Bucket: u.bucket, Limits: limits, Now: s.o.Now}.Run(ctx)
	if err != nil {
		return err
	}
	s.log.Info("cache eviction pass", "objects", res.Objects, "deleted", res.Deleted, "deleted_bytes", res.DeletedBytes)
	if h := s.dashboard.history; h != nil {
		for repo, b := range res.Bytes {
			if err := h.SetCacheBytes(ctx, s.o.Now(), repo, b); err != nil {
				return err
			}
		}
	}
	return nil
}
