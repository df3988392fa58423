package service_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// dashboardPrices is the operator price file of the dashboard tests: on-demand c6i prices only, so
// a spot or other runner would show as unpriced rather than guessed.
const dashboardPrices = `{"prices": [
  {"instance_type": "c6i.large", "usage_class": "on-demand", "per_hour": 0.085},
  {"instance_type": "c6i.xlarge", "usage_class": "on-demand", "per_hour": 0.17},
  {"instance_type": "c6i.2xlarge", "usage_class": "on-demand", "per_hour": 0.34}
]}`

// dashboardEnv runs a replica with the dashboard on its own listener and two workflows through the
// public API: the first reuses two pooled runners and creates one, the second reuses two.
func dashboardEnv(t *testing.T) (env *servicetest.Env, r *servicetest.Replica, dash string, runKeys []string) {
	t.Helper()
	env = servicetest.New(t, servicetest.Options{})
	prices := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(prices, []byte(dashboardPrices), 0o600); err != nil {
		t.Fatal(err)
	}
	env.Fill(t, 2)
	r = env.Start(t, "a", map[string]string{
		"RUNNERPOOL_DASHBOARD_LISTEN":        "127.0.0.1:0",
		"RUNNERPOOL_PRICE_FILE":              prices,
		"RUNNERPOOL_CONVERGE_SCHEDULE":       "@every 1s",
		"RUNNERPOOL_HISTORY_SAMPLE_INTERVAL": "10s",
	})
	dash = r.Service.DashboardURL()
	if dash == "" {
		t.Fatal("no dashboard URL with --dashboard-listen set")
	}
	for i, n := range []int{3, 2} {
		runID := fmt.Sprint(2001 + i)
		tok := env.Token(t, runID, nil)
		code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, tok, provisionBody(n))
		if code != http.StatusOK {
			t.Fatalf("provision of run %s: %d %s", runID, code, body)
		}
		runKeys = append(runKeys, servicetest.Decode[apiv1.ProvisionResponse](t, body).RunKey)
		if code, body = servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathRelease, tok, apiv1.ReleaseRequest{IdleTimeSeconds: 600}); code != http.StatusOK {
			t.Fatalf("release of run %s: %d %s", runID, code, body)
		}
	}
	// The leader samples the pools once per interval in its convergence job.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := r.Service.History().HasSample(context.Background(), time.Now())
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pool sample within 20s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return env, r, dash, runKeys
}

