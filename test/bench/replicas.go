// The replicas phase: the throughput run's load, once against one replica and once spread over
// two, in the same run.
package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// phaseReplicas measures throughput_2_replicas_ratio and reconciler_cpu_ms_per_runner: the same
// workflow counts (Workflows of 1 to MaxCount runners, Concurrency at a time) against the first
// replica alone, then alternately against it and a second replica.
func phaseReplicas(ctx context.Context, h *harness, res *Result) error {
	counts := h.workflowCounts()
	before := h.calls()
	var one, two throughputStats
	rep1, all1, perr1 := replicaCPU(func() { one = h.throughputRun(ctx, []string{h.svc.URL()}, counts) })
	res.account("replicas (1)", before, h.calls())
	second, stop, err := h.startReplica(ctx, "bench-2", false)
	if err != nil {
		return errors.Join(append(one.errs, fmt.Errorf("starting a second replica: %w", err))...)
	}
	defer stop() // its lease renewals stay out of the later phases' counts
	before = h.calls()
	rep2, all2, perr2 := replicaCPU(func() { two = h.throughputRun(ctx, []string{h.svc.URL(), second.URL()}, counts) })
	res.account("replicas (2)", before, h.calls())
	res.Runners["replicas (1)"], res.Runners["replicas (2)"] = one.runners, two.runners

	desc := func(t throughputStats) string {
		return fmt.Sprintf("%d runners in %s, %.1f runners/min, CPU %s", t.runners, t.window.Round(time.Millisecond), t.runnersPerMin(), t.cpu.Round(time.Millisecond))
	}
	load := fmt.Sprintf("%d workflows (provision of 1-%d runners, one job, release), %d at a time, the same runner counts in both runs", len(counts), h.o.MaxCount, h.o.Concurrency)
	errs := append(one.errs, two.errs...)
	if len(errs) > 0 {
		res.note("replicas phase: %d workflows failed with one replica, %d with two", len(one.errs), len(two.errs))
	}
	res.add(Figure{Name: "throughput_2_replicas_ratio", Value: two.runnersPerMin() / one.runnersPerMin(), Unit: "ratio",
		How: fmt.Sprintf("runners provisioned per minute (first provision's start to last provision's end) with workflows alternating between two replicas, divided by the same with one replica, same run: %s; one replica: %s; two: %s. The second run finds the pool the first left (the first, the one the phases before left); both replicas, the emulators and the agents share this machine's cores",
			load, desc(one), desc(two))})
	runners := float64(max(one.runners+two.runners, 1))
	processPerRunner := ms(one.cpu+two.cpu) / runners
	res.add(Figure{Name: "bench_process_cpu_ms_per_runner", Value: processPerRunner, Unit: "ms",
		How: fmt.Sprintf("user + system CPU time (getrusage RUSAGE_SELF delta) of the bench process over the replicas phase's two runs per runner provisioned: the replicas, and beside them the in-process agents, GitHub fake, EC2 server and OIDC issuer and the bench driver (not DynamoDB Local or fauxqs): the upper bound of reconciler_cpu_ms_per_runner. One replica %s, two %s",
			desc(one), desc(two))})
	if perr := errors.Join(perr1, perr2); perr != nil {
		res.note("replicas phase: no reconciler_cpu_ms_per_runner: %v", perr)
	} else {
		cpuPerRunner := ms(rep1+rep2) / runners
		res.add(Figure{Name: "reconciler_cpu_ms_per_runner", Value: cpuPerRunner, Unit: "ms",
			How: fmt.Sprintf("CPU time of the replicas' own goroutines (every goroutine a replica starts carries the pprof label component=replica; a CPU profile at 100 Hz of each run, samples so labelled summed) over the replicas phase's two runs, per runner provisioned: the replica processes' time, told apart from the agents, fakes and driver that share the bench process (background garbage collection, no goroutine's, is left out; GC assists count). One replica: %s of %s profiled; two: %s of %s",
				rep1.Round(time.Millisecond), all1.Round(time.Millisecond), rep2.Round(time.Millisecond), all2.Round(time.Millisecond))})
		h.say("  replicas' own CPU %.1f ms per runner (bench process %.1f)", cpuPerRunner, processPerRunner)
	}
	h.say("  one replica: %s; two: %s; ratio %.2f, %.1f ms CPU per runner (bench process)", desc(one), desc(two), two.runnersPerMin()/one.runnersPerMin(), processPerRunner)
	return errors.Join(errs...)
}
