// The autoscale phase's real-stack part: the policy drives the real convergence loop through the
// real wiring: the replica's own converger (service.Service.Components), with the instance caps,
// job queue and price book the service gives it, on the policy's clock (service.Options.AutoscaleNow).
// A warm pool with an autoscale block, written to the state table as the provider
// writes it, starts from a week of recorded demand (the week before, in its AUTOSCALE item as a
// leader that watched it would have left it); the busiest weekday hour of the committed week is
// then replayed at a scaled speed: one job in liveScale, sent as workflow_job webhooks to a replica
// whose pool workers serve them from the pool (hot, stopped, else a cold start), in liveSteps steps
// of 5 minutes of the policy's clock (poolsize.AutoscaleOptions.Now). Each step the convergence
// loop counts the jobs that arrived, decides (autoscale.Decide), keeps the decision in the pool's
// AUTOSCALE item and acts; once what it started could warm up, one more pass acts, and
// autoscale_live_target_error is the largest gap between the decision then stored in the table and
// the hot and stopped instances the pool holds. (Passes repeat, no job arriving, while a pass
// decides otherwise than the one before it: its live signals, look-ahead or cooldown may differ
// from the deciding pass's.)
package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/jobtrace"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/simulate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const (
	liveClass, livePool = "bench-autoscale", "bench-autoscale"
	liveScale           = 20 // one job in 20: the week's pool of up to ~200 becomes ~10 instances
	liveSteps           = 12
	liveStep            = 5 * time.Minute // of the policy's clock
	liveMaxHot          = 12              // the schedule window's maxima
	liveMaxStopped      = 6
	liveSecret          = "bench-autoscale-webhook-secret"
	liveSettle          = 5 // passes per step at most
)

// policyClock is the policy's clock (poolsize.AutoscaleOptions.Now): the bench moves it through
// the replayed hour.
type policyClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *policyClock) set(t time.Time) {
	c.mu.Lock()
	c.at = t
	c.mu.Unlock()
}

