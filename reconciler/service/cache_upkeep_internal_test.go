package service

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

type snapshotLoader declared.Snapshot

func (l snapshotLoader) Load(context.Context) (declared.Snapshot, error) {
	return declared.Snapshot(l), nil
}

// TestCacheUpkeep: a replica counts the requests it presigned by repository and adds them to the
// history at once for the first and then at most once a minute, off the request's path; the
// leader's pass deletes by the limits of the classes with the cache on (here, unused past the max
// age), at most once an hour, and records what each repository holds, so the cost report prices both.
func TestCacheUpkeep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "cacheupkeep")
	if err := store.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	h, err := stack.NewS3()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := s3.New(s3.Options{Region: stack.Region, BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(stack.AccessKeyID, stack.SecretAccessKey, "")})
	scope := cache.ScopeOf("acme/app", "push", "refs/heads/main", "", "refs/heads/main")
	for _, key := range []string{"a", "b", "c"} {
		obj, err := cache.ObjectKey(scope.WritePrefix(), key, "0a1b")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(stack.CacheBucket), Key: aws.String(obj), Body: bytes.NewReader(make([]byte, 1000))}); err != nil {
			t.Fatal(err)
		}
	}

	now := time.Now().Add(3 * time.Hour) // the objects were written 3 hours before: past the class's max age
	s := &Service{o: Options{Now: func() time.Time { return now }}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.cache = &cacheUpkeep{bucket: stack.CacheBucket, s3: client}
	s.classes = &classSource{load: snapshotLoader{RunnerClasses: map[string]declared.RunnerClass{
		"small": {Name: "small", Cache: &declared.Cache{Enabled: true, MaxAge: declared.Duration(time.Hour)}},
		"off":   {Name: "off"},
	}}}
	s.dashboard.history = history.New(db, table, history.Options{Now: s.o.Now})

	cacheRequests{s}.Count("Acme/App", "get") // the first: flushed at once
	s.cache.flushing.Wait()
	cacheRequests{s}.Count("acme/app", "put") // within the minute: counted, not yet flushed
	cacheRequests{s}.Count("acme/app", "list")
	s.cache.flushing.Wait()
	if err := s.cacheEvict(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.cacheEvict(ctx); err != nil { // within the hour: no pass
		t.Fatal(err)
	}
	usage, err := s.dashboard.history.CacheUsage(ctx, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 || usage[0] != (history.CacheUsage{Repository: "acme/app", Gets: 1}) {
		t.Errorf("recorded %+v, want 1 get flushed and nothing held", usage)
	}
	left, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(stack.CacheBucket)})
	if err != nil || len(left.Contents) != 0 {
		t.Errorf("after the pass, with every entry past the class's max age: %v, %d objects left", err, len(left.Contents))
	}

	now = now.Add(2 * time.Minute)
	cacheRequests{s}.Count("acme/app", "get") // past the minute: the counts so far are flushed
	s.cache.flushing.Wait()
	usage, err = s.dashboard.history.CacheUsage(ctx, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 || usage[0].Gets != 2 || usage[0].Puts != 1 || usage[0].Lists != 1 {
		t.Errorf("recorded %+v, want 2 gets, 1 put, 1 list", usage)
	}
}
