// The reuse phase: does the pool serve concurrent demand? Each scenario runs on a runner class with a
// pool queue of its own, filled to an exact size first (cold provisions, then releases), with SQS
// short polls sampled (Options.SQSSampling): a short poll comes back empty with that probability, as a
// real SQS short poll can on a small queue.
//
//   - homogeneous: 60 idle; 10 single provisions of 2 one after the other (the latency of one
//     provision from the pool), then 30 concurrent provisions of 2 that all fit, their table reads
//     counted (claim verification must not collapse under a burst);
//   - mixed: 60 idle in 3 resource classes (20 each), 30 concurrent provisions of 2, 10 per class;
//   - small pool: 5 idle, 5 sequential provisions of 1.
//
// The reuse ratio is reused ÷ min(demand, supply).
package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"golang.org/x/sync/errgroup"
)

// The reuse scenarios' runner classes (each with its own pool queue) and resource classes.
const (
	reuseHomogeneous = "reuse-homogeneous"
	reuseMixed       = "reuse-mixed"
	reuseSmall       = "reuse-small"
)

var reuseClasses = []string{reuseHomogeneous, reuseMixed, reuseSmall, reuseManyRepos}

// reuseSizes are the resource classes of the mixed scenario (the config's, see startReplica).
var reuseSizes = []string{"small", "medium", "large"}

func reuseRequest(runnerClass, size string, count int) apiv1.ProvisionRequest {
	return apiv1.ProvisionRequest{
		Count: count, UsageClass: "on-demand", AllowedInstanceTypes: []string{"c*", "m*"}, ResourceClass: size,
		RunnerClass: runnerClass,
	}
}

// fill makes n idle instances of one size in a runner class: provisions of 2 created from the
// class's empty pool, five at a time (a cold start of dozens of simulated machines at once starves
// this 2-core machine), then released. A provision that fails (a simulated boot too slow on a
// loaded machine) is tried again, up to three times.
func (h *harness) fill(ctx context.Context, runnerClass, size string, n int) error {
	return h.fillOf(ctx, repository, repositoryID, runnerClass, size, n)
}

// fillOf is fill with the provisions of another repository: its instances are narrowed to it.
func (h *harness) fillOf(ctx context.Context, repo, repoID, runnerClass, size string, n int) error {
	var wfs []*workflow
	var mu sync.Mutex
	var g errgroup.Group // every item runs: failures are recorded, never cancel the others
	g.SetLimit(5)
	errs := make([]error, (n+1)/2)
	for i := range errs {
		count := min(2, n-2*i)
		g.Go(func() error {
			for range 3 {
				wf, err := h.newWorkflowOf(h.svc.URL(), repo, repoID)
				if err != nil {
					errs[i] = err
					return nil
				}
				resp, err := wf.c.Provision(ctx, reuseRequest(runnerClass, size, count))
				if err != nil {
					errs[i] = fmt.Errorf("filling %s with %s: %w", runnerClass, size, err)
					continue
				}
				errs[i] = nil
				if len(resp.Runners) != count {
					errs[i] = fmt.Errorf("filling %s: %d runners, want %d", runnerClass, len(resp.Runners), count)
				}
				mu.Lock()
				wfs = append(wfs, wf)
				mu.Unlock()
				return nil
			}
			return nil
		})
	}
	_ = g.Wait()
	rerr := h.releaseAll(ctx, wfs)
	return errors.Join(errors.Join(errs...), rerr)
}

