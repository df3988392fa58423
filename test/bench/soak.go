// `make soak`: two reconciler replicas under mixed load for a while (10 minutes by default), with
// the process's goroutines and heap watched. Not part of CI.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// SoakOptions tune a soak. Zero values take the defaults.
type SoakOptions struct {
	Duration    time.Duration // default 10 min
	Concurrency int           // workflows at a time (default 8)
	Factor      float64       // time factor of the anchors (default 0.05)
	// Sample is the interval of the goroutine and heap samples (default 15 s).
	Sample      time.Duration
	Seed        uint64
	Logger      *slog.Logger
	ChildOutput io.Writer
}

// SoakSample is one reading of the process.
type SoakSample struct {
	At         time.Duration
	Goroutines int
	HeapMiB    float64
	Live       int // live instance records
	Workflows  int64
}

// SoakResult is what a soak saw.
type SoakResult struct {
	Workflows, Errors int64
	Samples           []SoakSample
	Audit             invariant.Report
}

// Flat limits: the last quarter's mean may exceed the second quarter's (after warm-up) by this
// much before the soak calls a resource growing.
const (
	flatGoroutines = 0.10 // and 50 goroutines
	flatHeap       = 0.30 // and 16 MiB
)

// Soak runs the soak, printing a line per sample and a verdict. It fails on any workflow error, a
// growing goroutine count or heap, or a broken invariant.
func Soak(ctx context.Context, out io.Writer, so SoakOptions) (*SoakResult, error) {
	if so.Duration <= 0 {
		so.Duration = 10 * time.Minute
	}
	if so.Concurrency <= 0 {
		so.Concurrency = 8
	}
	if so.Sample <= 0 {
		so.Sample = 15 * time.Second
	}
	o := Options{Factor: so.Factor, Seed: so.Seed, Logger: so.Logger, ChildOutput: so.ChildOutput}
	o.defaults()
	began := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	// Both replicas run refresh and convergence on their production schedules; the leader does.
	h, err := start(ctx, o, say, map[string]string{"RUNNERPOOL_REFRESH_SCHEDULE": "@every 1m", "RUNNERPOOL_CONVERGE_SCHEDULE": "@every 30s"})
	if err != nil {
		return nil, err
	}
	defer h.close()
	second, stop, err := h.startReplica(ctx, "bench-2", false)
	if err != nil {
		return nil, err
	}
	h.stops = append(h.stops, stop)
	replicas := []*service.Service{h.svc, second}
	say("soak: two replicas (%s, %s), %d workflows at a time, for %s", h.svc.URL(), second.URL(), so.Concurrency, so.Duration)

	res := &SoakResult{}
	var workflows, failures atomic.Int64
	var errMu sync.Mutex
	var firstErrs []error
	fail := func(err error) {
		failures.Add(1)
		errMu.Lock()
		defer errMu.Unlock()
		if len(firstErrs) < 10 {
			firstErrs = append(firstErrs, err)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, so.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for w := range so.Concurrency {
		wg.Go(func() {
			for i := 0; lctx.Err() == nil; i++ {
				// Mixed load: runs of 1-3 runners on alternating replicas, a repeated provision
				// and a duplicate release now and then (idempotency), a status read.
				// A workflow started runs to its end (ctx, not lctx): the audit must not see
				// workflows cut in half by the end of the soak.
				if err := h.soakWorkflow(ctx, replicas[(w+i)%2], replicas[(w+i+1)%2], 1+(w+i)%3, i%5 == 0); err != nil && ctx.Err() == nil {
					fail(err)
				}
				workflows.Add(1)
			}
		})
	}
	tick := time.NewTicker(so.Sample)
	defer tick.Stop()
	sample := func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		live, _ := h.sb.Store.Live(context.WithoutCancel(ctx))
		s := SoakSample{At: time.Since(began).Round(time.Second), Goroutines: runtime.NumGoroutine(),
			HeapMiB: float64(ms.HeapAlloc) / (1 << 20), Live: len(live), Workflows: workflows.Load()}
		res.Samples = append(res.Samples, s)
		say("soak: workflows=%d errors=%d goroutines=%d heap_mib=%.1f live=%d", s.Workflows, failures.Load(), s.Goroutines, s.HeapMiB, s.Live)
	}
loop:
	for {
		select {
		case <-lctx.Done():
			break loop
		case <-tick.C:
			sample()
		}
	}
	wg.Wait()
	res.Workflows, res.Errors = workflows.Load(), failures.Load()

	// Audit: one refresh pass, then the rules.
	actx := context.WithoutCancel(ctx)
	if _, err := h.sb.Components(sandbox.ComponentOptions{}).Refresher.Run(actx); err != nil {
		say("soak: audit refresh pass: %v", err)
	}
	res.Audit, err = invariant.Check(actx, h.sb.Store, h.sb.EC2, invariant.Options{
		DeploymentID: sandbox.DeploymentID, Queues: []string{h.sb.Queue.URL()}, SQS: h.sb.Stack.SQS(),
		GitHub: h.sb.GitHub, Scopes: []string{sandbox.Scope}, OrphanGrace: 2 * time.Minute,
	})
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if err := res.Audit.Err(); err != nil {
		errs = append(errs, err)
	}
	if res.Errors > 0 {
		errs = append(errs, fmt.Errorf("%d of %d workflows failed; first: %w", res.Errors, res.Workflows, errors.Join(firstErrs...)))
	}
	g0, g1, h0, h1 := trend(res.Samples)
	if g1 > g0*(1+flatGoroutines)+50 {
		errs = append(errs, fmt.Errorf("goroutines grew from %.0f to %.0f", g0, g1))
	}
	if h1 > h0*(1+flatHeap)+16 {
		errs = append(errs, fmt.Errorf("heap grew from %.1f to %.1f MiB", h0, h1))
	}
	verdict := "ok"
	if len(errs) > 0 {
		verdict = "FAIL"
	}
	say("soak: %s duration=%s workflows=%d errors=%d goroutines=%.0f->%.0f heap_mib=%.1f->%.1f %s",
		verdict, so.Duration, res.Workflows, res.Errors, g0, g1, h0, h1, res.Audit.Summary())
	return res, errors.Join(errs...)
}

// trend is the mean goroutines and heap of the second quarter of the samples (after warm-up) and
// of the last quarter.
func trend(s []SoakSample) (g0, g1, h0, h1 float64) {
	if len(s) < 4 {
		if len(s) == 0 {
			return 0, 0, 0, 0
		}
		return float64(s[0].Goroutines), float64(s[len(s)-1].Goroutines), s[0].HeapMiB, s[len(s)-1].HeapMiB
	}
	q := len(s) / 4
	mean := func(xs []SoakSample) (g, h float64) {
		for _, x := range xs {
			g += float64(x.Goroutines)
			h += x.HeapMiB
		}
		return g / float64(len(xs)), h / float64(len(xs))
	}
	g0, h0 = mean(s[q : 2*q])
	g1, h1 = mean(s[len(s)-q:])
	return g0, g1, h0, h1
}

// soakWorkflow is one workflow: provision on a (and, when repeat is set, the same provision again
// on b, which must answer the same runners), a job, release on b (and again on a when repeat).
func (h *harness) soakWorkflow(ctx context.Context, a, b *service.Service, count int, repeat bool) error {
	wf, err := h.newWorkflowAt(a.URL())
	if err != nil {
		return err
	}
	resp, _, err := wf.provision(ctx, count)
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	if repeat {
		again, err := h.clientAt(wf, b.URL())
		if err != nil {
			return err
		}
		r2, _, err := again.provision(ctx, count)
		if err != nil {
			return fmt.Errorf("repeated provision: %w", err)
		}
		if !sameRunners(resp, r2) {
			return fmt.Errorf("run %s: a repeated provision answered other runners", wf.runID)
		}
		if _, err := again.c.Pools(ctx); err != nil {
			return fmt.Errorf("pools: %w", err)
		}
	}
	if doubled, err := h.runJob(ctx, wf, resp); err != nil || doubled > 0 {
		return fmt.Errorf("run %s: job: doubled=%d %w", wf.runID, doubled, err)
	}
	other, err := h.clientAt(wf, b.URL())
	if err != nil {
		return err
	}
	if _, err := other.release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if repeat {
		rel, err := wf.release(ctx)
		if err != nil {
			return fmt.Errorf("repeated release: %w", err)
		}
		if rel.Counts["pooled"] > 0 {
			return fmt.Errorf("run %s: a repeated release pooled %d runners again", wf.runID, rel.Counts["pooled"])
		}
	}
	return nil
}

func sameRunners(a, b apiv1.ProvisionResponse) bool {
	ids := func(r apiv1.ProvisionResponse) []string {
		var out []string
		for _, x := range r.Runners {
			out = append(out, x.InstanceID)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(ids(a), ids(b))
}
