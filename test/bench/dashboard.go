// The "dashboard" phase: the dashboard's pages at an organisation's size. A table of its own holds
// DashboardInstances live records (four warm pools on a schedule of 60 repositories' organisation,
// plus runs' instances), DashboardRuns history entries over the last week from 60 repositories, and
// a full day of pool samples. Each page is viewed several times through the dashboard's handler
// with DynamoDB clients that count requests; the figures are the median render time and the
// requests per view. With Options.ScreenshotDir set, the pages are also served on 127.0.0.1 and
// Chromium saves a screenshot of each (the README's images).
package bench

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"golang.org/x/sync/errgroup"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
)

const (
	dashTable = "runnerpool-bench-dashboard"
	dashRepos = 60
	dashPools = 4
)

// phaseDashboard measures the dashboard's pages at organisation size.
func phaseDashboard(ctx context.Context, h *harness, res *Result) error {
	err := h.dashboardPages(ctx, res)
	if err != nil && !slices.ContainsFunc(res.Figures, func(f Figure) bool { return f.Name == "dashboard_slowest_page_ms" }) {
		res.add(Figure{Name: "dashboard_slowest_page_ms", Missing: err.Error(), Unit: "ms"})
	}
	return err
}

func (h *harness) dashboardPages(ctx context.Context, res *Result) error {
	db := h.sb.Stack.DynamoDB()
	if err := store.CreateTable(ctx, db, dashTable); err != nil {
		return err
	}
	st := store.New(db, dashTable)
	hist := history.New(db, dashTable, history.Options{})
	now := time.Now().UTC()
	h.say("  writing %d live records, %d runs of %d repositories and a day of pool samples", h.o.DashboardInstances, h.o.DashboardRuns, dashRepos)
	keys, err := seedDashboard(ctx, db, st, hist, h.o.DashboardInstances, h.o.DashboardRuns, now)
	if err != nil {
		return err
	}

	cfg, err := h.sb.Stack.AWSConfig(ctx)
	if err != nil {
		return err
	}
	counter := awslimit.NewCounter()
	cfg.APIOptions = append(cfg.APIOptions, counter.AddMiddleware)
	cdb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	cst := store.New(cdb, dashTable)
	d, err := dashboard.New(dashboard.Options{
		Store: cst, History: history.New(cdb, dashTable, history.Options{}), Price: benchPrice, Deployment: "bench-org",
		Targets: func(context.Context, time.Time) ([]history.PoolCount, error) {
			return dashTargets(h.o.DashboardInstances), nil
		},
	})
	if err != nil {
		return err
	}
	srv := d.Handler()
	pages := []struct{ name, path string }{
		{"pools", "/pools"},
		{"runs", "/runs"},
		{"runs_page_10", "/runs?page=10"},
		{"run", "/runs/" + keys[len(keys)/2]},
		{"instances", "/instances"},
		{"instances_page_40", ""}, // reached by following the next links (each page resumes from a cursor)
		{"instances_ready", "/instances?state=ready"},
		{"cost_24h", "/cost?window=24h"},
		{"cost_7d", "/cost?window=7d"},
	}
	const views = 5
	slowest, slowestPage, mostRequests := 0.0, "", 0
	var lines []string
	for _, p := range pages {
		label := p.path
		if p.path == "" {
			if p.path, err = followNext(ctx, srv, "/instances", 39); err != nil {
				return err
			}
			label = "/instances page 40 (its cursor link)"
		}
		var took []float64
		requests, size := 0, 0
		for range views {
			d.ResetCost() // every view computes its cost report
			counter.Reset()
			rec := httptest.NewRecorder()
			t := time.Now()
			srv.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, p.path, nil))
			took = append(took, ms(time.Since(t)))
			if rec.Code != http.StatusOK {
				return fmt.Errorf("GET %s: %d %s", p.path, rec.Code, truncateBody(rec.Body.String()))
			}
			requests, size = total(counter.Counts()), rec.Body.Len()
		}
		slices.Sort(took)
		med := Percentile(took, 50)
		name := "dashboard_" + p.name + "_ms"
		res.add(Figure{Name: name, Value: med, Unit: "ms",
			How: fmt.Sprintf("median of %d views of %s through the dashboard's handler, %d live records and %d runs in the table; %d DynamoDB requests per view, %d KB of HTML", views, label, h.o.DashboardInstances, h.o.DashboardRuns, requests, size/1024)})
		lines = append(lines, fmt.Sprintf("%s %.0f ms %d req %d KB", label, med, requests, size/1024))
		if med > slowest {
			slowest, slowestPage = med, label
		}
		mostRequests = max(mostRequests, requests)
	}
	res.add(Figure{Name: "dashboard_slowest_page_ms", Value: slowest, Unit: "ms",
		How: fmt.Sprintf("the slowest page (%s) of %d live records, %d runs from %d repositories, %d warm pools and a day of pool samples: %s", slowestPage, h.o.DashboardInstances, h.o.DashboardRuns, dashRepos, dashPools, strings.Join(lines, "; "))})
	res.add(Figure{Name: "dashboard_requests_per_page_view", Value: float64(mostRequests), Unit: "requests",
		How: "the most DynamoDB requests one view of a page made, over the pages above (every one a Query or a GetItem)"})
	h.say("  dashboard pages: %s", strings.Join(lines, "; "))
	if h.o.ScreenshotDir != "" {
		if err := screenshots(ctx, srv, h.o.ScreenshotDir, "/runs/"+keys[len(keys)-1]); err != nil {
			return fmt.Errorf("screenshots: %w", err)
		}
		h.say("  screenshots written to %s", h.o.ScreenshotDir)
	}
	return nil
}

