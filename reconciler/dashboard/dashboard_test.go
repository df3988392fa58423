package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/dashboard"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// fakeStore and fakeHistory serve fixed data (the pages' logic and the render benchmark; the
// integration tests in reconciler/service use the real table).
type fakeStore struct {
	live []store.Instance
	runs map[string]store.Run
	err  error
}

// ByStatePage pages a state's records earliest threshold first; its cursor is an offset.
func (f *fakeStore) ByStatePage(_ context.Context, state store.State, n int, cursor string) ([]store.Instance, string, error) {
	var out []store.Instance
	for _, in := range f.live {
		if in.State == state {
			out = append(out, in)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Instance) int { return a.Threshold.Compare(b.Threshold) })
	from := 0
	if cursor != "" {
		var err error
		if from, err = strconv.Atoi(cursor); err != nil || from < 0 {
			return nil, "", fmt.Errorf("cursor %q: %w", cursor, store.ErrInvalid)
		}
	}
	from = min(from, len(out))
	to, next := min(from+n, len(out)), ""
	if to < len(out) {
		next = strconv.Itoa(to)
	}
	return out[from:to], next, f.err
}

func (f *fakeStore) GetRun(_ context.Context, key string) (store.Run, error) {
	if r, ok := f.runs[key]; ok {
		return r, nil
	}
	return store.Run{}, fmt.Errorf("run %s: %w", key, store.ErrNotFound)
}

type fakeHistory struct {
	runs    []history.Run // newest first
	samples []history.Sample
}

func (f *fakeHistory) RecentRuns(_ context.Context, _, _ time.Time, limit int) ([]history.Run, error) {
	if limit > 0 && limit < len(f.runs) {
		return f.runs[:limit], nil
	}
	return f.runs, nil
}
func (f *fakeHistory) Samples(context.Context, time.Time, time.Time) ([]history.Sample, error) {
	return f.samples, nil
}
func (f *fakeHistory) LatestSample(_ context.Context, at time.Time) (history.Sample, error) {
	for i := len(f.samples) - 1; i >= 0; i-- {
		if !f.samples[i].At.After(at) {
			return f.samples[i], nil
		}
	}
	return history.Sample{}, history.ErrNotFound
}
func (f *fakeHistory) SampleInterval() time.Duration { return 5 * time.Minute }
func (f *fakeHistory) Retention() time.Duration      { return 30 * 24 * time.Hour }
func (f *fakeHistory) GetRun(_ context.Context, key string, _ time.Time) (history.Run, error) {
	for _, r := range f.runs {
		if r.RunKey == key {
			return r, nil
		}
	}
	return history.Run{}, history.ErrNotFound
}

func price(_ context.Context, typ, usage, _ string) (float64, string) {
	if usage == "spot" {
		return 0.035, "aws-spot-history"
	}
	return 0.096, "price-file"
}

