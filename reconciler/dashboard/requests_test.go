package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/sync/errgroup"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// countingDB counts DynamoDB requests by operation.
type countingDB struct {
	*dynamodb.Client
	mu sync.Mutex
	n  map[string]int
}

func (c *countingDB) count(op string) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

func (c *countingDB) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *countingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.count("GetItem")
	return c.Client.GetItem(ctx, in, o...)
}

func (c *countingDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.count("PutItem")
	return c.Client.PutItem(ctx, in, o...)
}

func (c *countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.count("UpdateItem")
	return c.Client.UpdateItem(ctx, in, o...)
}

func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.count("Query")
	return c.Client.Query(ctx, in, o...)
}

// TestDynamoDBRequests measures what history and the pages cost in DynamoDB requests against
// DynamoDB Local (the figures of docs/dashboard.md): recording a provision and a release, one
// pool sample, and one view of each page, with 50 runs and 40 live instances in the table. Every
// read is a GetItem or a Query; there is no Scan in the code to count.
func TestDynamoDBRequests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "dash")
	if err := store.CreateTable(ctx, raw, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = raw.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	db := &countingDB{Client: raw, n: map[string]int{}}
	now := time.Now().UTC()
	st := store.New(db, table)
	h := history.New(db, table, history.Options{})
	for i := range 40 {
		if _, err := st.Create(ctx, store.Instance{ID: fmt.Sprintf("i-%017d", i), State: store.StateCreated, InstanceType: "c6i.large", UsageClass: "on-demand", RunnerClass: "linux", Threshold: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	var key string
	for i := range 50 {
		key = fmt.Sprintf("4242:%d:1", i+1)
		run, _, err := st.CreateRun(ctx, store.Run{Key: key, RepositoryID: "4242", Repository: "acme/api", RunID: fmt.Sprint(i + 1), Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		db.take()
		// What the service's recorder does per provision and per release: read the run record
		// (its start locates the entry), write the entry.
		if _, err := st.GetRun(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := h.RecordProvision(ctx, history.Provision{RunKey: key, Repository: "acme/api", StartedAt: run.CreatedAt, Status: "succeeded",
			Runners: []history.Runner{{InstanceID: "i-1", InstanceType: "c6i.large", UsageClass: "on-demand", Source: history.SourceReused}}}); err != nil {
			t.Fatal(err)
		}
		if got := db.take(); got["GetItem"] != 1 || got["UpdateItem"] != 1 || len(got) != 2 {
			t.Fatalf("recording a provision: %v, want 1 GetItem and 1 UpdateItem", got)
		}
	}

	// One pool sample as the leader takes it: is the interval's sample there, the live records
	// (a query per live state), the write. (With warm pools, 2 queries more read the configuration.)
	if _, err := h.HasSample(ctx, now); err != nil {
		t.Fatal(err)
	}
	live, err := st.Live(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.RecordSample(ctx, now, []history.PoolCount{{RunnerClass: "linux", States: map[string]int{"created": len(live)}}}); err != nil {
		t.Fatal(err)
	}
	sample := db.take()
	t.Logf("one pool sample: %v", sample)
	if want := len(store.LiveStates); sample["Query"] != want || sample["GetItem"] != 1 || sample["PutItem"] != 1 {
		t.Errorf("one pool sample: %v, want 1 GetItem, %d Query, 1 PutItem", sample, want)
	}

	d, err := dashboard.New(dashboard.Options{Store: st, History: h, Price: price})
	if err != nil {
		t.Fatal(err)
	}
	srv := d.Handler()
	for _, p := range []struct {
		path string
		max  int
	}{
		{"/pools", 2}, // the day's samples (counts from the latest); + the Targets function's reads (the service's: 2 with warm pools)
		{"/runs", 31}, // a query per day back until the page is full: here 50 runs, so every day of the 30-day retention
		{"/runs/" + key, 2},
		{"/instances", len(store.LiveStates) + 1}, // the latest sample (the counts), then a query per state the page reaches
		{"/cost", 6}, // a query per day of runs, of samples and of the runner cache's use (2 days each)
		{"/cost", 0}, // cached for a minute
	} {
		code, body := serve(srv, http.MethodGet, p.path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", p.path, code, body)
		}
		got := db.take()
		total := 0
		for op, n := range got {
			if op != "Query" && op != "GetItem" {
				t.Errorf("GET %s wrote: %v", p.path, got)
			}
			total += n
		}
		t.Logf("GET %s: %d requests %v", p.path, total, got)
		if total > p.max {
			t.Errorf("GET %s: %d requests %v, want at most %d", p.path, total, got, p.max)
		}
	}
}

// itemsRead sums the items DynamoDB read (ScannedCount) for the Query answers of a client: what a
// view pays for, whatever it shows.
type itemsRead struct {
	mu sync.Mutex
	n  int
}

func (r *itemsRead) add(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("itemsRead", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleInitialize(ctx, in)
		if q, ok := out.Result.(*dynamodb.QueryOutput); ok {
			r.mu.Lock()
			r.n += int(q.ScannedCount)
			r.mu.Unlock()
		}
		return out, md, err
	}), middleware.After)
}

func (r *itemsRead) take() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = 0
	return n
}

// TestRequestsPerViewBounded: with 3,000 live records, every view of the pools and instances pages
// (each instances page, followed by its next link to the end) makes a bounded number of DynamoDB
// requests (counted by awslimit.Counter, the bench's middleware) and reads at most the records it
// shows plus one per state it reaches: the counts come from the latest pool sample, the pages
// resume from a cursor, nothing counts or skips records.
func TestRequestsPerViewBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	raw := stacktest.Shared(t).DynamoDB()
	table := stacktest.UniqueName(t, "dashbig")
	if err := store.CreateTable(ctx, raw, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = raw.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}) })
	const records, per = 3000, 500
	now := time.Now().UTC()
	seed := store.New(raw, table)
	counts := map[string]int{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range records {
		state := []store.State{store.StateCreated, store.StateWarming}[i%2]
		counts[string(state)]++
		g.Go(func() error {
			_, err := seed.Create(gctx, store.Instance{ID: fmt.Sprintf("i-%017d", i), State: state, InstanceType: "c6i.large", UsageClass: "on-demand",
				RunnerClass: "linux", Pool: "warm", Threshold: now.Add(time.Duration(i) * time.Second)})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := history.New(raw, table, history.Options{}).RecordSample(ctx, now.Add(-time.Minute), []history.PoolCount{{RunnerClass: "linux", Pool: "warm", States: counts}}); err != nil {
		t.Fatal(err)
	}

	counter, read := awslimit.NewCounter(), &itemsRead{}
	db := dynamodb.New(raw.Options(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, counter.AddMiddleware, read.add) })
	d, err := dashboard.New(dashboard.Options{Store: store.New(db, table), History: history.New(db, table, history.Options{}), Price: price, InstancesPerPage: per})
	if err != nil {
		t.Fatal(err)
	}
	srv := d.Handler()
	next := regexp.MustCompile(`<a href="([^"]+)" id="next">`)
	for _, v := range []struct {
		first    string
		requests int // per view
		pages    int
	}{
		// The day's samples (and the day before's when the window spans midnight).
		{"/pools", 2, 1},
		// The latest sample (1, or 2 just after midnight), then one query per state the page reaches.
		{"/instances", 2 + len(store.LiveStates), records / per},
		{"/instances?state=warming", 2 + 1, records / 2 / per},
	} {
		target, pages := v.first, 0
		for target != "" {
			counter.Reset()
			read.take()
			code, body := serve(srv, http.MethodGet, target)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", target, code, body)
			}
			pages++
			requests, items, rows := counter.Total(), read.take(), strings.Count(body, "<tr><td>i-")
			t.Logf("GET %s: %d requests %v, %d items read, %d rows", target, requests, counter.Counts(), items, rows)
			if requests > v.requests {
				t.Errorf("GET %s: %d requests, want at most %d", target, requests, v.requests)
			}
			if limit := rows + len(store.LiveStates) + 2; items > limit {
				t.Errorf("GET %s: read %d items for %d rows, want at most %d", target, items, rows, limit)
			}
			target = ""
			if m := next.FindStringSubmatch(body); m != nil {
				target = html.UnescapeString(m[1])
			}
		}
		if pages != v.pages {
			t.Errorf("%s: %d pages, want %d", v.first, pages, v.pages)
		}
	}
}