func (h *harness) releaseAll(ctx context.Context, wfs []*workflow) error {
	errs := make([]error, len(wfs))
	var wg sync.WaitGroup
	for i, wf := range wfs {
		wg.Go(func() {
			if _, err := wf.release(ctx); err != nil {
				errs[i] = fmt.Errorf("release of run %s: %w", wf.runID, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// burstOutcome is what one burst measured: the provisions' latencies (ms), the runners reused, and
// the reconciler's table reads while the provisions ran (releases excluded): GetItem, Query and
// Scan requests plus the keys of BatchGetItem requests, and the read requests.
type burstOutcome struct {
	lat                 []float64
	reused              int
	reads, readRequests int
	batchKeys           int            // of reads: the keys of BatchGetItem requests (the claims' report reads)
	callsAfter          map[string]int // the reconciler's calls when the provisions ended
	// wall is from the burst's start to its last provision's answer; cpu is the CPU time every
	// process of this machine's stack spent in it (burstCPU).
	wall time.Duration
	cpu  burstCPU
}

// burstCPU is the user + system CPU time spent during a burst by the bench process (the replica,
// and beside it the simulated agents, the GitHub fake, the EC2 server and the driver) and by each
// emulator process. On a machine of a few cores, a burst of n provisions cannot end before
// n × (CPU per provision) ÷ cores: with the emulators in the count, this says how much of a
// burst's p99 the machine alone explains.
type burstCPU struct {
	bench    time.Duration
	replica  time.Duration // of bench: the replica's own goroutines (replicaCPU); 0 when not profiled
	children map[string]time.Duration
}

func (c burstCPU) total() time.Duration {
	t := c.bench
	for _, d := range c.children {
		t += d
	}
	return t
}

// cpuNow reads the bench process's and the emulators' CPU time so far (emulators omitted when it
// cannot be read: a system without /proc).
func (h *harness) cpuNow() burstCPU {
	c := burstCPU{bench: processCPU()}
	if m, err := h.sb.Stack.ChildCPU(); err == nil {
		c.children = m
	}
	return c
}

func (c burstCPU) since(before burstCPU) burstCPU {
	out := burstCPU{bench: c.bench - before.bench, children: map[string]time.Duration{}}
	for k, v := range c.children {
		out.children[k] = v - before.children[k]
	}
	return out
}

// describe says per runner how the CPU time split, and the floor it puts under the burst on this
// machine's cores.
func (c burstCPU) describe(runners int, wall time.Duration) string {
	per := func(d time.Duration) float64 { return ms(d) / float64(max(runners, 1)) }
	parts := []string{fmt.Sprintf("bench process (replica, simulated agents, GitHub fake, EC2 server) %.1f", per(c.bench))}
	if c.replica > 0 {
		parts[0] += fmt.Sprintf(" of which the replica's own goroutines %.1f (profiled)", per(c.replica))
	}
	for _, k := range slices.Sorted(maps.Keys(c.children)) {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, per(c.children[k])))
	}
	return fmt.Sprintf("%.1f ms CPU per runner (%s), %s CPU in a %s burst on %d cores: the cores alone keep the burst from ending before %.0f ms",
		per(c.total()), strings.Join(parts, ", "), c.total().Round(time.Millisecond), wall.Round(time.Millisecond), runtime.NumCPU(),
		ms(c.total())/float64(runtime.NumCPU()))
}

// burst runs the requests at once and measures them. Every provision is released afterwards.
func (h *harness) burst(ctx context.Context, reqs []apiv1.ProvisionRequest) (burstOutcome, error) {
	wfs := make([]*workflow, len(reqs))
	for i := range reqs {
		wf, err := h.newWorkflow()
		if err != nil {
			return burstOutcome{}, err
		}
		wfs[i] = wf
	}
	return h.burstWith(ctx, wfs, reqs, "")
}

// burstWith is burst with the workflows given (wfs[i] asks reqs[i]).
func (h *harness) burstWith(ctx context.Context, wfs []*workflow, reqs []apiv1.ProvisionRequest, profileName string) (burstOutcome, error) {
	var out burstOutcome
	lat := make([]float64, len(reqs))
	timing := make([]apiv1.Timing, len(reqs))
	reused := make([]int, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, req := range reqs {
		wf := wfs[i]
		wg.Go(func() {
			<-start
			t := time.Now()
			resp, err := wf.c.Provision(ctx, req)
			lat[i] = ms(time.Since(t))
			if err != nil {
				errs[i] = fmt.Errorf("provision of run %s: %w", wf.runID, err)
				return
			}
			reused[i] = countSources(resp)[apiv1.SourceReused]
			timing[i] = resp.Timing
		})
	}
	before, keysBefore, cpu0 := h.calls(), h.keys.count(), h.cpuNow()
	began := time.Now()
	replica, _, perr := replicaCPUSaved(func() {
		close(start)
		wg.Wait()
		out.wall, out.cpu = time.Since(began), h.cpuNow().since(cpu0) // before the profile is read
	}, h.profilePath(profileName))
	if perr == nil {
		out.cpu.replica = replica
	}
	after := h.calls()
	out.callsAfter = after
	for _, op := range []string{"DynamoDB.GetItem", "DynamoDB.Query", "DynamoDB.Scan", "DynamoDB.BatchGetItem"} {
		out.readRequests += after[op] - before[op]
	}
	out.batchKeys = h.keys.count() - keysBefore
	out.reads = out.readRequests - (after["DynamoDB.BatchGetItem"] - before["DynamoDB.BatchGetItem"]) + out.batchKeys
	// Where the slowest provision's time went, as the reconciler timed it.
	if slow := slices.Index(lat, slices.Max(lat)); slow >= 0 {
		t := timing[slow]
		h.say("  slowest provision %.0f ms: select %d, start %d, create %d, validate %d, post %d (total %d ms, %d reused)",
			lat[slow], t.SelectMS, t.StartMS, t.CreateMS, t.ValidateMS, t.PostMS, t.TotalMS, reused[slow])
	}
	for _, r := range reused {
		out.reused += r
	}
	out.lat = lat
	return out, errors.Join(errors.Join(errs...), h.releaseAll(ctx, wfs))
}

// singles runs n provisions of 2 from a runner class's pool one after the other, each released
// before the next: what one provision served from the pool takes with nothing else going on.
func (h *harness) singles(ctx context.Context, runnerClass, size string, n int) ([]float64, error) {
	var lat []float64
	for i := range n {
		wf, err := h.newWorkflow()
		if err != nil {
			return nil, err
		}
		t := time.Now()
		resp, err := wf.c.Provision(ctx, reuseRequest(runnerClass, size, 2))
		took := time.Since(t)
		if err != nil {
			return nil, fmt.Errorf("single provision %d: %w", i+1, err)
		}
		if countSources(resp)[apiv1.SourceReused] == len(resp.Runners) {
			lat = append(lat, ms(took))
		}
		if _, err := wf.release(ctx); err != nil {
			return nil, fmt.Errorf("single provision %d: release: %w", i+1, err)
		}
	}
	return lat, nil
}

// phaseReuse measures the reuse ratios and the latency of the homogeneous and mixed bursts.
func phaseReuse(ctx context.Context, h *harness, res *Result) (err error) {
	defer func() {
		err = errors.Join(err, h.retireIdle(context.WithoutCancel(ctx), "the reuse phase is over", reuseHomogeneous, reuseMixed, reuseSmall))
	}()
	// Homogeneous: 60 small idle, 30 concurrent provisions of 2 small.
	if err := h.fill(ctx, reuseHomogeneous, "small", 60); err != nil {
		return err
	}
	single, err := h.singles(ctx, reuseHomogeneous, "small", 10)
	if err != nil {
		return err
	}
	reqs := make([]apiv1.ProvisionRequest, 30)
	for i := range reqs {
		reqs[i] = reuseRequest(reuseHomogeneous, "small", 2)
	}
	hb, err := h.burst(ctx, reqs)
	if err != nil {
		// A provision that failed (a cold start too slow on a loaded machine) counts as not reused.
		res.note("homogeneous burst: %v", err)
	}
	homLat, homReused := hb.lat, hb.reused
	single = slices.Sorted(slices.Values(single))
	res.add(Figure{Name: "dynamodb_reads_per_reused_runner_burst", Value: float64(hb.reads) / float64(max(homReused, 1)), Unit: "reads",
		How: fmt.Sprintf("the homogeneous burst (30 provisions of 2 from a pool of 60): the reconciler's table reads while the provisions ran (GetItem, Query and Scan requests plus the keys of BatchGetItem requests; %d reads in %d requests) per runner reused. Of them %d are the claims' report reads (BatchGetItem keys, %.2f per runner): each claimed instance's reports are read on a back-off schedule from when its claim notice is sent until its registration is seen (claim.Options.ClaimPollInterval), so this part follows the claim-to-registration time, not a count of reads per step", hb.reads, hb.readRequests, hb.batchKeys, float64(hb.batchKeys)/float64(max(homReused, 1)))})
	res.add(Figure{Name: "single_reused_provision_p99_ms", Value: Percentile(single, 99), Unit: "ms",
		How: fmt.Sprintf("%d provisions of 2 from the same pool, one after the other (each released before the next), as the workflow sees them, 99th percentile: the homogeneous burst's p99 goal is within 2x of it", len(single))})
	res.add(Figure{Name: "reuse_ratio_homogeneous", Value: float64(homReused) / 60, Unit: "",
		How: fmt.Sprintf("60 idle instances of one size, 30 concurrent provisions of 2 that all fit, through the API, SQS short polls answered empty with probability %g: runners reused ÷ min(demand 60, supply 60) (%d reused; goal ≥ 0.95)", h.o.SQSSampling, homReused)})

	// Mixed: 20 idle of each of 3 sizes, 30 concurrent provisions of 2, 10 per size.
	for _, size := range reuseSizes {
		if err := h.fill(ctx, reuseMixed, size, 20); err != nil {
			return err
		}
	}
	reqs = reqs[:0]
	for i := range 30 {
		reqs = append(reqs, reuseRequest(reuseMixed, reuseSizes[i%3], 2))
	}
	mb, err := h.burst(ctx, reqs)
	if err != nil {
		res.note("mixed burst: %v", err)
	}
	mixLat, mixReused := mb.lat, mb.reused
	res.add(Figure{Name: "reuse_ratio_mixed", Value: float64(mixReused) / 60, Unit: "",
		How: fmt.Sprintf("60 idle instances in 3 resource classes (small, medium, large: 20 each) in one pool, 30 concurrent provisions of 2 (10 per class), sampling on: runners reused ÷ min(demand 60, supply 60) (%d reused; goal ≥ 0.95)", mixReused)})

	hom, mix := slices.Sorted(slices.Values(homLat)), slices.Sorted(slices.Values(mixLat))
	res.add(Figure{Name: "homogeneous_burst_p99_ms", Value: Percentile(hom, 99), Unit: "ms",
		How: "the homogeneous burst's provisions as the workflows see them (simulated registration included), 99th percentile"})
	res.add(Figure{Name: "burst_cpu_ms_per_runner_homogeneous", Value: ms(hb.cpu.total()) / float64(max(homReused, 1)), Unit: "ms",
		How: "the homogeneous burst: " + hb.cpu.describe(homReused, hb.wall)})
	res.add(Figure{Name: "mixed_burst_p99_ms", Value: Percentile(mix, 99), Unit: "ms",
		How: "the mixed burst's provisions, 99th percentile (goal: within 2× of homogeneous_burst_p99_ms)"})

	// Small pool: 5 idle, 5 sequential provisions of 1, each keeping its runner until the end.
	if err := h.fill(ctx, reuseSmall, "small", 5); err != nil {
		return err
	}
	var held []*workflow
	smallReused := 0
	for i := range 5 {
		wf, err := h.newWorkflow()
		if err != nil {
			return err
		}
		resp, err := wf.c.Provision(ctx, reuseRequest(reuseSmall, "small", 1))
		if err != nil {
			return fmt.Errorf("small pool provision %d: %w", i+1, err)
		}
		held = append(held, wf)
		smallReused += countSources(resp)[apiv1.SourceReused]
	}
	if err := h.releaseAll(ctx, held); err != nil {
		return err
	}
	res.add(Figure{Name: "reuse_ratio_small_pool", Value: float64(smallReused) / 5, Unit: "",
		How: fmt.Sprintf("5 idle instances, 5 sequential provisions of 1 (each keeps its runner), sampling on: reused ÷ 5 (%d reused; goal 1.0)", smallReused)})
	h.say("  reuse: homogeneous %d/60 (p99 %.0f ms), mixed %d/60 (p99 %.0f ms), small pool %d/5",
		homReused, Percentile(hom, 99), mixReused, Percentile(mix, 99), smallReused)
	return nil
}
