// Package dashboard is the operator's read-only window on a deployment, served by `runnerpool
// serve` on its own listener (--dashboard-listen, off by default): pools (schedule target and
// counts over the last 24 hours), runs (each provision's timeline, the source of every runner, the
// outcome), instances, and cost (instance-seconds times price, with where every price came from).
//
// Pages are rendered on the server with html/template from embedded templates and one embedded
// stylesheet: no JavaScript, nothing fetched from anywhere at run time; charts are inline SVG.
//
// It has no authentication of its own and must never be reachable except through a load balancer
// that authenticates the operator (an ALB listener rule with authenticate-oidc; see
// docs/dashboard.md). It writes nothing, and every bad request (an unknown run, a page number out
// of range, a malformed query string) is answered with a 4xx page, never a 500 or a stack trace.
package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

//go:embed assets
var assets embed.FS

// Store is the part of *store.Store the dashboard reads.
type Store interface {
	ByStatePage(ctx context.Context, state store.State, n int, cursor string) ([]store.Instance, string, error)
	GetRun(ctx context.Context, key string) (store.Run, error)
}

// History is the part of *history.Store the dashboard reads.
type History interface {
	history.Reader
	GetRun(ctx context.Context, key string, startedAt time.Time) (history.Run, error)
	LatestSample(ctx context.Context, at time.Time) (history.Sample, error)
	Retention() time.Duration
}

// Options configure a Dashboard.
type Options struct {
	Store   Store
	History History
	// Targets returns every configured warm pool's schedule, targets and next schedule change now:
	// the configuration only. The counts the pools page shows come from the latest pool sample
	// (read with the day's samples the charts need), never from the live records, so a view costs
	// the same with 20 or 20,000 instances.
	Targets func(ctx context.Context, now time.Time) ([]history.PoolCount, error)
	Price   history.Pricer
	// RunsPerPage (default 100) and MaxRuns (default 1000): the runs pages list the newest MaxRuns.
	RunsPerPage, MaxRuns int
	// InstancesPerPage is the instances page size (default 500).
	InstancesPerPage int
	// CostTTL is how long a computed cost report is reused by pages and metrics (default 1 min).
	CostTTL time.Duration
	// Postures returns each runner class's declared posture (job_access, reuse), shown with its
	// pools (nil: not shown).
	Postures func(ctx context.Context) (map[string]Posture, error)
	// Quotas lists the limits and their counts for the quotas page (nil: none).
	Quotas func(ctx context.Context) ([]QuotaRow, error)
	// Deployment names the deployment in page titles.
	Deployment string
	Now        func() time.Time
	Logger     *slog.Logger
}

// Posture is a runner class's declared job posture: what its jobs may do (job_access: user, docker,
// root) and which runs its instances may serve next (reuse: any-repository, same-repository, never).
type Posture struct{ JobAccess, Reuse string }

// Dashboard serves the pages.
type Dashboard struct {
	o    Options
	tmpl map[string]*template.Template
	css  []byte

	mu    sync.Mutex
	costs map[time.Duration]cachedReport
}

type cachedReport struct {
	at  time.Time
	rep history.Report
}

// Windows are the cost windows a page may ask for.
var Windows = []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// New parses the templates and returns a Dashboard.
func New(o Options) (*Dashboard, error) {
	if o.Store == nil || o.History == nil || o.Price == nil {
		return nil, errors.New("dashboard: store, history and price are required")
	}
	if o.RunsPerPage <= 0 {
		o.RunsPerPage = 100
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = 1000
	}
	if o.InstancesPerPage <= 0 {
		o.InstancesPerPage = 500
	}
	if o.CostTTL <= 0 {
		o.CostTTL = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Quotas == nil {
		o.Quotas = func(context.Context) ([]QuotaRow, error) { return nil, nil }
	}
	if o.Targets == nil {
		o.Targets = func(context.Context, time.Time) ([]history.PoolCount, error) { return nil, nil }
	}
	d := &Dashboard{o: o, tmpl: map[string]*template.Template{}, costs: map[time.Duration]cachedReport{}}
	css, err := fs.ReadFile(assets, "assets/style.css")
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d.css = css
	for _, page := range []string{"pools", "runs", "run", "instances", "cost", "quotas", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", page, err)
		}
		d.tmpl[page] = t
	}
	return d, nil
}

// Handler serves the dashboard: GET and HEAD only.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/pools", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /pools", d.page(d.pools))
	mux.HandleFunc("GET /runs", d.page(d.runs))
	mux.HandleFunc("GET /runs/{key}", d.page(d.run))
	mux.HandleFunc("GET /instances", d.page(d.instances))
	mux.HandleFunc("GET /cost", d.page(d.cost))
	mux.HandleFunc("GET /quotas", d.page(d.quotas))
	mux.HandleFunc("GET /static/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(d.css)
	})
	return d.guard(mux)
}