// nextLink is a page's link to the page after it.
var nextLink = regexp.MustCompile(`<a href="([^"]+)" id="next">`)

// followNext follows a page's next links n times and returns the page reached.
func followNext(ctx context.Context, srv http.Handler, path string, n int) (string, error) {
	for range n {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
		m := nextLink.FindStringSubmatch(rec.Body.String())
		if rec.Code != http.StatusOK || m == nil {
			return "", fmt.Errorf("GET %s: %d without a next link", path, rec.Code)
		}
		path = html.UnescapeString(m[1])
	}
	return path, nil
}

func truncateBody(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// benchPrice is an on-demand and a spot price per hour for every type.
func benchPrice(_ context.Context, _, usage, _ string) (float64, string) {
	if usage == fleet.Spot {
		return 0.035, "bench"
	}
	return 0.096, "bench"
}

// dashTargets are the seeded warm pools' schedules and targets (the configuration the service
// reads; the bench's table holds none): each pool's hot and stopped instances as seeded. Every
// other pool is autoscaled (its last decision as the service reads it from the pool's item), one
// of them missing its queue goal.
func dashTargets(instances int) []history.PoolCount {
	per := instances * 4 / 5 / dashPools
	out := make([]history.PoolCount, dashPools)
	for p := range out {
		out[p] = history.PoolCount{RunnerClass: dashPoolClass(p), Pool: fmt.Sprintf("org-%d", p), Schedule: "working-hours",
			TargetHot: per * 2 / 5, TargetStop: per - per*2/5}
		if p%2 == 0 {
			out[p].Autoscale = &history.PoolAutoscale{DecidedAt: time.Now().Add(-20 * time.Second), Forecast: 41.5,
				WindowHot: per, WindowStopped: per, Goal: 5 * time.Second, QueueP95: time.Duration(3+3*p) * time.Second, QueueJobs: 200,
				Reasons: []string{fmt.Sprintf("next quarter-hour needs %d hot: ready before it begins", per*2/5), fmt.Sprintf("%d stopped as the tail's buffer (start 14s against cold 27s)", per-per*2/5)}}
		}
	}
	return out
}

func dashPoolClass(p int) string { return []string{"linux", "linux-large"}[p%2] }

// seedDashboard writes the organisation: warm pools' records, runs' instances, history entries and
// a day of pool samples. It returns the run keys, oldest first.
func seedDashboard(ctx context.Context, db *dynamodb.Client, st *store.Store, hist *history.Store, instances, runs int, now time.Time) ([]string, error) {
	// Four fifths of the instances in four warm pools (two fifths of those hot), the rest held by
	// the newest runs.
	pooled := instances * 4 / 5
	per := pooled / dashPools
	for p := range dashPools {
		spec := warmpool.PoolSpec{
			Name: fmt.Sprintf("org-%d", p), Scope: "acme", SpecHash: "bench-v1",
			Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: dashPoolClass(p), LaunchTemplateID: "lt-0123456789abcdef0"}},
		}
		ids := make([]string, per)
		for i := range ids {
			ids[i] = fmt.Sprintf("i-%08x%09x", p+1, i)
		}
		if err := writeWarmRecords(ctx, st, spec, ids, per*2/5, now); err != nil {
			return nil, err
		}
	}
	keys := make([]string, runs)
	for i := range keys {
		keys[i] = fmt.Sprintf("%d:%d:1", 5000+i%dashRepos, 100000+i)
	}
	held := min(instances-pooled, runs)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i, key := range keys {
		g.Go(func() error { return seedRun(gctx, st, hist, i, key, runs, held, now) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// The run records of the runs whose pages are viewed (a run page reads its record first, and
	// its creation locates the history entry). Their number does not change what a view costs.
	for _, i := range []int{runs / 2, runs - 1} {
		at := runStart(now, i, runs, held)
		rs := store.New(db, dashTable, store.WithClock(func() time.Time { return at }))
		parts := strings.Split(keys[i], ":")
		if _, _, err := rs.CreateRun(ctx, store.Run{Key: keys[i], RepositoryID: parts[0], Repository: fmt.Sprintf("acme/repo-%02d", i%dashRepos), RunID: parts[1], Attempt: 1, Status: "succeeded"}); err != nil {
			return nil, err
		}
	}
	counts, err := poolCounts(ctx, st, now)
	if err != nil {
		return nil, err
	}
	// A day of samples every 5 minutes: the pools follow a working-day schedule, a working day of
	// 10 hours that ends now, so the latest sample (the counts the pools and instances pages show)
	// counts what the table holds.
	for i := range 24 * 12 {
		at := now.Add(-time.Duration(i) * 5 * time.Minute)
		busy := now.Sub(at) < 10*time.Hour
		sample := make([]history.PoolCount, len(counts))
		for j, c := range counts {
			c.States = scaled(c.States, busy)
			c.Billed = scaled(c.Billed, busy)
			sample[j] = c
		}
		if _, err := hist.RecordSample(ctx, at, sample); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// runStart is when the i-th of runs seeded runs started: the released ones spread over the week
// before the last half hour, the held ones (the newest, held of them) over the last half hour.
func runStart(now time.Time, i, runs, held int) time.Time {
	if i >= runs-held {
		return now.Add(-time.Duration(runs-i) * 30 * time.Minute / time.Duration(held+1))
	}
	done := runs - held
	return now.Add(-30*time.Minute - time.Duration(done-i)*7*24*time.Hour/time.Duration(done))
}

// scaled is a sample's counts: as now in working hours, a quarter of them at night.
func scaled(m map[string]int, busy bool) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		if !busy {
			v /= 4
		}
		out[k] = v
	}
	return out
}

// seedRun writes one run's history entry (released, except the newest held ones) and, for the
// newest held runs, its instance's record.
func seedRun(ctx context.Context, st *store.Store, hist *history.Store, i int, key string, runs, held int, now time.Time) error {
	started := runStart(now, i, runs, held)
	repo := fmt.Sprintf("acme/repo-%02d", i%dashRepos)
	id := fmt.Sprintf("i-f%016x", i)
	source := []string{history.SourceReused, history.SourceReused, history.SourceStarted, history.SourceCreated}[i%4]
	// What each source takes in production (the bench's anchors): a reused runner registers, a
	// started one boots from stopped first, a created one boots cold.
	took := map[string]time.Duration{history.SourceReused: 2400 * time.Millisecond, history.SourceStarted: 14 * time.Second, history.SourceCreated: 38 * time.Second}[source]
	p := history.Provision{
		RunKey: key, Repository: repo, RunID: strings.Split(key, ":")[1], Attempt: 1, RunnerClass: "linux",
		StartedAt: started, FinishedAt: started.Add(took), Status: "succeeded",
		Runners: []history.Runner{{InstanceID: id, InstanceType: "c6i.large", UsageClass: fleet.OnDemand, Zone: "us-east-1a", Source: source}},
		Steps:   history.Steps{Select: 200 * time.Millisecond, Register: 2 * time.Second, Total: took},
	}
	if err := hist.RecordProvision(ctx, p); err != nil {
		return err
	}
	if i >= runs-held {
		// The newest runs hold their instances: two in three running their jobs, the rest
		// released into the pool (idle, for their repository).
		_, err := st.Create(ctx, store.Instance{
			ID: id, State: store.StateCreated, RunID: key, Threshold: now.Add(time.Hour), UsageClass: fleet.OnDemand, InstanceType: "c6i.large",
			CPU: 2, MemoryMiB: 4096, RunnerClass: "linux", Scope: repo, Zone: "us-east-1a",
		})
		if err == nil {
			_, err = st.Transition(ctx, id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: key, Threshold: now.Add(time.Hour), Reason: "registered for " + key})
		}
		if err == nil && i%3 == 0 {
			_, err = st.Transition(ctx, id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, Threshold: now.Add(10 * time.Minute), Reason: "released by " + key})
		}
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		return nil
	}
	return hist.RecordRelease(ctx, history.Release{
		RunKey: key, StartedAt: started, ReleaseAt: started.Add(6 * time.Minute), FinishedAt: started.Add(6*time.Minute + time.Second),
		Outcomes: map[string]string{id: "pooled"},
	})
}

