// Package cachebucket is the control plane's pass over the runner cache's bucket (docs/cache.md):
// it lists every cache object, deletes what was unused past the runner classes' max age and, per
// repository over its limit, the least recently used first, and measures what each repository
// holds (the cost report's storage). The leader runs it; the instances never reach the bucket.
// The bucket's lifecycle rule (examples/complete/cache.tf) is the backstop when no pass runs.
package cachebucket

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// S3API is the part of the S3 client the pass uses; *s3.Client satisfies it.
type S3API interface {
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, opts ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error)
}

// Limits are what a repository's caches in the bucket are kept to.
type Limits struct {
	RepositoryLimit int64         // bytes
	MaxAge          time.Duration // an entry unused this long is deleted
}

// LimitsOf are the bucket's limits from the runner classes with the cache on: the largest
// repository limit and the largest max age among them, since one repository's runs may use any of
// those classes and the bucket is the deployment's. ok is false when no class has the cache on.
func LimitsOf(classes map[string]declared.RunnerClass) (l Limits, ok bool) {
	for _, rc := range classes {
		if !rc.Cache.On() {
			continue
		}
		ok = true
		l.RepositoryLimit = max(l.RepositoryLimit, rc.Cache.RepositoryLimit())
		l.MaxAge = max(l.MaxAge, rc.Cache.Age())
	}
	return l, ok
}

// Pass is one eviction pass's configuration.
type Pass struct {
	S3     S3API
	Bucket string
	Limits Limits
	Now    func() time.Time
	// Used is when an object was last used, when something recorded it (ok false: unknown, and
	// its last write stands for its last use). Nil: the use markers the pass lists (uses.go).
	Used func(object string) (time.Time, bool)
}

// Result is what a pass found and did.
type Result struct {
	Objects, Deleted int
	DeletedBytes     int64
	Bytes            map[string]int64 // by repository, after the pass
}

type object struct {
	key  string
	size int64
	used time.Time
}

// Run lists the bucket's cache objects (under v1/), deletes those unused past MaxAge, then per
// repository over RepositoryLimit the least recently used until it fits.
func (p Pass) Run(ctx context.Context) (Result, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	var markers map[string]time.Time
	if p.Used == nil {
		var err error
		if markers, err = p.markers(ctx); err != nil {
			return Result{}, err
		}
		p.Used = func(object string) (time.Time, bool) { t, ok := markers[object]; return t, ok }
	}
	byRepo, n, err := p.list(ctx)
	if err != nil {
		return Result{}, err
	}
	res := Result{Objects: n, Bytes: map[string]int64{}}
	cutoff := now().Add(-p.Limits.MaxAge)
	var doomed []object
	for _, repo := range slices.Sorted(maps.Keys(byRepo)) {
		objs := byRepo[repo]
		// Least recently used first; the key breaks ties so that a pass is deterministic.
		slices.SortFunc(objs, func(a, b object) int { return cmp.Or(a.used.Compare(b.used), strings.Compare(a.key, b.key)) })
		var total int64
		for _, o := range objs {
			total += o.size
		}
		for _, o := range objs {
			if (p.Limits.MaxAge > 0 && o.used.Before(cutoff)) || (p.Limits.RepositoryLimit > 0 && total > p.Limits.RepositoryLimit) {
				doomed = append(doomed, o)
				total -= o.size
			}
		}
		res.Bytes[repo] = total
	}
	// The markers of deleted objects and of objects already gone go too (not counted as objects).
	live := map[string]bool{}
	for _, objs := range byRepo {
		for _, o := range objs {
			live[o.key] = true
		}
	}
	for _, o := range doomed {
		delete(live, o.key)
	}
	var stale []string
	for _, object := range slices.Sorted(maps.Keys(markers)) {
		if !live[object] {
			stale = append(stale, UseMarker(object))
		}
	}
	if err := p.delete(ctx, stale); err != nil {
		return Result{Objects: n, Bytes: map[string]int64{}}, err
	}
	for batch := range slices.Chunk(doomed, 1000) { // DeleteObjects takes at most 1,000 keys
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, o := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(o.key)}
		}
		out, err := p.S3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &p.Bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return res, fmt.Errorf("cache bucket: deleting %d objects: %w", len(ids), err)
		}
		failed := map[string]bool{}
		for _, e := range out.Errors {
			failed[aws.ToString(e.Key)] = true
		}
		for _, o := range batch {
			if failed[o.key] {
				continue // still there: counted again by the next pass
			}
			res.Deleted++
			res.DeletedBytes += o.size
		}
	}
	return res, nil
}

// markers lists the use markers: object -> when its last use was recorded.
func (p Pass) markers(ctx context.Context) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	pages := s3.NewListObjectsV2Paginator(p.S3, &s3.ListObjectsV2Input{Bucket: &p.Bucket, Prefix: aws.String(UsePrefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("cache bucket: listing the use markers of %s: %w", p.Bucket, err)
		}
		for _, c := range page.Contents {
			out[markerObject(aws.ToString(c.Key))] = aws.ToTime(c.LastModified)
		}
	}
	return out, nil
}

// delete deletes keys (markers), 1,000 a request; a key it could not delete is left to the next pass.
func (p Pass) delete(ctx context.Context, keys []string) error {
	for batch := range slices.Chunk(keys, 1000) {
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			ids[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		if _, err := p.S3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &p.Bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}}); err != nil {
			return fmt.Errorf("cache bucket: deleting %d use markers: %w", len(ids), err)
		}
	}
	return nil
}

// list reads every cache object by repository; objects that are not cache objects are left alone.
func (p Pass) list(ctx context.Context) (map[string][]object, int, error) {
	out := map[string][]object{}
	n := 0
	pages := s3.NewListObjectsV2Paginator(p.S3, &s3.ListObjectsV2Input{Bucket: &p.Bucket, Prefix: aws.String("v1/")})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("cache bucket: listing %s: %w", p.Bucket, err)
		}
		for _, c := range page.Contents {
			key := aws.ToString(c.Key)
			repo, ok := cache.RepositoryOf(key)
			if !ok {
				continue
			}
			used := aws.ToTime(c.LastModified)
			if p.Used != nil {
				if u, ok := p.Used(key); ok && u.After(used) {
					used = u
				}
			}
			out[repo] = append(out[repo], object{key: key, size: aws.ToInt64(c.Size), used: used})
			n++
		}
	}
	return out, n, nil
}