// guard answers everything the mux would answer in plain text (404, 405) with a page, sets the
// security headers, and turns a panic into a logged 500 page without a stack trace.
func (d *Dashboard) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				d.o.Logger.Error("dashboard: panic", "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				d.fail(w, r, &pageError{status: http.StatusInternalServerError, msg: "internal error: see the reconciler's log"})
			}
		}()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			d.fail(w, r, &pageError{status: http.StatusMethodNotAllowed, msg: "the dashboard is read-only: GET only"})
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			d.fail(w, r, &pageError{status: http.StatusNotFound, msg: "no such page"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// pageError is an answer other than 200: its status and a message for the reader.
type pageError struct {
	status int
	msg    string
}

func (e *pageError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &pageError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

func notFound(format string, a ...any) error {
	return &pageError{status: http.StatusNotFound, msg: fmt.Sprintf(format, a...)}
}

// view is what a page handler returns: the template and its data.
type view struct {
	page  string
	title string
	data  any
}

func (d *Dashboard) page(h func(r *http.Request, q url.Values) (view, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			d.fail(w, r, badRequest("malformed query string"))
			return
		}
		v, err := h(r, q)
		if err != nil {
			d.fail(w, r, err)
			return
		}
		d.render(w, r, http.StatusOK, v)
	}
}

func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pe *pageError
	if !errors.As(err, &pe) {
		// The table or another dependency failed: say so without its text (which may name
		// resources), and log it.
		d.o.Logger.Error("dashboard: reading state", "path", r.URL.Path, "error", err)
		pe = &pageError{status: http.StatusServiceUnavailable, msg: "the state could not be read; try again (the reconciler's log has the cause)"}
	}
	d.render(w, r, pe.status, view{page: "error", title: http.StatusText(pe.status), data: pe})
}

type layoutData struct {
	Title, Nav, Deployment string
	Now                    time.Time
	Page                   any
}

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, v view) {
	var buf bytes.Buffer
	if err := d.tmpl[v.page].Execute(&buf, layoutData{Title: v.title, Nav: v.page, Deployment: d.o.Deployment, Now: d.o.Now().UTC(), Page: v.data}); err != nil {
		d.o.Logger.Error("dashboard: rendering", "page", v.page, "error", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("internal error rendering the page\n"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// only rejects query parameters a page does not know, and repeated ones.
func only(q url.Values, known ...string) error {
	for k, vs := range q {
		if !slices.Contains(known, k) {
			return badRequest("unknown query parameter %q", truncate(k, 40))
		}
		if len(vs) > 1 {
			return badRequest("query parameter %q given %d times", k, len(vs))
		}
	}
	return nil
}

// pageNumber parses ?page=N (1 when absent) within [1, last].
func pageNumber(q url.Values, last int) (int, error) {
	s := q.Get("page")
	if s == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, badRequest("page %q: want a whole number from 1", truncate(s, 40))
	}
	if n > max(last, 1) {
		return 0, notFound("page %d: there are %d pages", n, max(last, 1))
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Cost returns the cost report of the window ending now, computed at most once per CostTTL (the
// page and the metrics share it).
func (d *Dashboard) Cost(ctx context.Context, window time.Duration) (history.Report, error) {
	return d.CostWithin(ctx, window, d.o.CostTTL)
}

// CostWithin is Cost with a report at most maxAge old (the metrics take 5 minutes: a scrape
// every 15 s must not read the table every 15 s).
func (d *Dashboard) CostWithin(ctx context.Context, window, maxAge time.Duration) (history.Report, error) {
	now := d.o.Now()
	d.mu.Lock()
	c, ok := d.costs[window]
	d.mu.Unlock()
	if ok && now.Sub(c.at) < maxAge {
		return c.rep, nil
	}
	rep, err := history.Compute(ctx, d.o.History, d.o.Price, now.Add(-window), now)
	if err != nil {
		return history.Report{}, err
	}
	d.mu.Lock()
	d.costs[window] = cachedReport{at: now, rep: rep}
	d.mu.Unlock()
	return rep, nil
}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"hm": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("Jan 2 15:04")
	},
	"dur":   fmtDur,
	"secs":  func(s float64) string { return fmtDur(time.Duration(s * float64(time.Second))) },
	"usd":   USD,
	"hours": func(s float64) string { return fmt.Sprintf("%.2f h", s/3600) },
	"gb":    func(b int64) string { return fmt.Sprintf("%.2f GB", float64(b)/1e9) },
	"price": func(v float64, src string) string {
		if src == history.PriceUnknown || src == "" {
			return "unknown"
		}
		return fmt.Sprintf("$%.4f/h", v)
	},
	"runURL": func(key string) string { return "/runs/" + url.PathEscape(key) },
	"add":    func(a, b int) int { return a + b },
	"sub":    func(a, b int) int { return a - b },
	"state":  func(m map[string]int, s string) int { return m[s] },
}

// USD formats money: cents for sums, more digits for the fractions of a cent a short run costs.
func USD(v float64) string {
	if v != 0 && math.Abs(v) < 0.01 {
		return fmt.Sprintf("$%.6f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func poolName(p history.PoolCount) string {
	return cmp.Or(p.Pool, "(no pool)")
}

// ResetCost drops the cached cost reports (benchmarks and tests).
func (d *Dashboard) ResetCost() {
	d.mu.Lock()
	d.costs = map[time.Duration]cachedReport{}
	d.mu.Unlock()
}
