// The throughput run shared by the throughput and replicas phases, with its meters: the GitHub
// points spent at peak and the bench process's CPU time.
package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// throughputStats is what one throughput run measured.
type throughputStats struct {
	provisions, runners, doubled int
	window                       time.Duration // first provision's start to last provision's end
	elapsed                      time.Duration // the whole run, jobs and releases included
	took                         []float64     // provision latencies, ms
	// points and refused are the GitHub fake's secondary-limit points spent and requests refused
	// during the run, peakPoints the most points spent in any 60 s window of it (a shorter run's
	// points scaled to a minute).
	points, refused, peakPoints int
	cpu                         time.Duration // user + system CPU time of the bench process
	errs                        []error
}

func (t throughputStats) provisionsPerMin() float64 {
	return float64(t.provisions) / t.window.Minutes()
}

func (t throughputStats) runnersPerMin() float64 { return float64(t.runners) / t.window.Minutes() }

// workflowCounts draws the runner count of each of the Workflows workflows (1 to MaxCount).
func (h *harness) workflowCounts() []int {
	counts := make([]int, h.o.Workflows)
	for i := range counts {
		counts[i] = 1 + h.rng.IntN(h.o.MaxCount)
	}
	return counts
}

// throughputRun runs one workflow per count, Concurrency at a time, the i-th talking to the
// replica urls[i % len(urls)]: provision, one job on its label, release.
func (h *harness) throughputRun(ctx context.Context, urls []string, counts []int) throughputStats {
	type outcome struct {
		runners int
		took    time.Duration
		doubled int
		err     error
	}
	outcomes := make([]outcome, len(counts))
	var g errgroup.Group // every item runs: failures are recorded, never cancel the others
	g.SetLimit(h.o.Concurrency)
	var mu sync.Mutex
	var first, last time.Time
	stopSampling := h.sampleGitHubPoints()
	usage0, cpu0 := h.sb.Stack.GitHub.Usage(), processCPU()
	began := time.Now()
	for i := range counts {
		g.Go(func() error {
			o := &outcomes[i]
			wf, err := h.newWorkflowAt(urls[i%len(urls)])
			if err != nil {
				o.err = err
				return nil
			}
			t0 := time.Now()
			resp, took, err := wf.provision(ctx, counts[i])
			if err != nil {
				o.err = fmt.Errorf("provision: %w", err)
				return nil
			}
			mu.Lock()
			if first.IsZero() || t0.Before(first) {
				first = t0
			}
			if end := t0.Add(took); end.After(last) {
				last = end
			}
			mu.Unlock()
			o.runners, o.took = len(resp.Runners), took
			o.doubled, o.err = h.runJob(ctx, wf, resp)
			if _, err := wf.release(ctx); err != nil && o.err == nil {
				o.err = fmt.Errorf("release: %w", err)
			}
			return nil
		})
	}
	_ = g.Wait()
	t := throughputStats{elapsed: time.Since(began), cpu: processCPU() - cpu0, window: last.Sub(first), peakPoints: stopSampling()}
	usage := h.sb.Stack.GitHub.Usage()
	t.points, t.refused = usage.Points-usage0.Points, usage.Refused-usage0.Refused
	for _, o := range outcomes {
		if o.err != nil {
			t.errs = append(t.errs, o.err)
			continue
		}
		t.provisions++
		t.runners += o.runners
		t.doubled += o.doubled
		t.took = append(t.took, ms(o.took))
	}
	return t
}

// sampleGitHubPoints samples the GitHub fake's points every second until the returned function is
// called, which returns the most points spent in any 60 s window (for a run shorter than a minute,
// its points scaled to a minute).
func (h *harness) sampleGitHubPoints() func() int {
	type sample struct {
		at     time.Time
		points int
	}
	var mu sync.Mutex
	samples := []sample{{time.Now(), h.githubPoints()}}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				mu.Lock()
				samples = append(samples, sample{now, h.githubPoints()})
				mu.Unlock()
			}
		}
	}()
	return func() int {
		close(done)
		<-stopped
		samples = append(samples, sample{time.Now(), h.githubPoints()})
		// A run shorter than a window: its rate, sustained for a minute.
		if run := samples[len(samples)-1].at.Sub(samples[0].at); run < time.Minute && run > 0 {
			return int(math.Round(float64(samples[len(samples)-1].points-samples[0].points) * float64(time.Minute) / float64(run)))
		}
		peak := 0
		for i, a := range samples {
			for _, b := range samples[i+1:] {
				if b.at.Sub(a.at) > time.Minute {
					break
				}
				peak = max(peak, b.points-a.points)
			}
		}
		return peak
	}
}

// processCPU is the user + system CPU time of this process so far: the bench driver, the
// in-process replicas and the in-process fakes (not DynamoDB Local or fauxqs, which are children).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
