package cachebucket_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/cachebucket"
)

// bucket is an S3 bucket on a clock the test sets: LastModified is the clock at the write.
type bucket struct {
	mu   sync.Mutex
	now  time.Time
	objs map[string]types.Object
	puts int
}

func (b *bucket) PutObject(_ context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.puts++
	b.objs[*in.Key] = types.Object{Key: in.Key, Size: aws.Int64(aws.ToInt64(in.ContentLength)), LastModified: aws.Time(b.now)}
	return &s3.PutObjectOutput{}, nil
}

func (b *bucket) ListObjectsV2(_ context.Context, in *s3.ListObjectsV2Input, _ ...func(*s3.Options)) (*s3.ListObjectsV2Output, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := &s3.ListObjectsV2Output{}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range b.objs {
			if !yield(k) {
				return
			}
		}
	}) {
		if strings.HasPrefix(k, aws.ToString(in.Prefix)) {
			out.Contents = append(out.Contents, b.objs[k])
		}
	}
	return out, nil
}

func (b *bucket) DeleteObjects(_ context.Context, in *s3.DeleteObjectsInput, _ ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range in.Delete.Objects {
		delete(b.objs, *id.Key)
	}
	return &s3.DeleteObjectsOutput{}, nil
}

func (b *bucket) keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k := range b.objs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestRestoresCountAsUses: "least recently used" in the bucket is used, not written. A restore
// (a presigned GET) is recorded as a use marker, at most one write per object per hour however
// many restores; the eviction pass then keeps the entry restored last even though it was written
// first, and deletes the markers of what it evicted. Fails on the code before: nothing recorded
// restores, and the pass evicted the entry written first (the one in use).
func TestRestoresCountAsUses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	b := &bucket{now: t0, objs: map[string]types.Object{}}
	obj := func(key string) string {
		s := cache.ScopeOf("acme/app", "push", "refs/heads/main", "", "main")
		k, _ := cache.ObjectKey(s.WritePrefix(), key, "0a1b")
		return k
	}
	put := func(k string, at time.Time) {
		b.mu.Lock()
		b.objs[k] = types.Object{Key: aws.String(k), Size: aws.Int64(400), LastModified: aws.Time(at)}
		b.mu.Unlock()
	}
	hot, cold := obj("hot"), obj("cold")
	put(hot, t0)                   // written first...
	put(cold, t0.Add(time.Minute)) // ...this one after it
	clock := t0.Add(2 * time.Hour)
	uses := &cachebucket.Uses{S3: b, Bucket: "b", Now: func() time.Time { return clock }}
	b.now = clock
	for range 50 { // a hot entry: 50 restores within the hour, one write
		if _, err := uses.Used(ctx, hot); err != nil {
			t.Fatal(err)
		}
	}
	if b.puts != 1 {
		t.Fatalf("%d marker writes for 50 restores within an hour, want 1", b.puts)
	}
	clock, b.now = clock.Add(61*time.Minute), clock.Add(61*time.Minute)
	if wrote, _ := uses.Used(ctx, hot); !wrote || b.puts != 2 {
		t.Fatalf("a restore an hour later: wrote %v, %d writes; want a second marker", wrote, b.puts)
	}
	if wrote, _ := uses.Used(ctx, "elsewhere/x"); wrote {
		t.Fatal("a use of something that is not a cache object was recorded")
	}

	res, err := cachebucket.Pass{S3: b, Bucket: "b", Now: func() time.Time { return clock },
		Limits: cachebucket.Limits{RepositoryLimit: 500, MaxAge: 7 * 24 * time.Hour}}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.keys(), []string{hot, cachebucket.UseMarker(hot)}; !slices.Equal(got, want) {
		t.Fatalf("left %q (%+v), want the restored entry and its marker %q", got, res, want)
	}
	if res.Objects != 2 || res.Deleted != 1 {
		t.Errorf("result %+v: want 2 objects (markers are not objects), 1 deleted", res)
	}

	// The entry ages past the max age unused: it goes, and its marker with it.
	later := clock.Add(8 * 24 * time.Hour)
	if _, err := (cachebucket.Pass{S3: b, Bucket: "b", Now: func() time.Time { return later },
		Limits: cachebucket.Limits{RepositoryLimit: 500, MaxAge: 7 * 24 * time.Hour}}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.keys(); len(got) != 0 {
		t.Fatalf("left %q after the max age, want nothing", got)
	}
}
