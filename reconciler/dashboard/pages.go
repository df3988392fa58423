// The page handlers: each reads what it shows (indexed queries and key reads only), validates its
// query string, and returns the data its template renders.
package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/history"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// ---- Pools -------------------------------------------------------------------------------------

type poolRow struct {
	history.PoolCount
	Name    string
	Posture postureView
	Chart   template.HTML
	Samples int
}

type poolsPage struct {
	Pools    []poolRow
	Interval time.Duration
	Samples  int
	States   []string
	// SampledAt is the time of the latest pool sample, whose counts the page shows (zero: no
	// sample in the last 24 hours, counts unknown); Age is how old it was when the page was read.
	SampledAt time.Time
	Age       time.Duration
}

// postureView is a runner class's posture as the pools page shows it, with what it hands a job.
type postureView struct {
	JobAccess, Reuse, Hands string
	Root                    bool // the job owns the machine: shown as a warning
}

func postureOf(p Posture) postureView {
	v := postureView{JobAccess: cmp.Or(p.JobAccess, "user"), Reuse: cmp.Or(p.Reuse, "any-repository")}
	switch v.JobAccess {
	case "root":
		v.Hands, v.Root = "sudo and rootful Docker: the job owns the machine", true
	case "docker":
		v.Hands = "a rootless Docker daemon of the runner user: no root on the host"
	default:
		v.Hands = "the unprivileged runner user: no root, no Docker daemon"
	}
	return v
}

// chartSeries are the series of a pool chart, with their CSS classes.
var chartSeries = []struct{ state, class string }{
	{"ready", "s-hot"}, {"stopped", "s-stopped"}, {"idle", "s-idle"}, {"claimed", "s-claimed"}, {"running", "s-running"},
}

// poolKey names a pools page row: a warm pool, or a runner class's instances outside pools.
type poolKey struct{ class, pool string }

func (d *Dashboard) pools(r *http.Request, q url.Values) (view, error) {
	if err := only(q); err != nil {
		return view{}, err
	}
	ctx, now := r.Context(), d.o.Now()
	targets, err := d.o.Targets(ctx, now)
	if err != nil {
		return view{}, err
	}
	samples, err := d.o.History.Samples(ctx, now.Add(-24*time.Hour), now)
	if err != nil {
		return view{}, err
	}
	series := map[poolKey][]poolPoint{}
	for _, s := range samples {
		for _, p := range s.Pools {
			k := poolKey{p.RunnerClass, p.Pool}
			series[k] = append(series[k], poolPoint{at: s.At, c: p})
		}
	}
	postures := map[string]Posture{}
	if d.o.Postures != nil {
		if postures, err = d.o.Postures(ctx); err != nil {
			return view{}, err
		}
	}
	page := poolsPage{Interval: d.o.History.SampleInterval(), Samples: len(samples), States: []string{"warming", "ready", "stopped", "idle", "claimed", "running", "created", "terminating"}}
	var latest history.Sample
	if len(samples) > 0 {
		latest = samples[len(samples)-1]
		page.SampledAt, page.Age = latest.At, max(now.Sub(latest.At), 0)
	}
	current := currentPools(targets, latest)
	for k, c := range current {
		page.Pools = append(page.Pools, poolRow{PoolCount: c, Name: poolName(c), Chart: chart(series[k], now), Samples: len(series[k]),
			Posture: postureOf(postures[c.RunnerClass])})
	}
	// Pools that were sampled in the last day but are neither configured nor counted now still
	// show their history.
	for k, pts := range series {
		if _, ok := current[k]; !ok {
			last := pts[len(pts)-1].c
			last.States, last.TargetHot, last.TargetStop, last.NextChange = map[string]int{}, 0, 0, time.Time{}
			page.Pools = append(page.Pools, poolRow{PoolCount: last, Name: poolName(last) + " (gone)", Chart: chart(pts, now), Samples: len(pts),
				Posture: postureOf(postures[last.RunnerClass])})
		}
	}
	slices.SortFunc(page.Pools, func(a, b poolRow) int {
		return cmp.Or(strings.Compare(a.RunnerClass, b.RunnerClass), strings.Compare(a.Pool, b.Pool))
	})
	return view{page: "pools", title: "Pools", data: page}, nil
}