// fixture builds a deployment of nRuns runs and nInstances live instances, with a day of samples
// of three warm pools: "nightly" is gone since 04:10 (no more samples) and the latest sample, at
// t0, counts the live instances.
func fixture(nRuns, nInstances int) (*fakeStore, *fakeHistory) {
	st := &fakeStore{runs: map[string]store.Run{}}
	h := &fakeHistory{}
	states := []store.State{store.StateIdle, store.StateRunning, store.StateReady, store.StateStopped, store.StateClaimed}
	for i := range nInstances {
		st.live = append(st.live, store.Instance{
			ID: fmt.Sprintf("i-%017x", i), State: states[i%len(states)], RunID: fmt.Sprintf("4242:%d:1", i%nRuns+1),
			Threshold: t0.Add(time.Duration(i%90) * time.Minute), InstanceType: "c6i.large", UsageClass: []string{"on-demand", "spot"}[i%2],
			RunnerClass: "linux", Pool: []string{"", "hot"}[i%2], Scope: "acme/api", Zone: "eu-west-1a",
			CreatedAt: t0.Add(-time.Duration(i) * time.Minute),
		})
	}
	for i := nRuns; i >= 1; i-- {
		key := fmt.Sprintf("4242:%d:1", i)
		start := t0.Add(-time.Duration(nRuns-i) * time.Minute)
		st.runs[key] = store.Run{Key: key, Repository: "acme/api", RunID: fmt.Sprint(i), Attempt: 1, Status: "succeeded", CreatedAt: start}
		r := history.Run{Provision: history.Provision{
			RunKey: key, Repository: []string{"acme/api", "acme/web", "acme/infra"}[i%3], RunID: fmt.Sprint(i), Attempt: 1, RunnerClass: "linux",
			StartedAt: start, FinishedAt: start.Add(40 * time.Second), Status: "succeeded",
			Steps: history.Steps{Select: 2 * time.Second, Create: 20 * time.Second, Register: 15 * time.Second, Post: time.Second, Total: 38 * time.Second},
		}, ReleaseAt: start.Add(5 * time.Minute), ReleasedAt: start.Add(5*time.Minute + 3*time.Second)}
		for j := range 3 {
			src := []string{history.SourceReused, history.SourceReused, history.SourceCreated}[j]
			r.Runners = append(r.Runners, history.Runner{InstanceID: fmt.Sprintf("i-%d-%d", i, j), InstanceType: "c6i.large", UsageClass: "on-demand", Source: src, Released: "pooled"})
		}
		if i == 8 {
			r.ReleaseNote = "released run 8: 2 pooled, 1 expired; " + release.Reclaimed + ": i-8-2"
		}
		h.runs = append(h.runs, r)
	}
	for k := range 288 {
		s := history.Sample{At: t0.Add(-24 * time.Hour).Add(time.Duration(k+1) * 5 * time.Minute)}
		for _, p := range []string{"hot", "nightly", ""} {
			if p == "nightly" && k >= 194 {
				continue
			}
			s.Pools = append(s.Pools, history.PoolCount{RunnerClass: "linux", Pool: p, TargetHot: 4, States: map[string]int{"ready": k % 5, "idle": 2, "running": k % 7}, Billed: map[string]int{"c6i.large/on-demand": k % 5}})
		}
		h.samples = append(h.samples, s)
	}
	last := &h.samples[len(h.samples)-1]
	for i := range last.Pools {
		last.Pools[i].States = map[string]int{}
	}
	for _, in := range st.live {
		last.Pools[slices.IndexFunc(last.Pools, func(c history.PoolCount) bool { return c.Pool == in.Pool })].States[string(in.State)]++
	}
	return st, h
}

