package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
)

// cacheHistory is the fixture's history with the runner cache's use recorded.
type cacheHistory struct {
	*fakeHistory
	usage []history.CacheUsage
}

func (c cacheHistory) CacheUsage(context.Context, time.Time, time.Time) ([]history.CacheUsage, error) {
	return c.usage, nil
}

// TestCostPageShowsTheCache: the cost page has a runner cache card and a row per repository (what
// it stored, the gets, puts and listings presigned for it, its storage and request cost at S3's
// list prices), apart from the instance cost; a history without cache use shows no cache section.
func TestCostPageShowsTheCache(t *testing.T) {
	t.Parallel()
	st, h := fixture(5, 4)
	withCache := cacheHistory{h, []history.CacheUsage{{Repository: "acme/web", Gets: 4000, Puts: 2000, Lists: 1000, Bytes: 5e9}}}
	d := newDashboard(t, st, h, 10)
	if _, body := serve(d.Handler(), http.MethodGet, "/cost?window=7d"); strings.Contains(body, "Runner cache") {
		t.Error("a history without cache use shows a cache section")
	}
	d = newDashboardWith(t, st, withCache)
	code, body := serve(d.Handler(), http.MethodGet, "/cost?window=7d")
	// 7 days of 5 GB at $0.023 per GB-month (30 days): $0.0268; 3,000 puts and listings at
	// $0.005 per 1,000 and 4,000 gets at $0.0004 per 1,000: $0.0166.
	for _, want := range []string{`id="cache"`, "Runner cache (S3)", `id="cache-costs"`, "<td>acme/web</td>", "5.00 GB",
		"<td class=\"n\">4000</td>", "$0.0268", "$0.0166", "$0.0434", "s3-standard-us-east-1"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /cost?window=7d (%d) lacks %q", code, want)
		}
	}
}

func newDashboardWith(t testing.TB, st *fakeStore, h dashboard.History) *dashboard.Dashboard {
	d, err := dashboard.New(dashboard.Options{Store: st, History: h, Price: price, InstancesPerPage: 10, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
