// What a phase leaves running. Every phase runs in one process beside the simulated instances'
// agents, so an instance a phase leaves idle keeps its agent running through every later phase
// (its claim notice polls instance metadata every 50 ms, its fallback reads its record every 30
// s): a whole run once measured the "convergence 20000" pass with 198 such agents beside it, a
// third of the bench process's CPU. A phase retires the idle instances it made once nothing after
// it needs them, and the run checks after every phase that it left nothing running.
package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// retireIdle terminates every idle instance of the runner classes as the product's own scale-in
// does (warmpool.Terminator: the record marked terminating with a write conditional on its state,
// TerminateInstances, the record marked terminated), and waits until their agents stopped.
func (h *harness) retireIdle(ctx context.Context, why string, classes ...string) error {
	idle, err := h.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
	if err != nil {
		return fmt.Errorf("retiring the idle instances of %v: %w", classes, err)
	}
	var victims []warmpool.Victim
	ids := map[string]bool{}
	for _, rec := range idle {
		if slices.Contains(classes, rec.RunnerClass) {
			victims = append(victims, warmpool.Victim{Rec: rec, Reason: why})
			ids[rec.ID] = true
		}
	}
	if len(victims) == 0 {
		return nil
	}
	done, _, err := warmpool.NewTerminator(h.sb.Store, h.sb.EC2, h.o.Logger).Terminate(ctx, victims)
	if err != nil {
		return fmt.Errorf("retiring %d idle instances of %v: %w", len(victims), classes, err)
	}
	h.say("  retired %d idle instances of %s (%s)", len(done), strings.Join(classes, ", "), why)
	// Their agents stop when EC2 takes the instances out of running.
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		for _, v := range h.sb.Stack.EC2.Instances() {
			if ids[v.ID] && v.State == "running" {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d retired instances of %v still running after 30 s", left, classes)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// handsOn are the phases that leave their idle instances to the next phase on purpose: the pool of
// the sandbox's runner class that the cold phase fills and warm, throughput, replicas and idle
// measure (the idle phase retires it).
var handsOn = []string{"cold", "warm", "throughput", "replicas"}

// running is what runs in the bench process beside the harness itself: the instances in EC2's
// running state (each with its agent) and the goroutines by where they were started.
type running struct {
	instances  int
	goroutines map[string]int // by kind (goroutines()), the instances' and idle connections' left out
	agents     int            // goroutines of the instances: their agents and metadata servers
}

func (h *harness) running() running {
	r := running{goroutines: goroutines()}
	for _, v := range h.sb.Stack.EC2.Instances() {
		if v.State == "running" {
			r.instances++
		}
	}
	r.agents = r.goroutines[instanceKind]
	delete(r.goroutines, instanceKind)
	return r
}

// leakMargin is how many more goroutines than before a phase may leave without being named: a
// client's connection being set up, a timer's goroutine about to end.
const leakMargin = 8

// leftBehind compares what runs after a phase with what ran before it, waiting up to settle for
// what is winding down, and says what the phase left running ("" when nothing).
func (h *harness) leftBehind(phase string, before running, settle time.Duration) string {
	h.http.CloseIdleConnections()
	deadline := time.Now().Add(settle)
	after := h.running()
	grown, extra := grownGoroutines(before.goroutines, after.goroutines)
	// Goroutines winding down end within settle; instances left running do not.
	for extra > leakMargin && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		after = h.running()
		grown, extra = grownGoroutines(before.goroutines, after.goroutines)
	}
	var parts []string
	if after.instances > before.instances && !slices.Contains(handsOn, phase) {
		parts = append(parts, fmt.Sprintf("%d running instances with their agents (%d before it; %d goroutines of theirs)",
			after.instances, before.instances, after.agents))
	}
	if extra > leakMargin {
		parts = append(parts, fmt.Sprintf("%d goroutines more than before it: %s", extra, strings.Join(grown, "; ")))
	}
	return strings.Join(parts, ", and ")
}

// grownGoroutines lists the kinds of goroutine that grew from before to after, most first, and how
// many more there are in all.
func grownGoroutines(before, after map[string]int) ([]string, int) {
	type kind struct {
		key string
		n   int
	}
	var grown []kind
	extra := 0
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			grown = append(grown, kind{k, d})
			extra += d
		}
	}
	slices.SortFunc(grown, func(a, b kind) int { return b.n - a.n })
	var out []string
	for i, g := range grown {
		if i == 5 {
			out = append(out, fmt.Sprintf("%d more kinds", len(grown)-i))
			break
		}
		out = append(out, fmt.Sprintf("%d× %s", g.n, g.key))
	}
	return out, extra
}

// goroutines counts the process's goroutines by kind: the function that created each and its
// innermost frame in this module. The simulated instances' goroutines (the agent, the instance's
// metadata server) count under instanceKind; either end of a kept-alive connection (closed by its
// client's idle timeout) and the caller's own are left out: a leaked server shows as its accept
// loop, a leaked poller as itself.
func goroutines() map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]int{}
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // this goroutine
		}
		if instanceGoroutine(g) {
			out[instanceKind]++
			continue
		}
		lines := strings.Split(strings.TrimSpace(g), "\n")
		if len(lines) < 2 {
			continue
		}
		top, inModule, created := funcName(lines[1]), false, ""
		for _, l := range lines[1:] {
			switch {
			case strings.HasPrefix(l, "created by "):
				created = strings.TrimPrefix(funcName(l), "created by ")
			case !inModule && strings.Contains(l, module) && !strings.HasPrefix(l, "\t"):
				top, inModule = funcName(l), true // the innermost frame of this module
			}
		}
		if strings.HasPrefix(created, "net/http.(*Transport).dialConn") || strings.HasPrefix(created, "net/http.(*Server).Serve") {
			continue // either end of a kept-alive connection: it ends when its client closes it
		}
		out[strings.ReplaceAll(created+" → "+top, module, "")]++
	}
	return out
}

const (
	module       = "github.com/runnerpool/terraform-provider-runnerpool"
	instanceKind = "simulated instances (agents, metadata servers)"
)

// instanceGoroutine reports a goroutine of a simulated instance: its agent or its metadata server,
// which run as long as the instance does.
func instanceGoroutine(stack string) bool {
	return strings.Contains(stack, module+"/internal/agent.") ||
		strings.Contains(stack, "ec2server.(*Server).startIMDSLocked") ||
		strings.Contains(stack, "ec2server.(*Server).startRuntimeLocked")
}

// funcName is the function of a stack line "pkg.Func(args)" or "created by pkg.Func in goroutine 1".
func funcName(line string) string {
	line = strings.TrimSpace(line)
	if i := strings.Index(line, " in goroutine"); i >= 0 {
		line = line[:i]
	}
	if i := strings.LastIndex(line, "("); i > 0 && strings.HasSuffix(line, ")") {
		line = line[:i]
	}
	return line
}