func (c *policyClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// thin keeps one job in liveScale.
func thin(jobs []jobtrace.Job) []jobtrace.Job {
	var out []jobtrace.Job
	for i, j := range jobs {
		if i%liveScale == 0 {
			out = append(out, j)
		}
	}
	return out
}

// busiestHour is the start of the weekday hour of jobs with the most jobs.
func busiestHour(jobs []jobtrace.Job) time.Time {
	counts := map[time.Time]int{}
	for _, j := range jobs {
		if wd := j.Created.UTC().Weekday(); wd != time.Saturday && wd != time.Sunday {
			counts[j.Created.UTC().Truncate(time.Hour)]++
		}
	}
	var best time.Time
	for _, h := range slices.SortedFunc(maps.Keys(counts), func(a, b time.Time) int { return a.Compare(b) }) {
		if counts[h] > counts[best] {
			best = h
		}
	}
	return best
}

// liveRun is the phase's state.
type liveRun struct {
	h     *harness
	conv  *poolsize.Converger
	clock *policyClock
	hooks *githubfake.WebhookSender
	sent  []int64 // job ids sent so far
	// arrived sums the decisions' arrivals: the wiring must count every job sent exactly once.
	arrived int
}

func (h *harness) autoscaleLive(ctx context.Context, res *Result) error {
	began := time.Now()
	week, before := committedWeeks()
	start := busiestHour(week)
	var hour []jobtrace.Job
	for _, j := range thin(week) {
		if !j.Created.Before(start) && j.Created.Before(start.Add(time.Hour)) {
			hour = append(hour, j)
		}
	}
	lr, stop, err := h.startLive(ctx, thin(before), start)
	if err != nil {
		return err
	}
	defer stop()
	h.say("  the policy drives the real convergence loop through %s UTC (the busiest weekday hour: %d jobs, one in %d replayed as pool jobs), %d steps of %s of its clock",
		start.Format("Mon 15:04"), len(hour), liveScale, liveSteps, liveStep)
	st, err := lr.replay(ctx, start, hour)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && lr.arrived != len(lr.sent) {
		errs = append(errs, fmt.Errorf("the wiring counted %d arrivals for the %d jobs sent", lr.arrived, len(lr.sent)))
	}
	queue := ""
	if len(errs) == 0 {
		var err error
		if queue, err = lr.queueTime(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, lr.finish(ctx))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	wall := time.Since(began)
	res.add(Figure{Name: "autoscale_live_target_error", Value: float64(st.worst), Unit: "instances",
		How: fmt.Sprintf("a warm pool with an autoscale block (goal p95 5 s, window max %d hot, %d stopped) in the state table, its AUTOSCALE item holding the week before's demand (one job in %d); "+
			"the committed week's busiest weekday hour (%s UTC, %d jobs after thinning) replayed as workflow_job webhooks served by a replica's pool workers, %d steps of %s of the policy's clock; "+
			"each step the real convergence loop counted the arrivals, decided and acted; after the simulated warm-up one more pass acted, repeated (the policy's clock 1 ms on, no job arriving) until a pass's decision was the one the pass before acted on (at most %d passes): the largest gap between the decision stored in the table and the pool's ready and stopped instances (goal 0). "+
			"Decisions ranged %d-%d hot, %d-%d stopped, with the start times the wiring measured on the bench's scaled boot (%s; %s); "+
			"every job counted once; %s; phase wall time %s on this machine",
			liveMaxHot, liveMaxStopped, liveScale, start.Format("Mon 15:04"), len(hour), liveSteps, liveStep, liveSettle, st.lo[0], st.hi[0], st.lo[1], st.hi[1], st.starts, st.startsFrom, queue, wall.Round(100*time.Millisecond))})
	h.say("  decisions %d-%d hot, %d-%d stopped; largest gap %d; %d jobs counted once; %s; %s", st.lo[0], st.hi[0], st.lo[1], st.hi[1], st.worst, lr.arrived, queue, wall.Round(100*time.Millisecond))
	return nil
}

// liveStats are the replay's figures: the largest gap, the decisions' range and the last
// decision's start times.
type liveStats struct {
	worst              int
	lo, hi             [2]int // hot, stopped
	starts, startsFrom string // the last decision's start times and where they came from
}

// replay runs the hour's steps.
func (lr *liveRun) replay(ctx context.Context, start time.Time, hour []jobtrace.Job) (liveStats, error) {
	st := liveStats{lo: [2]int{1 << 30, 1 << 30}}
	for s := range liveSteps {
		at := start.Add(time.Duration(s+1) * liveStep)
		var due []jobtrace.Job
		for _, j := range hour {
			if !j.Created.Before(at.Add(-liveStep)) && j.Created.Before(at) {
				due = append(due, j)
			}
		}
		d, held, passes, err := lr.step(ctx, at, due)
		if err != nil {
			return st, fmt.Errorf("step %d: %w", s, err)
		}
		st.worst = max(st.worst, abs(held[0]-d.Hot), abs(held[1]-d.Stopped))
		st.lo = [2]int{min(st.lo[0], d.Hot), min(st.lo[1], d.Stopped)}
		st.hi = [2]int{max(st.hi[0], d.Hot), max(st.hi[1], d.Stopped)}
		ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
		st.starts = fmt.Sprintf("hot %s, stopped %s, cold %s", ms(d.Decision.HotStartMS), ms(d.Decision.StoppedStartMS), ms(d.Decision.ColdStartMS))
		st.startsFrom = d.Decision.StartsFrom
		lr.h.say("  step %2d (%s): %2d jobs; decided %d hot, %d stopped (forecast %.2f/min, level %d%s); held %d hot, %d stopped after %d passes",
			s, at.Format("15:04"), len(due), d.Hot, d.Stopped, d.Decision.Forecast, d.Decision.Level, conflictNote(d.Decision.Conflict), held[0], held[1], passes)
	}
	return st, nil
}

func conflictNote(c string) string {
	if c == "" {
		return ""
	}
	return "; conflict: " + c
}

// writeLivePool writes the class, the pool with its autoscale block (as the provider writes it)
// and its AUTOSCALE item holding the week before's demand (as a leader that watched it leaves it).
func (h *harness) writeLivePool(ctx context.Context, before []jobtrace.Job) error {
	q, err := h.sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-sandbox-" + liveClass)})
	if err != nil {
		return err
	}
	h.extraQueues = append(h.extraQueues, aws.ToString(q.QueueUrl))
	for sn, z := range launchSubnets {
		h.sb.Stack.EC2.SetSubnet(sn, z)
	}
	repo := declared.NewRepository(h.sb.Store)
	rc := declared.RunnerClass{
		Name: liveClass, Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096, InstanceTypes: []string{"c*", "m*"},
		Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
		UsageClass: declared.UsageOnDemand, Subnets: slices.Sorted(maps.Keys(launchSubnets)), QueueURL: aws.ToString(q.QueueUrl),
		MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(10 * time.Minute), LaunchTemplateID: h.sb.LaunchTemplate,
	}
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		return err
	}
	// As the provider writes a runnerpool_warm_pool with an autoscale block.
	if _, err := repo.PutWarmPool(ctx, declared.WarmPool{Name: livePool, RunnerClass: liveClass, Timezone: "UTC",
		Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: liveMaxHot, Stopped: liveMaxStopped}},
		Autoscale: &declared.Autoscale{QueueTimeP95: declared.Duration(autoscaleGoal)}}, 0); err != nil {
		return err
	}
	prof := simulate.Record(before, time.UTC)
	if _, err := h.sb.Store.PutAutoscale(ctx, store.AutoscaleState{Pool: livePool, Profile: prof.Encode()}, 0); err != nil {
		return fmt.Errorf("recording the week before's demand: %w", err)
	}
	return nil
}

