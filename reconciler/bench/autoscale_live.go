// The autoscale phase's real-stack part: the policy's decisions, over the hour of the committed
// week whose targets move the most, scaled down (12 steps of 5 simulated minutes, counts divided by
// liveScale), drive the real convergence loop against the sandbox (EC2 server, DynamoDB Local);
// after each decision the loop has one pass to act and one to take in what warmed up, and
// autoscale_live_target_error is the largest gap between the decided targets and the pool's
// ready and stopped instances.
package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/autoscale"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/simulate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

const (
	livePool  = "bench-autoscale"
	liveScale = 20 // the week's pool of up to ~200 becomes ~10 instances
	liveSteps = 12
)

// liveTargets are the targets the convergence loop reads: the latest decision, scaled.
type liveTargets struct {
	mu           sync.Mutex
	hot, stopped int
}

func (l *liveTargets) set(hot, stopped int) {
	l.mu.Lock()
	l.hot, l.stopped = hot, stopped
	l.mu.Unlock()
}

func (l *liveTargets) get() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hot, l.stopped
}

func scaleDown(n int) int { return (n + liveScale - 1) / liveScale }

// liveDecisions are the policy's decisions at each step of the hour of week whose scaled targets
// move the most (up and down), from the profile of before.
func liveDecisions(week, before []jobtrace.Job) ([]autoscale.Decision, time.Time) {
	prof := simulate.Record(before, time.UTC)
	plan := autoscale.PlanWeek(prof, 0.01)
	var best []autoscale.Decision
	var bestStart time.Time
	bestSwing := -1
	for start := week[0].Created.Truncate(24 * time.Hour); start.Before(week[len(week)-1].Created); start = start.Add(time.Hour) {
		ds := decideHour(week, prof, plan, start)
		swing := 0
		for i := 1; i < len(ds); i++ {
			swing += abs(scaleDown(ds[i].Hot)-scaleDown(ds[i-1].Hot)) + abs(scaleDown(ds[i].Stopped)-scaleDown(ds[i-1].Stopped))
		}
		if swing > bestSwing {
			best, bestStart, bestSwing = ds, start, swing
		}
	}
	return best, bestStart
}

// decideHour runs the policy through the hour from start in liveSteps steps.
func decideHour(week []jobtrace.Job, prof *autoscale.Profile, plan *autoscale.WeekPlan, start time.Time) []autoscale.Decision {
	step := time.Hour / liveSteps
	a := &simulate.Autoscaler{Profile: prof, Plan: plan, Loc: time.UTC, Base: autoscale.Input{
		Starts: autoscaleModel.Starts, Prices: autoscaleModel.Prices, Goal: autoscaleGoal, Interval: step, Cooldown: 2 * step,
	}}
	var out []autoscale.Decision
	for s := range liveSteps {
		at := start.Add(time.Duration(s) * step)
		arrived := 0
		for _, j := range week {
			if !j.Created.Before(at.Add(-step)) && j.Created.Before(at) {
				arrived++
			}
		}
		a.Targets(simulate.Observation{Now: at, Arrived: arrived})
		out = append(out, a.Last)
	}
	return out
}

func (h *harness) autoscaleLive(ctx context.Context, res *Result) error {
	week, before := committedWeeks()
	decisions, start := liveDecisions(week, before)
	sb := h.sb
	cfg, err := sb.Stack.AWSConfig(ctx)
	if err != nil {
		return err
	}
	ec2c := ec2.NewFromConfig(cfg)
	st := store.New(dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }), sb.Table)
	launch := fleet.LaunchSpec{LaunchTemplateID: sb.LaunchTemplate, LaunchTemplateVersion: "$Latest", Subnets: slices.Sorted(maps.Keys(sandbox.Subnets))}
	lt := &liveTargets{}
	targets := func(context.Context, time.Time) ([]warmpool.PoolSpec, error) {
		hot, stopped := lt.get()
		return []warmpool.PoolSpec{{
			Name: livePool, RunnerClass: warmClass, Schedule: "autoscale", Hot: hot, Stopped: stopped, SpecHash: "bench-autoscale-v1",
			Launch: launch, InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096, Scope: sandbox.Scope,
		}}, nil
	}
	conv, err := warmpool.NewConverger(st, ec2c, fleet.New(ec2c, fleet.Options{Logger: h.o.Logger}), targets,
		warmpool.Options{DeploymentID: sandbox.DeploymentID, Logger: h.o.Logger})
	if err != nil {
		return err
	}
	pass := func() (warmpool.PoolReport, error) {
		rep, err := conv.Pass(ctx)
		if err != nil {
			return warmpool.PoolReport{}, err
		}
		pr, _ := rep.Pool(livePool)
		return pr, pr.Err
	}
	worst := 0
	h.say("  the policy drives the convergence loop through %s UTC (the hour its targets move most), counts / %d", start.Format("Mon 15:04"), liveScale)
	for s, d := range decisions {
		hot, stopped := scaleDown(d.Hot), scaleDown(d.Stopped)
		lt.set(hot, stopped)
		if _, err := pass(); err != nil { // acts: creates, stops, terminates
			return fmt.Errorf("step %d: %w", s, err)
		}
		// The instances it created warm up (a scaled boot), then the next pass takes them in.
		if err := sleepCtx(ctx, h.o.scaled(AnchorColdBoot)+h.o.scaled(AnchorRegistration)+time.Second); err != nil {
			return err
		}
		pr, err := pass()
		if err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		gap := max(abs(pr.Ready-hot), abs(pr.Stopped-stopped))
		worst = max(worst, gap)
		h.say("  step %2d: decided %d hot, %d stopped (unscaled %d, %d); held %d ready, %d stopped, %d warming", s, hot, stopped, d.Hot, d.Stopped, pr.Ready, pr.Stopped, pr.Warming)
	}
	lt.set(0, 0)
	for range 3 { // scale to zero: the audit finds nothing left behind
		if _, err := pass(); err != nil {
			return err
		}
	}
	res.add(Figure{Name: "autoscale_live_target_error", Value: float64(worst), Unit: "instances",
		How: fmt.Sprintf("the autoscaler's decisions over the committed week's hour whose targets move most (%s UTC, 12 steps of 5 simulated minutes, counts divided by %d) set the targets of the real convergence loop against the sandbox; after each, one pass acted and, once its instances warmed up (scaled boot), one more took them in: the largest gap between decided and held hot or stopped instances (goal 0)",
			start.Format("Mon 15:04"), liveScale)})
	return nil
}

func abs(n int) int { return max(n, -n) }

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
