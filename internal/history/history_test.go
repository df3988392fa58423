package history_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// counting counts the DynamoDB requests history makes, by operation.
type counting struct {
	history.DynamoDBAPI
	mu      sync.Mutex
	n       map[string]int
	scanned int // items the queries read
}

func (c *counting) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[op]++
}

func (c *counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.add("GetItem")
	return c.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (c *counting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.add("PutItem")
	return c.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (c *counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.add("UpdateItem")
	return c.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (c *counting) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.add("Query")
	out, err := c.DynamoDBAPI.Query(ctx, in, o...)
	if err == nil {
		c.mu.Lock()
		c.scanned += int(out.ScannedCount)
		c.mu.Unlock()
	}
	return out, err
}

func newHistory(t *testing.T, now func() time.Time) (*history.Store, *counting) {
	t.Helper()
	db := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "history")
	if err := store.CreateTable(t.Context(), db, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	c := &counting{DynamoDBAPI: db, n: map[string]int{}}
	return history.New(c, table, history.Options{SampleInterval: time.Minute, Now: now}), c
}

// TestRunsAcrossDays: entries land in their day's partition, RecentRuns reads newest first across
// days with queries only, a release recorded before its provision (a race) and a repeated
// provision both leave one complete entry.
func TestRunsAcrossDays(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 24, 23, 58, 0, 0, time.UTC)
	h, calls := newHistory(t, func() time.Time { return base.Add(time.Hour) })
	ctx := t.Context()
	for i := range 5 {
		at := base.Add(time.Duration(i) * time.Minute) // 23:58, 23:59, 00:00, 00:01, 00:02
		key := fmt.Sprintf("42:%d:1", 100+i)
		if i == 2 {
			if err := h.RecordRelease(ctx, history.Release{RunKey: key, StartedAt: at, ReleaseAt: at.Add(30 * time.Second), FinishedAt: at.Add(31 * time.Second), Outcomes: map[string]string{"i-2": "pooled"}}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 { // a repeated provision rewrites the same entry
			if err := h.RecordProvision(ctx, history.Provision{
				RunKey: key, Repository: "acme/api", RunID: strconv.Itoa(100 + i), Attempt: 1, RunnerClass: "linux", StartedAt: at,
				FinishedAt: at.Add(5 * time.Second), Status: "succeeded",
				Runners: []history.Runner{{InstanceID: fmt.Sprintf("i-%d", i), InstanceType: "c6i.large", UsageClass: "on-demand", Source: history.SourceReused}},
				Steps:   history.Steps{Select: time.Second, Total: 5 * time.Second},
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls.n = map[string]int{}
	runs, err := h.RecentRuns(ctx, base.Add(-time.Hour), base.Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.RunID)
	}
	if fmt.Sprint(got) != "[104 103 102 101 100]" {
		t.Errorf("recent runs %v, want newest first across the day boundary", got)
	}
	if calls.n["Query"] != 2 || len(calls.n) != 1 {
		t.Errorf("listing two days took %v, want 2 queries and nothing else", calls.n)
	}
	if r := runs[2]; !r.Released() || r.Runners[0].Released != "pooled" || r.Steps.Select != time.Second || r.Repository != "acme/api" {
		t.Errorf("run 102 (release recorded first) = %+v, want provision and release both", r)
	}
	calls.scanned = 0
	limited, err := h.RecentRuns(ctx, base.Add(-time.Hour), base.Add(time.Hour), 2)
	if err != nil || len(limited) != 2 || limited[0].RunID != "104" {
		t.Errorf("limit 2: %v %v", limited, err)
	}
	if calls.scanned != 2 {
		t.Errorf("limit 2 read %d entries, want 2 (a page reads what it shows, not its day)", calls.scanned)
	}
	one, err := h.GetRun(ctx, "42:101:1", base.Add(time.Minute))
	if err != nil || one.RunID != "101" {
		t.Errorf("GetRun: %+v %v", one, err)
	}
	for _, key := range []string{"42:999:1", "", "a#b"} {
		if _, err := h.GetRun(ctx, key, base); err == nil {
			t.Errorf("GetRun(%q): no error", key)
		}
	}
}

// TestSamples: one sample per interval whoever writes (the conditional put), read back in order.
func TestSamples(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	base := time.Date(2026, 11, 25, 10, 0, 5, 0, time.UTC)
	now.Store(base.UnixNano())
	h, _ := newHistory(t, func() time.Time { return time.Unix(0, now.Load()) })
	ctx := t.Context()
	for i := range 3 {
		at := base.Add(time.Duration(i) * time.Minute)
		pools := []history.PoolCount{{RunnerClass: "linux", Pool: "hot", TargetHot: 2, States: map[string]int{"ready": i}, Billed: map[string]int{"c6i.large/on-demand": i}}}
		ok, err := h.RecordSample(ctx, at, pools)
		if err != nil || !ok {
			t.Fatalf("sample %d: %v %v", i, ok, err)
		}
		again, err := h.RecordSample(ctx, at.Add(10*time.Second), pools) // a second replica, same interval
		if err != nil || again {
			t.Errorf("second sample in interval %d: recorded=%v err=%v, want skipped", i, again, err)
		}
		if has, err := h.HasSample(ctx, at.Add(20*time.Second)); err != nil || !has {
			t.Errorf("HasSample %d: %v %v", i, has, err)
		}
	}
	got, err := h.Samples(ctx, base.Add(-time.Hour), base.Add(time.Hour))
	if err != nil || len(got) != 3 {
		t.Fatalf("samples: %d %v, want 3", len(got), err)
	}
	for i, s := range got {
		if s.Pools[0].States["ready"] != i || !s.At.Equal(base.Add(time.Duration(i)*time.Minute)) {
			t.Errorf("sample %d: %+v", i, s)
		}
	}
	// The latest sample at a time: the newest at or before it, from that day or the day before.
	for _, tt := range []struct {
		at    time.Time
		ready int // -1: none
	}{
		{base.Add(90 * time.Second), 1},
		{base.Add(time.Hour), 2},
		{base.Add(30 * time.Hour), 2}, // the next day has none yet
		{base.Add(-time.Hour), -1},
		{base.Add(50 * time.Hour), -1},
	} {
		smp, err := h.LatestSample(ctx, tt.at)
		switch {
		case tt.ready < 0 && !errors.Is(err, history.ErrNotFound):
			t.Errorf("LatestSample(%s): %+v %v, want ErrNotFound", tt.at, smp, err)
		case tt.ready >= 0 && (err != nil || smp.Counts()["ready"] != tt.ready):
			t.Errorf("LatestSample(%s): %+v %v, want the sample with %d ready", tt.at, smp, err, tt.ready)
		}
	}
}