func get(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDashboard: every page shows what the workflows did (sources, timeline, prices with their
// source, counts), the cost series agree with the page, and bad input is a 4xx page, never a 500.
func TestDashboard(t *testing.T) {
	t.Parallel()
	_, r, dash, keys := dashboardEnv(t)

	pages := []struct {
		path string
		want []string
	}{
		{"/pools", []string{"runner class linux", "(no pool)", "<svg class=\"chart\"", "samples", "idle"}},
		{"/runs", []string{"2001", "2002", "2 reused, 1 created", "2 reused", "released", "acme/api"}},
		{"/runs/" + keys[0], []string{"Timeline", "selection", "create", "registration", "jobs", "release", "price-file", "pooled", "$0.", "2 reused, 1 created"}},
		{"/instances", []string{"idle", "acme/api", "c6i."}},
		{"/cost", []string{"acme/api", "price-file", "saved by reuse", "Per run", keys[1], "linux (idle runners)"}},
		{"/cost?window=7d", []string{"acme/api"}},
	}
	for _, p := range pages {
		code, body := get(t, http.MethodGet, dash+p.path)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200:\n%s", p.path, code, body)
			continue
		}
		for _, w := range p.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q", p.path, w)
			}
		}
		if strings.Contains(body, "<script") {
			t.Errorf("GET %s has a script", p.path)
		}
	}

	bad := []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/runs/4242:999:1", http.StatusNotFound},
		{http.MethodGet, "/runs/not-a-run", http.StatusNotFound},
		{http.MethodGet, "/runs/" + strings.Repeat("x", 5000), http.StatusNotFound},
		{http.MethodGet, "/runs?page=99999999999999999999999", http.StatusBadRequest},
		{http.MethodGet, "/runs?page=9", http.StatusNotFound},
		{http.MethodGet, "/runs?page=-1", http.StatusBadRequest},
		{http.MethodGet, "/runs?page=1&page=2", http.StatusBadRequest},
		{http.MethodGet, "/instances?page=2000000", http.StatusNotFound},
		{http.MethodGet, "/instances?state=bogus", http.StatusBadRequest},
		{http.MethodGet, "/instances?state=terminated", http.StatusBadRequest},
		{http.MethodGet, "/cost?window=13d", http.StatusBadRequest},
		{http.MethodGet, "/pools?%zz", http.StatusBadRequest},
		{http.MethodGet, "/pools?a=%", http.StatusBadRequest},
		{http.MethodGet, "/pools?x=1", http.StatusBadRequest},
		{http.MethodGet, "/nope", http.StatusNotFound},
		{http.MethodGet, "/runs/a/b", http.StatusNotFound},
		{http.MethodPost, "/pools", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/runs/" + keys[0], http.StatusMethodNotAllowed},
	}
	for _, b := range bad {
		code, body := get(t, b.method, dash+b.path)
		if code != b.want {
			t.Errorf("%s %s: %d, want %d", b.method, truncated(b.path), code, b.want)
		}
		if !strings.Contains(body, `<p class="error" id="error">`) || strings.Contains(body, "goroutine") || strings.Contains(body, ".go:") {
			t.Errorf("%s %s: want an error page without internals, got:\n%s", b.method, truncated(b.path), body)
		}
	}

	// The cost series come from the same report as the page.
	m := scrapeMetrics(t, r.URL)
	_, costPage := get(t, http.MethodGet, dash+"/cost")
	total := regexp.MustCompile(`runnerpool_cost_usd\{kind="total",name="total",price_source="price-file",replica="a",window="24h"\} ([0-9.e+-]+)`).FindStringSubmatch(m)
	if total == nil {
		t.Fatalf("/metrics lacks the total cost series:\n%s", grepLines(m, "runnerpool_cost"))
	}
	var v float64
	if _, err := fmt.Sscan(total[1], &v); err != nil || v <= 0 || !strings.Contains(costPage, "<b>"+dashboard.USD(v)+"</b>") {
		t.Errorf("total cost series %s does not match the page", total[1])
	}
	for _, want := range []string{`runnerpool_cost_usd{kind="repository",name="acme/api"`, `runnerpool_reuse_saved_usd{`, `runnerpool_cost_runs{replica="a",window="24h"} 2`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func truncated(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDashboardChromium drives the pages in headless Chromium (Debian's chromium, installed by
// make deps): each page's rendered DOM has its content, the run page is reached by following the
// runs page's link, and a screenshot of every page is saved (into $RUNNERPOOL_DASHBOARD_SCREENSHOTS
// when set: docs/dashboard-*.png are made that way).
func TestDashboardChromium(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	_, _, dash, keys := dashboardEnv(t)
	shots := os.Getenv("RUNNERPOOL_DASHBOARD_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}

	dom := func(path string) string {
		out := browser.run(t, "--dump-dom", dash+path)
		if !strings.Contains(out, "</html>") {
			t.Fatalf("chromium --dump-dom %s: no document:\n%s", path, out)
		}
		return out
	}
	runs := dom("/runs")
	// Follow the link of the oldest run (the first workflow: reused and created runners).
	links := regexp.MustCompile(`href="(/runs/[^"?]+)"`).FindAllStringSubmatch(runs, -1)
	if links == nil {
		t.Fatalf("the runs page has no link to a run:\n%s", runs)
	}
	runPath := links[len(links)-1][1]
	for _, p := range []struct {
		name, path string
		want       []string
	}{
		{"pools", "/pools", []string{"runner class linux", "<svg", "polyline"}},
		{"runs", "/runs", []string{"2 reused, 1 created", "released"}},
		{"run", runPath, []string{"Timeline", "rect class=\"ph-selection\"", "rect class=\"ph-create\"", "price-file", "2 reused, 1 created"}},
		{"instances", "/instances", []string{"idle", "c6i."}},
		{"cost", "/cost", []string{"saved by reuse", "price-file", keys[0]}},
		{"error", "/runs/4242:999:1", []string{"no run"}},
	} {
		got := dom(p.path)
		for _, w := range p.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s (%s) in Chromium lacks %q", p.name, p.path, w)
			}
		}
		file := filepath.Join(shots, "dashboard-"+p.name+".png")
		browser.run(t, "--screenshot="+file, "--window-size=1280,900", "--hide-scrollbars", dash+p.path)
		if st, err := os.Stat(file); err != nil || st.Size() < 5000 {
			t.Errorf("screenshot of %s: %v (want a PNG of some size)", p.name, err)
		}
	}
}

type browser struct {
	path string
}

// chromium finds Debian's chromium (make deps installs it).
func chromium(t *testing.T) browser {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return browser{path: p}
		}
	}
	t.Fatal("chromium not found on PATH: run make deps (it installs Debian's chromium package)")
	return browser{}
}