// startLive writes the pool and starts the replica that serves the pool's webhooks and jobs.
func (h *harness) startLive(ctx context.Context, before []jobtrace.Job, start time.Time) (*liveRun, func(), error) {
	if err := h.writeLivePool(ctx, before); err != nil {
		return nil, nil, err
	}
	jobs, err := h.sb.Stack.SQS().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("runnerpool-bench-autoscale-jobs")})
	if err != nil {
		return nil, nil, err
	}
	saved := h.env
	h.env = maps.Clone(saved)
	if h.env == nil {
		h.env = map[string]string{}
	}
	maps.Copy(h.env, map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_RESOURCE_CLASSES": "small=2:4096", "RUNNERPOOL_DEFAULT_RUNNER_CLASS": liveClass,
		"RUNNERPOOL_POOL_JOB_QUEUE_URL": aws.ToString(jobs.QueueUrl), "RUNNERPOOL_WEBHOOK_SECRET": liveSecret,
		"RUNNERPOOL_WARM_POOL_SCOPE": "acme",
	})
	// Not the leader (the harness's replica is): it serves the webhooks and the pool jobs; the
	// pool is converged below by the replica's own convergence (its instance caps, job queue and
	// price book, as the leader's cron job runs it), on the policy's clock.
	clock := &policyClock{at: start}
	svc, stop, err := h.startReplica(ctx, "bench-autoscale", false, func(o *service.Options) { o.AutoscaleNow = clock.now })
	h.env = saved
	if err != nil {
		return nil, nil, err
	}
	conv := svc.Components().Converger
	lr := &liveRun{h: h, conv: conv, clock: clock, hooks: &githubfake.WebhookSender{URL: svc.URL() + apiv1.PathWebhookGitHub, Secret: liveSecret}}
	// The first pass learns what the pool holds (a new leader counts arrivals from its second).
	clock.set(start)
	if _, err := lr.pass(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	return lr, stop, nil
}