func newDashboard(t testing.TB, st *fakeStore, h *fakeHistory, perPage int) *dashboard.Dashboard {
	d, err := dashboard.New(dashboard.Options{
		Store: st, History: h, Price: price, InstancesPerPage: perPage, Now: func() time.Time { return t0 },
		Targets: func(context.Context, time.Time) ([]history.PoolCount, error) {
			return []history.PoolCount{{RunnerClass: "linux", Pool: "hot", TargetHot: 4, NextChange: t0.Add(3 * time.Hour), NextHot: 0}}, nil
		},
		Postures: func(context.Context) (map[string]dashboard.Posture, error) {
			return map[string]dashboard.Posture{"linux": {JobAccess: "root", Reuse: "same-repository"}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func serve(h http.Handler, method, target string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// TestPages: each page's content from fixed data, and every bad request a 4xx page; a failing
// table is a 503 that does not repeat the error's text.
func TestPages(t *testing.T) {
	t.Parallel()
	st, h := fixture(250, 40)
	srv := newDashboard(t, st, h, 10).Handler()
	for _, tt := range []struct {
		target string
		want   int
		has    []string
	}{
		{"/", http.StatusSeeOther, nil},
		{"/pools", 200, []string{"hot", "next change", "Counts from the pool sample of 2026-11-25 12:00:00 UTC (0s ago)", "Nov 25 15:00 → 0 hot", "polyline", "nightly (gone)",
			`class="posture warn"`, "job access <b>root</b>, reuse <b>same-repository</b>", "the job owns the machine"}},
		{"/runs", 200, []string{"4242:250:1", "2 reused, 1 created", "page 1", "?page=2"}},
		{"/runs?page=3", 200, []string{"4242:50:1", "page 3", "?page=2"}},
		{"/runs/4242:7:1", 200, []string{"selection", "registration", "jobs", "release", "price-file", "$0.008"}},
		{"/runs/4242:8:1", 200, []string{`class="ph-reclaimed"`, "jobs", "release"}},
		{"/instances?state=idle&page=1", 200, []string{"idle (8)", "page 1 of 1"}},
		{"/instances", 200, []string{"idle (8)", "page 1 of 4", "Counts from the pool sample of 2026-11-25 12:00:00 UTC", `id="next"`}},
		{"/instances?page=4", 400, []string{"reached through their links"}},
		{"/instances?page=2&after=idle.5", 200, []string{"page 2 of 4"}},
		{"/instances?after=bogus.5", 400, []string{"malformed page cursor"}},
		{"/instances?after=idle.x", 400, []string{"malformed page cursor"}},
		{"/instances?state=idle&after=running.0", 400, []string{"malformed page cursor"}},
		{"/instances?page=0&after=idle.5", 400, nil},
		{"/cost?window=1h", 200, []string{"acme/web", "cold-start baseline 38.0s", "price-file"}},
		{"/cost", 200, []string{"and 50 older runs"}},
		{"/static/style.css", 200, []string{"--accent"}},
		{"/runs?page=4", 404, []string{"there are 3 pages"}},
		{"/runs?page=11", 404, nil},
		{"/runs?page=0", 400, nil},
		{"/runs?page=1e3", 400, nil},
		{"/runs/4242:999:1", 404, []string{"no run"}},
		{"/runs/%00", 404, nil},
		{"/instances?page=5", 404, nil},
		{"/instances?state=running%", 400, []string{"malformed query string"}},
		{"/cost?window=", 200, nil},
		{"/cost?window=-1h", 400, nil},
		{"/cost?window=1h&window=7d", 400, nil},
		{"/pools?" + strings.Repeat("a=1&", 300), 400, nil},
		{"/static/other.css", 404, nil},
	} {
		code, body := serve(srv, http.MethodGet, tt.target)
		if code != tt.want {
			t.Errorf("GET %s: %d, want %d\n%s", tt.target, code, tt.want, body)
		}
		for _, s := range tt.has {
			if !strings.Contains(body, s) {
				t.Errorf("GET %s lacks %q", tt.target, s)
			}
		}
	}
	if code, body := serve(srv, http.MethodHead, "/pools"); code != 200 || body != "" {
		t.Errorf("HEAD /pools: %d with %d bytes", code, len(body))
	}
	st.err = errors.New("dynamodb: AccessDeniedException: arn:aws:iam::123456789012:role/x is not authorized")
	code, body := serve(srv, http.MethodGet, "/instances")
	if code != http.StatusServiceUnavailable || strings.Contains(body, "AccessDenied") || strings.Contains(body, "arn:") {
		t.Errorf("a failing table: %d\n%s", code, body)
	}
}

// TestInstancesPages: following the next links from the first page lists every live record once,
// by state then earliest deadline first, for the whole list and for each state; the last page
// has no next link.
func TestInstancesPages(t *testing.T) {
	t.Parallel()
	st, h := fixture(250, 43)
	srv := newDashboard(t, st, h, 4).Handler()
	next := regexp.MustCompile(`<a href="([^"]+)" id="next">`)
	row := regexp.MustCompile(`<tr><td>(i-[0-9a-f]+)</td>`)
	for _, first := range []string{"/instances", "/instances?state=idle", "/instances?state=claimed"} {
		var want []string
		for _, s := range store.LiveStates {
			if strings.Contains(first, "state=") && !strings.HasSuffix(first, "="+string(s)) {
				continue
			}
			recs, _, _ := st.ByStatePage(t.Context(), s, 1000, "")
			for _, in := range recs {
				want = append(want, in.ID)
			}
		}
		var got []string
		target := first
		for page := 1; target != ""; page++ {
			code, body := serve(srv, http.MethodGet, target)
			if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf("page %d of", page)) {
				t.Fatalf("GET %s: %d, want page %d\n%s", target, code, page, body)
			}
			for _, m := range row.FindAllStringSubmatch(body, -1) {
				got = append(got, m[1])
			}
			target = ""
			if m := next.FindStringSubmatch(body); m != nil {
				target = html.UnescapeString(m[1])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages from %s listed %d records %v, want %d %v", first, len(got), got, len(want), want)
		}
	}
}

// BenchmarkPages renders every page of a deployment with 1,000 runs and 2,000 instances (all on
// one instances page): the cost of the server side of a page view, without the table reads.
func BenchmarkPages(b *testing.B) {
	st, h := fixture(1000, 2000)
	d := newDashboard(b, st, h, 2000)
	srv := d.Handler()
	for _, page := range []string{"/pools", "/runs", "/runs?page=10", "/runs/4242:500:1", "/instances", "/cost", "/cost?window=7d"} {
		b.Run(strings.TrimPrefix(page, "/"), func(b *testing.B) {
			var size int
			for b.Loop() {
				if strings.HasPrefix(page, "/cost") {
					d.ResetCost() // the cache would hide the computation
				}
				code, body := serve(srv, http.MethodGet, page)
				if code != http.StatusOK {
					b.Fatalf("%s: %d", page, code)
				}
				size = len(body)
			}
			b.ReportMetric(float64(size)/1024, "KiB/page")
		})
	}
}