// run starts a headless Chromium with a fresh profile, no network beyond the page, and returns
// its standard output.
func (b browser) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	all := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(),
	}, args...)
	cmd := exec.CommandContext(ctx, b.path, all...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestDashboardWarmPool: a warm pool's schedule target, its next change and its hot instance on
// the pools page, and its standing cost (the hot instance waiting) on the cost page, from the
// leader's samples.
func TestDashboardWarmPool(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	repo := declared.NewRepository(env.Store)
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	// A second schedule from the next hour on: the page shows when the target changes.
	next := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	wp := declared.WarmPool{Name: "warm", RunnerClass: rc.Name, Schedules: []schedule.Schedule{
		{Name: schedule.DefaultName, Hot: 1},
		{Name: "peak", Hot: 3, Match: &schedule.Match{Times: []schedule.TimeRange{{Start: next.Format("15:04"), End: next.Add(time.Hour).Format("15:04")}}}},
	}}
	if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	env.Hot(t, rc, wp.Name, declared.SpecHash(rc, wp), 1)
	prices := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(prices, []byte(`{"prices":[{"instance_type":"*","per_hour":0.1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_DASHBOARD_LISTEN": "127.0.0.1:0", "RUNNERPOOL_PRICE_FILE": prices,
		"RUNNERPOOL_CONVERGE_SCHEDULE": "@every 1s", "RUNNERPOOL_HISTORY_SAMPLE_INTERVAL": "10s",
	})
	dash := r.Service.DashboardURL()
	waitFor(t, 20*time.Second, "a pool sample", func() bool {
		ok, err := r.Service.History().HasSample(ctx, time.Now())
		return err == nil && ok
	})
	code, body := get(t, http.MethodGet, dash+"/pools")
	for _, want := range []string{`id="pool-linux-warm"`, "<td>1 hot, 0 stopped</td>", next.Format("Jan 2 15:04") + " → 3 hot, 0 stopped", "<polyline"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/pools: %d, lacks %q", code, want)
		}
	}
	code, body = get(t, http.MethodGet, dash+"/cost?window=1h")
	if code != http.StatusOK || !regexp.MustCompile(`<tr><td>warm</td><td class="n">0</td><td class="n">[^<]+</td><td class="n">\$[0-9.]+</td><td class="n">0s</td><td>price-file</td>`).MatchString(body) {
		t.Errorf("/cost: %d, want the warm pool's standing cost:\n%s", code, grepLines(body, "warm"))
	}
}