func (lr *liveRun) pass(ctx context.Context) (poolsize.PoolReport, error) {
	rep, err := lr.conv.Pass(ctx)
	if err != nil {
		return poolsize.PoolReport{}, err
	}
	pr, _ := rep.Pool(livePool)
	if pr.Err != nil {
		return pr, pr.Err
	}
	if pr.Autoscale == nil {
		return pr, errors.New("the pass made no autoscale decision")
	}
	lr.arrived += pr.Autoscale.Arrived
	return pr, nil
}

// step sends the step's jobs, waits until each holds a registered runner, and lets the
// convergence loop decide and act at the policy's time at: the decision stored last, the hot and
// stopped instances the pool then holds, and how many passes ran.
func (lr *liveRun) step(ctx context.Context, at time.Time, due []jobtrace.Job) (store.AutoscaleState, [2]int, int, error) {
	owner, repoName, _ := strings.Cut(sandbox.Scope, "/")
	for i := range due {
		id := int64(7_300_000 + len(lr.sent))
		if _, status, err := lr.hooks.SendWorkflowJob(ctx, "queued", githubfake.WorkflowJobEvent{
			ID: id, RunID: id, Labels: []string{"self-hosted", "pool=" + livePool}, Owner: owner, Repo: repoName,
		}); err != nil || status != 200 {
			return store.AutoscaleState{}, [2]int{}, 0, fmt.Errorf("webhook of job %d of %d: %d %v", i, len(due), status, err)
		}
		lr.sent = append(lr.sent, id)
	}
	if err := lr.waitRegistered(ctx, 30*time.Second); err != nil {
		return store.AutoscaleState{}, [2]int{}, 0, err
	}
	d, passes, err := lr.settle(ctx, at)
	if err != nil {
		return d, [2]int{}, passes, err
	}
	held, err := lr.held(ctx)
	return d, held, passes, err
}

// settle runs the deciding pass at at (it counts the arrivals, decides, acts); what it started
// warms up (a scaled boot, or a stopped start) and one more pass acts. The passes repeat (no job
// arrives, the policy's clock 1 ms on each) until a pass's decision is the one the pass before
// acted on, at most liveSettle passes in all.
func (lr *liveRun) settle(ctx context.Context, at time.Time) (store.AutoscaleState, int, error) {
	var d store.AutoscaleState
	for passes := 0; passes < liveSettle; {
		if passes > 0 {
			if err := lr.warmUp(ctx, d); err != nil {
				return d, passes, err
			}
		}
		prev := d
		lr.clock.set(at.Add(time.Duration(passes) * time.Millisecond))
		if _, err := lr.pass(ctx); err != nil {
			return d, passes, err
		}
		passes++
		var err error
		if d, err = lr.h.sb.Store.GetAutoscale(ctx, livePool); err != nil {
			return d, passes, err
		}
		if !d.DecidedAt.Equal(lr.clock.now()) {
			return d, passes, fmt.Errorf("the stored decision was made at %s, not at the policy's %s", d.DecidedAt, lr.clock.now())
		}
		if passes > 1 && d.Hot == prev.Hot && d.Stopped == prev.Stopped {
			return d, passes, nil
		}
	}
	return d, liveSettle, nil
}

