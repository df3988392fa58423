package history_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
)

// TestCacheUsageAndCost: presigned requests counted by two replicas' meters add up per repository
// and hour, across a day boundary, with one table write per repository and flush; the eviction
// pass's measurements of the bytes a repository holds are averaged over the window; the report
// prices storage per GB-month and requests per 1,000 at S3 Standard's list prices (PUT and LIST
// at $0.005, GET at $0.0004), apart from the instance cost; an hour outside the window is not read.
func TestCacheUsageAndCost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	base := time.Date(2026, 11, 24, 23, 30, 0, 0, time.UTC)
	h, calls := newHistory(t, func() time.Time { return base.Add(2 * time.Hour) })

	var a, b history.CacheMeter
	for range 3 {
		a.Count("acme/app", history.CacheGet)
	}
	a.Count("acme/app", history.CachePut)
	a.Count("acme/app", history.CacheList)
	a.Count("acme/app", "delete") // not a kind the control plane presigns: not counted
	b.Count("acme/app", history.CacheGet)
	b.Count("acme/api", history.CachePut)
	before := calls.n["UpdateItem"]
	if err := a.Flush(ctx, h, base); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx, h, base.Add(time.Hour)); err != nil { // the next day
		t.Fatal(err)
	}
	if err := a.Flush(ctx, h, base); err != nil { // nothing counted since: no write
		t.Fatal(err)
	}
	if n := calls.n["UpdateItem"] - before; n != 3 {
		t.Errorf("flushes wrote %d items, want 3 (one per repository and flush)", n)
	}
	for _, m := range []struct {
		at    time.Time
		bytes int64
	}{{base, 2e9}, {base.Add(time.Hour), 4e9}} {
		if err := h.SetCacheBytes(ctx, m.at, "acme/app", m.bytes); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.AddCacheRequests(ctx, base.Add(-3*time.Hour), "acme/app", 1000, 1000, 1000); err != nil { // before the window
		t.Fatal(err)
	}

	from, to := base.Add(-time.Hour+time.Minute), base.Add(2*time.Hour)
	usage, err := h.CacheUsage(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := []history.CacheUsage{{Repository: "acme/api", Puts: 1}, {Repository: "acme/app", Gets: 4, Puts: 1, Lists: 1, Bytes: 3e9}}
	if len(usage) != len(want) || usage[0] != want[0] || usage[1] != want[1] {
		t.Fatalf("usage %+v, want %+v", usage, want)
	}

	rep, err := history.Compute(ctx, h, func(_ context.Context, _, _, _ string) (float64, string) { return 0, history.PriceUnknown }, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cache == nil {
		t.Fatal("the report has no cache cost")
	}
	months := to.Sub(from).Hours() / (30 * 24)
	wantStorage := 3 * 0.023 * months
	wantRequests := 3.0/1000*0.005 + 4.0/1000*0.0004
	c := rep.Cache.Total
	if math.Abs(c.StorageCost-wantStorage) > 1e-12 || math.Abs(c.RequestCost-wantRequests) > 1e-12 || math.Abs(c.Cost-wantStorage-wantRequests) > 1e-12 {
		t.Errorf("cache cost %+v, want storage %g, requests %g", c, wantStorage, wantRequests)
	}
	if rep.Cache.Repositories[0].Repository != "acme/app" || rep.Cache.Source != "s3-standard-us-east-1" {
		t.Errorf("cache lines %+v (source %s): want acme/app first", rep.Cache.Repositories, rep.Cache.Source)
	}
	if rep.Total.Cost != 0 {
		t.Errorf("the instance total %v counts the cache", rep.Total.Cost)
	}
}
