package cachebucket_test

import (
	"bytes"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/cachebucket"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// TestLimitsOf: the bucket keeps the largest limit and age of the classes with the cache on (one
// repository's runs may use any of them); none when no class has it on.
func TestLimitsOf(t *testing.T) {
	t.Parallel()
	classes := map[string]declared.RunnerClass{
		"off":   {Name: "off"},
		"small": {Name: "small", Cache: &declared.Cache{Enabled: true}},
		"big":   {Name: "big", Cache: &declared.Cache{Enabled: true, RepositoryLimitGiB: 50, MaxAge: declared.Duration(48 * time.Hour)}},
		"gone":  {Name: "gone", Cache: &declared.Cache{Enabled: false, RepositoryLimitGiB: 500}},
	}
	l, ok := cachebucket.LimitsOf(classes)
	if !ok || l.RepositoryLimit != 50<<30 || l.MaxAge != 7*24*time.Hour {
		t.Errorf("LimitsOf = %+v, %v; want 50 GiB, 7 days", l, ok)
	}
	if _, ok := cachebucket.LimitsOf(map[string]declared.RunnerClass{"off": {}}); ok {
		t.Error("no class with the cache on: limits")
	}
}

// TestPassEvictsByAgeAndLeastRecentlyUsed against the stack's S3 through the real SDK: entries
// unused past the max age go; a repository over its limit loses its least recently used entries
// until it fits, another repository under its own limit keeps everything; what is not a cache
// object is never touched; the bytes each repository holds afterwards are measured.
func TestPassEvictsByAgeAndLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h, err := stack.NewS3()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := s3.New(s3.Options{Region: stack.Region, BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(stack.AccessKeyID, stack.SecretAccessKey, "")})
	put := func(key string, size int) {
		t.Helper()
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(stack.CacheBucket), Key: aws.String(key), Body: bytes.NewReader(make([]byte, size))}); err != nil {
			t.Fatal(err)
		}
	}
	obj := func(repo, key string) string {
		t.Helper()
		s := cache.ScopeOf(repo, "push", "refs/heads/main", "", "refs/heads/main")
		k, err := cache.ObjectKey(s.WritePrefix(), key, "0a1b")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	// The objects are written now, so their LastModified is now: the pass runs ten days later, and
	// the recorded uses (later than the writes) say how recently each was used.
	now := time.Now().Add(10 * 24 * time.Hour)
	used := map[string]time.Time{
		obj("acme/app", "old"):    now.Add(-8 * 24 * time.Hour), // past the age
		obj("acme/app", "lru"):    now.Add(-3 * time.Hour),      // the least recently used of the rest
		obj("acme/app", "recent"): now.Add(-2 * time.Hour),
		obj("acme/app", "newest"): now.Add(-time.Hour),
		obj("acme/api", "a"):      now.Add(-5 * 24 * time.Hour),
	}
	for k := range used {
		put(k, 400)
	}
	put("elsewhere/not-a-cache-object", 10)
	res, err := cachebucket.Pass{
		S3: client, Bucket: stack.CacheBucket, Now: func() time.Time { return now },
		Limits: cachebucket.Limits{RepositoryLimit: 900, MaxAge: 7 * 24 * time.Hour},
		Used:   func(k string) (time.Time, bool) { u, ok := used[k]; return u, ok },
	}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(stack.CacheBucket)})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, c := range out.Contents {
		left = append(left, aws.ToString(c.Key))
	}
	want := []string{obj("acme/api", "a"), obj("acme/app", "newest"), obj("acme/app", "recent"), "elsewhere/not-a-cache-object"}
	slices.Sort(left)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left in the bucket:\n%q\nwant\n%q", left, want)
	}
	if res.Objects != 5 || res.Deleted != 2 || res.DeletedBytes != 800 || res.Bytes["acme/app"] != 800 || res.Bytes["acme/api"] != 400 {
		t.Errorf("result %+v", res)
	}
}