// warmUp waits for what the pass acting on d started to warm up: a scaled boot and registration
// and half a second, then, on a loaded machine where the sandbox's boots run late, until the pool
// holds d's instances or ten times that has passed (a gap that remains is the figure's).
func (lr *liveRun) warmUp(ctx context.Context, d store.AutoscaleState) error {
	boot := lr.h.o.scaled(AnchorColdBoot) + lr.h.o.scaled(AnchorRegistration) + 500*time.Millisecond
	if err := sleepCtx(ctx, boot); err != nil {
		return err
	}
	for deadline := time.Now().Add(9 * boot); time.Now().Before(deadline); {
		held, err := lr.held(ctx)
		if err != nil {
			return err
		}
		if held == [2]int{d.Hot, d.Stopped} {
			return nil
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// queueTime checks that the wiring measured the replayed jobs' queue times (the pool's item keeps
// those of the last hour of the policy's clock: all of them) and says what it measured: wall-clock
// time at the bench's scaled boot, not the trace's.
func (lr *liveRun) queueTime(ctx context.Context) (string, error) {
	st, err := lr.h.sb.Store.GetAutoscale(ctx, livePool)
	if err != nil {
		return "", err
	}
	d := st.Decision
	if d.QueueJobs == 0 || d.QueueJobs > len(lr.sent) || d.GoalMS != autoscaleGoal.Milliseconds() {
		return "", fmt.Errorf("the pool's item measured %d queue times (goal %d ms) of the %d jobs sent", d.QueueJobs, d.GoalMS, len(lr.sent))
	}
	return fmt.Sprintf("queue time p95 %s over %d of the %d jobs as the item kept it (wall clock, scaled boot)",
		time.Duration(d.QueueP95MS)*time.Millisecond, d.QueueJobs, len(lr.sent)), nil
}

// held counts the pool's hot (ready) and stopped instances in the table.
func (lr *liveRun) held(ctx context.Context) ([2]int, error) {
	live, err := lr.h.sb.Store.LiveBrief(ctx)
	if err != nil {
		return [2]int{}, err
	}
	var n [2]int
	for _, in := range live {
		switch {
		case in.Pool != livePool || in.RunID != "":
		case in.State == store.StateReady:
			n[0]++
		case in.State == store.StateStopped:
			n[1]++
		}
	}
	return n, nil
}

// jobHolders are the pool's live records held by the phase's jobs, by job id.
func (lr *liveRun) jobHolders(ctx context.Context) (map[int64]store.Instance, error) {
	live, err := lr.h.sb.Store.LiveBrief(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int64]store.Instance{}
	for _, in := range live {
		key, ok := strings.CutPrefix(in.RunID, warmpool.JobRunPrefix)
		if !ok || in.Pool != livePool || in.State == store.StateTerminating {
			continue
		}
		if id, err := strconv.ParseInt(key, 10, 64); err == nil {
			out[id] = in
		}
	}
	return out, nil
}

// waitRegistered waits until every job sent holds an instance whose runner registered for it.
func (lr *liveRun) waitRegistered(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		holders, err := lr.jobHolders(ctx)
		if err != nil {
			return err
		}
		missing := 0
		for _, id := range lr.sent {
			in, ok := holders[id]
			if !ok {
				missing++
				continue
			}
			if in.State == store.StateRunning {
				continue
			}
			sig, err := lr.h.sb.Store.LastSignal(ctx, in.ID)
			if err != nil || sig.Signal != store.SignalRegistered || sig.RunID != in.RunID {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs without a registered runner after %s", missing, len(lr.sent), limit)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// finish completes the jobs (their instances end), removes the pool and scales it to zero: the
// audit finds nothing left behind.
func (lr *liveRun) finish(ctx context.Context) error {
	owner, repoName, _ := strings.Cut(sandbox.Scope, "/")
	var errs []error
	for _, id := range lr.sent {
		if _, status, err := lr.hooks.SendWorkflowJob(ctx, "completed", githubfake.WorkflowJobEvent{
			ID: id, RunID: id, Labels: []string{"self-hosted", "pool=" + livePool}, Owner: owner, Repo: repoName, Conclusion: "cancelled",
		}); err != nil || status != 200 {
			errs = append(errs, fmt.Errorf("completion webhook of job %d: %d %v", id, status, err))
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		holders, err := lr.jobHolders(ctx)
		if err != nil || len(holders) == 0 {
			errs = append(errs, err)
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("%d instances still held by completed jobs after 30 s", len(holders)))
			break
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	if err := declared.NewRepository(lr.h.sb.Store).DeleteWarmPool(ctx, livePool); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for range 2 {
		if _, err := lr.conv.Pass(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