// poolCounts counts the live records by runner class and pool, as the service's sampler does
// (without the warm pools' configuration: the table holds none).
func poolCounts(ctx context.Context, st *store.Store, _ time.Time) ([]history.PoolCount, error) {
	live, err := st.Live(ctx)
	if err != nil {
		return nil, err
	}
	type key struct{ class, pool string }
	counts := map[key]*history.PoolCount{}
	for _, in := range live {
		k := key{in.RunnerClass, in.Pool}
		c := counts[k]
		if c == nil {
			c = &history.PoolCount{RunnerClass: k.class, Pool: k.pool, States: map[string]int{}, Billed: map[string]int{}}
			if k.pool != "" {
				c.Schedule, c.TargetHot, c.TargetStop = "working-hours", 0, 0
			}
			counts[k] = c
		}
		c.States[string(in.State)]++
		if in.State != store.StateStopped {
			c.Billed[in.InstanceType+"/"+in.UsageClass]++
		}
		if in.State == store.StateReady {
			c.TargetHot++
		}
		if in.State == store.StateStopped {
			c.TargetStop++
		}
	}
	out := make([]history.PoolCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b history.PoolCount) int {
		return strings.Compare(a.RunnerClass+"/"+a.Pool, b.RunnerClass+"/"+b.Pool)
	})
	return out, nil
}

// screenshots serves the pages on 127.0.0.1 and has Chromium save one PNG per page into dir.
func screenshots(ctx context.Context, srv http.Handler, dir, runPath string) error {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		return errors.New("chromium not found on PATH (make test-deps installs it)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	for _, p := range []struct{ name, path string }{
		{"pools", "/pools"}, {"runs", "/runs"}, {"run", runPath}, {"instances", "/instances"}, {"cost", "/cost?window=24h"},
	} {
		file, err := filepath.Abs(filepath.Join(dir, "dashboard-"+p.name+".png"))
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		out, err := exec.CommandContext(cctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+filepath.Join(os.TempDir(), "runnerpool-bench-chromium"),
			"--screenshot="+file, "--window-size=1280,900", "--hide-scrollbars", base+p.path).CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("chromium %s: %w\n%s", p.path, err, out)
		}
	}
	return nil
}