// currentPools are the rows of the pools as they are now: every configured pool with its targets
// now, and every pool and runner class the latest sample counted instances of, with those counts.
func currentPools(targets []history.PoolCount, latest history.Sample) map[poolKey]history.PoolCount {
	out := map[poolKey]history.PoolCount{}
	for _, c := range latest.Pools {
		for _, n := range c.States {
			if n > 0 {
				out[poolKey{c.RunnerClass, c.Pool}] = c
				break
			}
		}
	}
	for _, t := range targets {
		k := poolKey{t.RunnerClass, t.Pool}
		t.States, t.Billed = map[string]int{}, nil
		for _, c := range latest.Pools {
			if (poolKey{c.RunnerClass, c.Pool}) == k {
				t.States, t.Billed = c.States, c.Billed
			}
		}
		out[k] = t
	}
	return out
}

type poolPoint struct {
	at time.Time
	c  history.PoolCount
}

// chart draws a pool's last 24 hours: a step line per state and the schedule's hot target dashed.
// It is built from numbers and fixed class names only.
func chart(pts []poolPoint, now time.Time) template.HTML {
	const w, h, padL, padB = 560.0, 130.0, 28.0, 16.0
	from := now.Add(-24 * time.Hour)
	top := 1
	for _, p := range pts {
		top = max(top, p.c.TargetHot)
		for _, s := range chartSeries {
			top = max(top, p.c.States[s.state])
		}
	}
	x := func(t time.Time) float64 { return padL + (w-padL-4)*t.Sub(from).Seconds()/(24*3600) }
	y := func(v int) float64 { return 4 + (h-padB-4)*(1-float64(v)/float64(top)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="counts over the last 24 hours">`, w, h)
	fmt.Fprintf(&b, `<line class="axis" x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f"/>`, padL, h-padB, w-4, h-padB)
	fmt.Fprintf(&b, `<text class="tick" x="2" y="%.1f">%d</text><text class="tick" x="2" y="%.1f">0</text>`, y(top)+8, top, h-padB)
	for i := 0; i <= 4; i++ {
		t := from.Add(time.Duration(i) * 6 * time.Hour)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.0f">%s</text>`, x(t)-14, h-2, t.UTC().Format("15:04"))
	}
	if len(pts) == 0 {
		fmt.Fprintf(&b, `<text class="empty" x="%.0f" y="%.0f">no samples in the last 24 hours</text></svg>`, w/2-90, h/2)
		return template.HTML(b.String())
	}
	line := func(class string, val func(history.PoolCount) int) {
		var p strings.Builder
		for i, pt := range pts {
			if i > 0 {
				fmt.Fprintf(&p, "%.1f,%.1f ", x(pt.at), y(val(pts[i-1].c)))
			}
			fmt.Fprintf(&p, "%.1f,%.1f ", x(pt.at), y(val(pt.c)))
		}
		fmt.Fprintf(&p, "%.1f,%.1f", x(now), y(val(pts[len(pts)-1].c)))
		fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, class, p.String())
	}
	line("s-target", func(c history.PoolCount) int { return c.TargetHot })
	for _, s := range chartSeries {
		line(s.class, func(c history.PoolCount) int { return c.States[s.state] })
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// ---- Runs --------------------------------------------------------------------------------------

type runRow struct {
	history.Run
	Sources string
	Result  string
	Class   string
}

type runsPage struct {
	Runs    []runRow
	Page    int
	Older   bool // a next page exists
	PerPage int
	Max     int
}

func sourcesOf(rs []history.Runner) string {
	n := map[string]int{}
	for _, x := range rs {
		n[x.Source]++
	}
	var parts []string
	for _, s := range []string{history.SourceReused, history.SourceStarted, history.SourceCreated} {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func resultOf(r history.Run) (text, class string) {
	switch {
	case r.Status == "failed":
		return "failed" + cond(r.Outcome != "", " ("+r.Outcome+")", ""), "bad"
	case r.Status == "":
		return "provisioning", "open"
	case r.Released():
		return "released", "ok"
	}
	return "running", "open"
}

func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}

func (d *Dashboard) runs(r *http.Request, q url.Values) (view, error) {
	if err := only(q, "page"); err != nil {
		return view{}, err
	}
	per := d.o.RunsPerPage
	last := (d.o.MaxRuns + per - 1) / per
	page, err := pageNumber(q, last)
	if err != nil {
		return view{}, err
	}
	now := d.o.Now()
	runs, err := d.o.History.RecentRuns(r.Context(), now.Add(-d.o.History.Retention()), now.Add(time.Second), page*per+1)
	if err != nil {
		return view{}, err
	}
	have := (len(runs) + per - 1) / per
	if page > max(have, 1) {
		return view{}, notFound("page %d: there are %d pages of runs", page, max(have, 1))
	}
	p := runsPage{Page: page, PerPage: per, Max: d.o.MaxRuns, Older: len(runs) > page*per && page < last}
	for _, x := range runs[min((page-1)*per, len(runs)):min(page*per, len(runs))] {
		text, class := resultOf(x)
		p.Runs = append(p.Runs, runRow{Run: x, Sources: sourcesOf(x.Runners), Result: text, Class: class})
	}
	return view{page: "runs", title: "Runs", data: p}, nil
}

type phase struct {
	Name       string
	Start, Len time.Duration
	X, W       float64
}

type runPage struct {
	Key        string
	Record     store.Run
	H          history.Run
	InHistory  bool
	Result     string
	Class      string
	Phases     []phase
	Timeline   template.HTML
	Cost       history.RunCost
	Open       bool
	RunnersSrc string
}

func (d *Dashboard) run(r *http.Request, q url.Values) (view, error) {
	if err := only(q); err != nil {
		return view{}, err
	}
	key := r.PathValue("key")
	if key == "" || len(key) > 300 || strings.ContainsAny(key, "\n\t#/") {
		return view{}, notFound("no such run")
	}
	ctx := r.Context()
	rec, err := d.o.Store.GetRun(ctx, key)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
		return view{}, notFound("no run %q in the state table (run records stay 30 days)", truncate(key, 80))
	}
	if err != nil {
		return view{}, err
	}
	p := runPage{Key: key, Record: rec}
	h, err := d.o.History.GetRun(ctx, key, rec.CreatedAt)
	switch {
	case errors.Is(err, history.ErrNotFound):
		p.Result, p.Class = rec.Status, "open"
	case err != nil:
		return view{}, err
	default:
		p.H, p.InHistory = h, true
		p.Result, p.Class = resultOf(h)
		p.RunnersSrc = sourcesOf(h.Runners)
		p.Phases, p.Timeline = timeline(h, d.o.Now())
		rep := history.Build(ctx, []history.Run{h}, nil, time.Minute, d.o.Price, h.StartedAt, d.o.Now())
		if len(rep.Runs) == 1 {
			p.Cost = rep.Runs[0]
		}
	}
	return view{page: "run", title: "Run " + key, data: p}, nil
}

// timeline lays a run's steps out on one axis: the provision's steps in order (selection,
// starting stopped instances, creation, registration, post-provision), then the jobs (until the
// release began, or now) and the release.
func timeline(h history.Run, now time.Time) ([]phase, template.HTML) {
	var ps []phase
	at := time.Duration(0)
	for _, s := range []struct {
		name string
		d    time.Duration
	}{
		{"selection", h.Steps.Select}, {"start", h.Steps.Start}, {"create", h.Steps.Create},
		{"registration", h.Steps.Register}, {"post", h.Steps.Post},
	} {
		if s.d > 0 {
			ps = append(ps, phase{Name: s.name, Start: at, Len: s.d})
			at += s.d
		}
	}
	provEnd := h.FinishedAt.Sub(h.StartedAt)
	if h.FinishedAt.IsZero() || provEnd < at {
		provEnd = at
	}
	if h.Status == "succeeded" {
		jobsEnd := now.Sub(h.StartedAt)
		if h.Released() {
			jobsEnd = h.ReleaseAt.Sub(h.StartedAt)
		}
		if jobsEnd > provEnd {
			ps = append(ps, phase{Name: "jobs", Start: provEnd, Len: jobsEnd - provEnd})
		}
		if h.Released() && strings.Contains(h.ReleaseNote, release.Reclaimed) {
			// EC2 announced the reclaim before the release heard of it: marked where the jobs end.
			ps = append(ps, phase{Name: "reclaimed", Start: max(jobsEnd, provEnd), Len: time.Millisecond})
		}
		if h.Released() {
			ps = append(ps, phase{Name: "release", Start: max(jobsEnd, provEnd), Len: max(h.ReleasedAt.Sub(h.ReleaseAt), time.Millisecond)})
		}
	}
	total := time.Duration(1)
	for _, p := range ps {
		total = max(total, p.Start+p.Len)
	}
	const w = 760.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" viewBox="0 0 %.0f %d" role="img" aria-label="timeline of the run">`, w, 22*len(ps)+6)
	for i := range ps {
		p := &ps[i]
		p.X = 120 + (w-130)*float64(p.Start)/float64(total)
		p.W = max((w-130)*float64(p.Len)/float64(total), 2)
		y := 4 + 22*i
		fmt.Fprintf(&b, `<text class="label" x="2" y="%d">%s</text>`, y+13, p.Name)
		fmt.Fprintf(&b, `<rect class="ph-%s" x="%.1f" y="%d" width="%.1f" height="16"/>`, p.Name, p.X, y, p.W)
		fmt.Fprintf(&b, `<text class="dur" x="%.1f" y="%d">%s</text>`, min(p.X+p.W+4, w-60), y+13, fmtDur(p.Len))
	}
	b.WriteString(`</svg>`)
	return ps, template.HTML(b.String())
}

// ---- Instances ---------------------------------------------------------------------------------

// instanceRow is flat and pre-formatted: a template reaching into an embedded struct by
// reflection for 2,000 rows is most of a page's render time.
type instanceRow struct {
	ID, State, Age, Deadline, RunID, RunURL, Scope, RunnerClass, Pool, InstanceType, UsageClass, Zone, Reason string
	Late                                                                                                      bool
	created                                                                                                   time.Time
}

type instancesPage struct {
	Rows   []instanceRow
	Counts map[string]int
	States []string
	State  string
	Total  int
	// Page is the page's number (its link carries it), Last the number of pages the counts make
	// (0 when the counts are unknown); Next is the next page's link, "" on the last page.
	Page, Last  int
	Next, First string
	// SampledAt is the time of the pool sample the counts come from (zero: no sample in the last
	// two days, counts unknown), Age how old it was, Interval the sampling interval.
	SampledAt     time.Time
	Age, Interval time.Duration
}

// maxInstancePage bounds the page number a cursor's link may carry (it is only shown).
const maxInstancePage = 1_000_000

func (d *Dashboard) instances(r *http.Request, q url.Values) (view, error) {
	if err := only(q, "state", "page", "after"); err != nil {
		return view{}, err
	}
	listed := store.LiveStates
	state := q.Get("state")
	if state != "" {
		st, err := store.ParseState(state)
		if err != nil || !st.Live() {
			return view{}, badRequest("state %q: want one of the live states", truncate(state, 40))
		}
		listed = []store.State{st}
	}
	ctx, now := r.Context(), d.o.Now()
	p := instancesPage{Counts: map[string]int{}, State: state, Interval: d.o.History.SampleInterval()}
	// The counts are the latest pool sample's, not COUNT queries: a COUNT query reads (and pays
	// for) every record it counts, 1 MB a request.
	smp, err := d.o.History.LatestSample(ctx, now)
	if err != nil && !errors.Is(err, history.ErrNotFound) {
		return view{}, err
	}
	counts := smp.Counts()
	if err == nil {
		p.SampledAt, p.Age = smp.At, max(now.Sub(smp.At), 0)
	}
	for _, s := range store.LiveStates {
		p.States = append(p.States, string(s))
		p.Counts[string(s)] = counts[string(s)]
	}
	for _, s := range listed {
		p.Total += counts[string(s)]
	}
	per := d.o.InstancesPerPage
	if !p.SampledAt.IsZero() {
		p.Last = max((p.Total+per-1)/per, 1)
	}
	after := q.Get("after")
	if p.Page, err = instancesPageNumber(q.Get("page"), p.Last, after != ""); err != nil {
		return view{}, err
	}
	from, cursor, err := resumeAt(listed, after)
	if err != nil {
		return view{}, err
	}
	recs, next, err := d.instancePage(ctx, listed[from:], cursor, per, counts, !p.SampledAt.IsZero())
	if errors.Is(err, store.ErrInvalid) {
		return view{}, badRequest("malformed page cursor: follow the links from the first page")
	}
	if err != nil {
		return view{}, err
	}
	p.Rows = d.instanceRows(recs)
	if p.Last > 0 {
		p.Last = max(p.Last, p.Page)
	}
	p.First = "/instances"
	if state != "" {
		p.First += "?" + url.Values{"state": {state}}.Encode()
	}
	if next != "" {
		v := url.Values{"page": {fmt.Sprint(p.Page + 1)}, "after": {next}}
		if state != "" {
			v.Set("state", state)
		}
		p.Next = "/instances?" + v.Encode()
	}
	return view{page: "instances", title: "Instances", data: p}, nil
}

// instancesPageNumber reads ?page=N. Without a cursor only the first page can be read (and a
// number past the counted pages is not found); with one, the number is only shown.
func instancesPageNumber(s string, last int, cursor bool) (int, error) {
	if s == "" {
		return cond(cursor, 2, 1), nil
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil || n < 1:
		return 0, badRequest("page %q: want a whole number from 1", truncate(s, 40))
	case !cursor && n > max(last, 1):
		return 0, notFound("page %d: there are %d pages", n, max(last, 1))
	case n > maxInstancePage:
		return 0, badRequest("page %d: want at most %d", n, maxInstancePage)
	case cursor:
		return n, nil
	case n > 1:
		return 0, badRequest("page %d: pages after the first are reached through their links (each resumes where the one before ended)", n)
	}
	return n, nil
}

// resumeAt reads a page cursor, "<state>.<store cursor>": the index of the state to resume in
// (one of listed) and the store's cursor within it ("" for the state's start).
func resumeAt(listed []store.State, after string) (int, string, error) {
	if after == "" {
		return 0, "", nil
	}
	st, cursor, _ := strings.Cut(after, ".")
	i := slices.Index(listed, store.State(st))
	if i < 0 {
		return 0, "", badRequest("malformed page cursor: follow the links from the first page")
	}
	return i, cursor, nil
}

// instancePage reads one page of records of the states listed, in order, from a store cursor in
// the first: one Query per state the page reaches (more only past items that are not records). It
// returns the next page's cursor ("" when none).
func (d *Dashboard) instancePage(ctx context.Context, states []store.State, cursor string, per int, counts map[string]int, counted bool) ([]store.Instance, string, error) {
	var recs []store.Instance
	for i, s := range states {
		got, next, err := d.o.Store.ByStatePage(ctx, s, per-len(recs), cursor)
		if err != nil {
			return nil, "", err
		}
		recs, cursor = append(recs, got...), ""
		if next != "" {
			return recs, string(s) + "." + next, nil
		}
		if len(recs) == per {
			// Full at the end of a state: the next page starts with the next state the sample
			// counted records in (every next state when there are no counts).
			for _, later := range states[i+1:] {
				if !counted || counts[string(later)] > 0 {
					return recs, string(later) + ".", nil
				}
			}
			return recs, "", nil
		}
	}
	return recs, "", nil
}

// instanceRows renders records of one state, in the order given.
func (d *Dashboard) instanceRows(recs []store.Instance) []instanceRow {
	now := d.o.Now()
	rows := make([]instanceRow, 0, len(recs))
	for _, in := range recs {
		row := instanceRow{
			ID: in.ID, State: string(in.State), Age: fmtDur(now.Sub(in.CreatedAt)), RunID: in.RunID, Scope: in.Scope,
			RunnerClass: in.RunnerClass, Pool: in.Pool, InstanceType: in.InstanceType, UsageClass: in.UsageClass, Zone: in.Zone,
			Reason: in.Reason, created: in.CreatedAt,
		}
		if in.RunID != "" {
			row.RunURL = "/runs/" + url.PathEscape(in.RunID)
		}
		switch {
		case in.Threshold.IsZero():
			row.Deadline = "none"
		case in.Threshold.After(now):
			row.Deadline = "in " + fmtDur(in.Threshold.Sub(now))
		default:
			row.Deadline, row.Late = "passed "+fmtDur(now.Sub(in.Threshold))+" ago", true
		}
		rows = append(rows, row)
	}
	return rows
}

// ---- Cost --------------------------------------------------------------------------------------

type costPage struct {
	history.Report
	Window  string
	Windows []string
	Runs    []history.RunCost
	More    int
}

func windowName(w time.Duration) string {
	if w%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", w/(24*time.Hour))
	}
	return fmt.Sprintf("%dh", w/time.Hour)
}

// ParseWindow reads a cost window: 1h, 24h or 7d (the windows the history keeps samples for).
func ParseWindow(s string) (time.Duration, error) {
	for _, w := range Windows {
		if s == windowName(w) || s == w.String() {
			return w, nil
		}
	}
	if s == "24h" || s == "1d" {
		return 24 * time.Hour, nil
	}
	names := make([]string, len(Windows))
	for i, w := range Windows {
		names[i] = windowName(w)
	}
	return 0, fmt.Errorf("window %q: want one of %s", truncate(s, 20), strings.Join(names, ", "))
}

func (d *Dashboard) cost(r *http.Request, q url.Values) (view, error) {
	if err := only(q, "window"); err != nil {
		return view{}, err
	}
	window := 24 * time.Hour
	if s := q.Get("window"); s != "" {
		w, err := ParseWindow(s)
		if err != nil {
			return view{}, badRequest("%s", err.Error())
		}
		window = w
	}
	rep, err := d.Cost(r.Context(), window)
	if err != nil {
		return view{}, err
	}
	p := costPage{Report: rep, Window: windowName(window)}
	for _, w := range Windows {
		p.Windows = append(p.Windows, windowName(w))
	}
	p.Runs = rep.Runs
	if len(p.Runs) > 200 {
		p.Runs, p.More = p.Runs[:200], len(p.Runs)-200
	}
	return view{page: "cost", title: "Cost", data: p}, nil
}
