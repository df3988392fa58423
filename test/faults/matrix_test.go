//go:build faults

// The fault matrix (`make faults`): the reconciler killed at a random call of each step
// (provision, release, refresh, warm-pool convergence), webhook redelivery, AWS
// throttling, insufficient capacity, 5xx errors, an instance that never registers, a refused
// registration, a stale heartbeat, a killed agent, duplicate and concurrent releases, clock skew,
// runner releases published during a workload (runner_release_test.go).
// After every run the invariant checker judges the whole deployment (env.verify). Each step prints
// one line:
//
//	faults: step=provision runs=20 ok=20 crashed=19 calls=41
//
// The steps run one after the other on purpose (no t.Parallel): the checker looks at the whole
// deployment, and a step's fault hooks (EC2 throttling, capacity) are the EC2 server's, shared.
package faults_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/test/faults"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// runsPerStep is the number of randomised kill runs per step (FAULTS_RUNS overrides; at least 20
// in CI).
func runsPerStep(t *testing.T) int {
	if s := os.Getenv("FAULTS_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FAULTS_RUNS=%q: want a positive number", s)
		}
		return n
	}
	return 20
}

func TestFaultMatrix(t *testing.T) {
	e := newEnv(t)
	began := time.Now()
	runs := runsPerStep(t)
	steps := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"provision", func(t *testing.T, e *env) { killSteps(t, e, killProvision, runs) }},
		{"release", func(t *testing.T, e *env) { killSteps(t, e, killRelease, runs) }},
		{"refresh", func(t *testing.T, e *env) { killSteps(t, e, killRefresh, runs) }},
		{"converge", func(t *testing.T, e *env) { killSteps(t, e, killConverge, runs) }},
		{"throttle", throttled},
		{"capacity", insufficientCapacity},
		{"5xx", serverErrors},
		{"never-registers", neverRegisters},
		{"registration-refused", registrationRefused},
		{"stale-heartbeat", staleHeartbeat},
		{"agent-killed", agentKilled},
		{"duplicate-release", duplicateReleases},
		{"webhook-redelivery", webhookRedelivery},
		{"clock-skew", clockSkew},
		{"lost-answer", lostAnswer},
		{"ec2-throttle", ec2Throttle},
		{"slow", slowAnswers},
		{"github-outage", githubOutageStep},
		{"github-rate-limit", githubRateLimitStep},
		{"spot-reclaim", spotReclaim},
		{"rollback", rollbacks},
		{"runner-release", runnerReleases},
	}
	only := stepFilter(t)
	for _, s := range steps {
		if only != nil && !only[s.name] {
			continue
		}
		if !t.Run(s.name, func(t *testing.T) { s.run(t, e) }) {
			// Later steps judge the whole deployment: a step that left it broken would fail them
			// too, for no reason of their own. Report and go on; the test has failed already.
			t.Logf("step %s failed; the following steps run on the state it left", s.name)
		}
	}
	fmt.Printf("faults: summary (%s)\n", time.Since(began).Round(time.Second))
	for _, l := range e.summary {
		fmt.Println("  " + l)
	}
}

// stepFilter is the set of steps FAULTS_STEPS names (comma-separated), nil for all of them: while
// developing a step, run only it (`FAULTS_STEPS=lost-answer make faults`).
func stepFilter(t *testing.T) map[string]bool {
	v := os.Getenv("FAULTS_STEPS")
	if v == "" {
		return nil
	}
	only := map[string]bool{}
	for name := range strings.SplitSeq(v, ",") {
		only[strings.TrimSpace(name)] = true
	}
	t.Logf("FAULTS_STEPS=%s: running only those steps", v)
	return only
}

// killStep is one step of the control plane to crash: prepare sets the world up for a run with a
// healthy replica and returns the operation a victim replica runs, and what a fresh replica does
// after the crash (the workflow's retry or its always() release) before env.verify.
type killStep struct {
	name    string
	prepare func(ctx context.Context, t *testing.T, e *env, healthy *replica) (op func(ctx context.Context, victim *replica) error, after func(ctx context.Context, fresh *replica) error)
	// check adds rules to the late check of env.verifyWith.
	check invariant.Options
}

// killSteps runs a step twice whole to count its calls, then runs it with the victim crashed at a
// call drawn uniformly from 1 to about that count until it has crashed runs times (a kill point
// past a run's last call lets that run finish, which is checked too).
func killSteps(t *testing.T, e *env, step killStep, runs int) {
	ctx := t.Context()
	healthy := e.replica(replicaOptions{})
	one := func(at int) (*faults.Crash, error) {
		op, after := step.prepare(ctx, t, e, healthy)
		crash := faults.NewCrash(at, nil)
		victim := e.replica(replicaOptions{crash: crash})
		vctx, cancel := context.WithCancel(ctx)
		defer cancel() // after verify: the abandoned goroutine's calls fail anyway; this ends it sooner
		done := make(chan error, 1)
		go func() { done <- op(vctx, victim) }()
		select {
		case err := <-done:
			if err != nil && !crash.Dead() {
				return crash, fmt.Errorf("%s without a crash: %w", step.name, err)
			}
		case <-crash.Killed():
		case <-time.After(2 * time.Minute):
			return crash, fmt.Errorf("%s neither finished nor crashed in 2 minutes", step.name)
		}
		if after != nil {
			if err := after(ctx, e.replica(replicaOptions{})); err != nil {
				return crash, fmt.Errorf("recovery after the crash: %w", err)
			}
		}
		_, err := e.verifyWith(ctx, step.check)
		return crash, err
	}
	// Two uncrashed runs count the step's calls; kill points are drawn up to half as many again,
	// since a run may have more to do than the calibration's (a later run that makes fewer calls
	// than its kill point finishes uncrashed, and counts as such).
	calls := 0
	for range 2 {
		calib, err := one(0)
		if err != nil {
			t.Fatalf("%s, uncrashed calibration run: %v", step.name, err)
		}
		calls = max(calls, calib.Calls())
	}
	calls += calls / 2
	// Runs go on until runs of them crashed (bounded): each step is killed at least runs times.
	ok, crashed, total := 0, 0, 0
	points := map[string]int{}
	for i := 0; crashed < runs && i < 3*runs; i++ {
		total++
		at := 1 + e.rng.IntN(calls)
		crash, err := one(at)
		if crash.Dead() {
			crashed++
			points[crash.Cut()]++
		} else {
			// A run with more calls than the calibration widens the range of kill points.
			calls = max(calls, crash.Calls())
		}
		if err != nil {
			t.Errorf("%s run %d, crashed at call %d of %d (%s): %v", step.name, i+1, at, calls, crash.Cut(), err)
			continue
		}
		ok++
	}
	var cut []string
	for _, k := range slices.Sorted(maps.Keys(points)) {
		cut = append(cut, fmt.Sprintf("%s:%d", k, points[k]))
	}
	t.Logf("%s: crash points %s", step.name, strings.Join(cut, " "))
	if crashed < runs {
		t.Errorf("%s: only %d of %d runs crashed, want %d", step.name, crashed, total, runs)
	}
	e.report(step.name, total, ok, fmt.Sprintf(" crashed=%d calls=%d", crashed, calls))
}

// killProvision: a provision of two runners with one idle instance in the pool (one reused, one
// created), crashed anywhere from the run record to post-provision. Afterwards the workflow's
// always() release job runs on a fresh replica.
var killProvision = killStep{name: "provision", check: invariant.Options{ProvisionDeadline: provisionDeadline}, prepare: func(ctx context.Context, t *testing.T, e *env, healthy *replica) (func(context.Context, *replica) error, func(context.Context, *replica) error) {
	if err := e.stock(ctx, healthy, 1); err != nil {
		t.Fatal(err)
	}
	req := e.request(2)
	key := store.RunKey(req.RepositoryID, req.RunID, req.Attempt)
	op := func(ctx context.Context, victim *replica) error {
		res, err := victim.prov.Provision(ctx, req)
		if err == nil {
			e.hold(res)
		}
		return err
	}
	after := func(ctx context.Context, fresh *replica) error {
		e.unhold(key)
		_, err := fresh.rel.Release(ctx, key, idleTime)
		return err
	}
	return op, after
}}

// killRelease: the release of a run of two, crashed anywhere; the workflow's retry runs on a fresh
// replica.
var killRelease = killStep{name: "release", prepare: func(ctx context.Context, t *testing.T, e *env, healthy *replica) (func(context.Context, *replica) error, func(context.Context, *replica) error) {
	res, err := e.provision(ctx, healthy, 2)
	if err != nil {
		t.Fatalf("release step setup: %v", err)
	}
	e.unhold(res.RunKey)
	op := func(ctx context.Context, victim *replica) error {
		_, err := victim.rel.Release(ctx, res.RunKey, idleTime)
		return err
	}
	after := func(ctx context.Context, fresh *replica) error {
		_, err := fresh.rel.Release(ctx, res.RunKey, idleTime)
		return err
	}
	return op, after
}}

// killRefresh: a refresh pass with work in every phase (an idle instance past its threshold with
// its pool message, an orphan, the runners of gone instances), crashed anywhere.
var killRefresh = killStep{name: "refresh", prepare: func(ctx context.Context, t *testing.T, e *env, healthy *replica) (func(context.Context, *replica) error, func(context.Context, *replica) error) {
	if err := e.stock(ctx, healthy, 2); err != nil {
		t.Fatal(err)
	}
	idle, err := e.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
	if err != nil || len(idle) == 0 {
		t.Fatalf("refresh step setup: idle records %d, %v", len(idle), err)
	}
	if _, err := e.sb.Store.Expire(ctx, idle[0].ID, "", "fault matrix: expired for refresh"); err != nil {
		t.Fatalf("refresh step setup: %v", err)
	}
	if _, err := healthy.ec2.RunInstances(ctx, &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		SubnetId: aws.String("subnet-0aaa"),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String(tags.Deployment), Value: aws.String(sandbox.DeploymentID)},
		}}},
	}); err != nil {
		t.Fatalf("refresh step setup: launching an orphan: %v", err)
	}
	op := func(ctx context.Context, victim *replica) error {
		_, err := victim.ref.Run(ctx)
		return err
	}
	return op, nil
}}

// workflow provisions count runners, runs a job on them when job is set, and releases them, with
// the healthy replica r. It returns the provision's result.
func workflow(ctx context.Context, e *env, r *replica, count int, job bool) (provision.Result, release.Report, error) {
	res, err := e.provision(ctx, r, count)
	if err != nil {
		return res, release.Report{}, fmt.Errorf("provision: %w", err)
	}
	if job {
		if err := runJob(e, res); err != nil {
			return res, release.Report{}, err
		}
	}
	rep, err := e.release(ctx, r, res.RunKey)
	if err != nil {
		return res, rep, fmt.Errorf("release: %w", err)
	}
	return res, rep, nil
}

// runJob queues a job for the run's label and waits (30 s at most) until a runner completed it.
func runJob(e *env, res provision.Result) error {
	runID, _, _ := strings.Cut(res.Label, "-")
	run, _ := strconv.ParseInt(runID, 10, 64)
	id := e.sb.Stack.GitHub.QueueJob("acme", "app", run, []string{res.Label})
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, _ := e.sb.Stack.GitHub.Job(id)
		if j.Status == "completed" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job of run %s still %s after 30s", res.Label, j.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sources(res provision.Result) map[string]int {
	out := map[string]int{}
	for _, r := range res.Runners {
		out[r.Source]++
	}
	return out
}

// throttled: 10% of EC2 calls answered RequestLimitExceeded by the EC2 server and 10% of DynamoDB
// and SQS calls ThrottlingException; whole workflows still succeed.
func throttled(t *testing.T, e *env) {
	ctx := t.Context()
	inj := &faults.Inject{Every: 10, Kind: faults.KindThrottle}
	r := e.replica(replicaOptions{inject: inj})
	e.sb.Stack.EC2.SetThrottle(0.1)
	defer e.sb.Stack.EC2.SetThrottle(0)
	const runs = 5
	ok := 0
	for i := range runs {
		if _, _, err := workflow(ctx, e, r, 2, i == 0); err != nil {
			t.Errorf("throttled workflow %d: %v", i+1, err)
			continue
		}
		if err := e.verify(ctx); err != nil {
			t.Errorf("throttled workflow %d: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("throttle", runs, ok, fmt.Sprintf(" injected_ddb_sqs=%d ec2_calls=%d", inj.Injected(), e.sb.Stack.EC2.Calls()["CreateFleet"]))
}

// insufficientCapacity: EC2 has no capacity (or less than asked); the provision fails as
// unsuccessful, the reused instance goes back to the pool, a partial fleet is terminated.
func insufficientCapacity(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{})
	defer e.sb.Stack.EC2.SetCapacity("", "", -1)
	cases := []struct {
		name     string
		capacity int
	}{{"none", 0}, {"partial", 1}, {"none-again", 0}}
	ok := 0
	for _, c := range cases {
		err := func() error {
			if err := e.stock(ctx, r, 1); err != nil {
				return err
			}
			e.sb.Stack.EC2.SetCapacity("", "", c.capacity)
			defer e.sb.Stack.EC2.SetCapacity("", "", -1)
			res, err := e.provision(ctx, r, e.idle(ctx)+2)
			if !errors.Is(err, provision.ErrFailed) || res.Outcome != "unsuccessful" {
				return fmt.Errorf("provision with capacity %d = %+v, %v; want unsuccessful", c.capacity, res, err)
			}
			returned := 0
			for _, u := range res.Undone {
				if u.Action == provision.ActionReturned {
					returned++
				}
			}
			if returned == 0 {
				return fmt.Errorf("no reused instance went back to the pool: %+v", res.Undone)
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("capacity %s: %v", c.name, err)
			continue
		}
		ok++
	}
	e.report("capacity", len(cases), ok, "")
}

// serverErrors: EC2 answers InternalError (500) to the next call of each action the control plane
// makes, and every seventh DynamoDB and SQS call gets a 500; the SDK retries and workflows succeed.
func serverErrors(t *testing.T, e *env) {
	ctx := t.Context()
	inj := &faults.Inject{Every: 7, Kind: faults.KindServerError}
	r := e.replica(replicaOptions{inject: inj})
	const runs = 4
	ok := 0
	faulted := []string{"CreateFleet", "CreateTags", "TerminateInstances", "DescribeInstances", "DescribeInstanceTypes"}
	// A fault queued for an action this workflow did not call would hit a later step.
	defer drainFaults(t, e, faulted)
	for i := range runs {
		for _, a := range faulted {
			e.sb.Stack.EC2.SetFailNext(a, "InternalError", 500)
		}
		if _, _, err := workflow(ctx, e, r, 2, false); err != nil {
			t.Errorf("workflow %d under 5xx errors: %v", i+1, err)
			continue
		}
		if err := e.verify(ctx); err != nil {
			t.Errorf("workflow %d under 5xx errors: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("5xx", runs, ok, fmt.Sprintf(" injected_ddb_sqs=%d", inj.Injected()))
}

// neverRegisters: a created instance whose agent never starts; fleet validation times out, the
// provision is unsuccessful and the instance is terminated. (The isolated runner class's pool is
// empty: the runner is created.)
func neverRegisters(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{fleetWait: 3 * time.Second})
	const runs = 2
	ok := 0
	for i := range runs {
		err := func() error {
			e.noAgent.Store(true)
			defer e.noAgent.Store(false)
			req := e.request(1)
			req.RunnerClass = isolatedClass
			res, err := r.prov.Provision(ctx, req)
			if !errors.Is(err, provision.ErrFailed) || res.Outcome != "unsuccessful" {
				return fmt.Errorf("provision = %+v, %v; want unsuccessful", res, err)
			}
			if !strings.Contains(res.Error, "registration timed out") {
				return fmt.Errorf("provision failed for another reason: %s", res.Error)
			}
			terminated := 0
			for _, u := range res.Undone {
				if u.Action == provision.ActionTerminated && u.Error == "" {
					terminated++
				}
			}
			if terminated != 1 {
				return fmt.Errorf("undone %+v, want the created instance terminated", res.Undone)
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("never-registers", runs, ok, "")
}

// registrationRefused: GitHub refuses the registrations of the pooled instances; each one claimed
// is discarded (terminated, never handed to the run) and the run gets a created runner instead.
func registrationRefused(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{})
	const runs = 2
	ok := 0
	for i := range runs {
		err := func() error {
			if err := e.stock(ctx, r, 1); err != nil {
				return err
			}
			idle, err := e.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
			if err != nil {
				return err
			}
			for _, rec := range idle {
				e.refuse.Store(rec.ID, struct{}{})
			}
			res, err := e.provision(ctx, r, 1)
			if err != nil {
				return fmt.Errorf("provision: %w", err)
			}
			if s := sources(res); s[provision.SourceCreated] != 1 {
				return fmt.Errorf("provision = %+v, want one created runner", res.Runners)
			}
			discarded := 0
			for _, u := range res.Undone {
				if _, refused := e.refuse.Load(u.InstanceID); refused && u.Action == provision.ActionTerminated {
					discarded++
				}
			}
			if discarded == 0 {
				return fmt.Errorf("no refused instance was discarded: %+v", res.Undone)
			}
			if _, err := e.release(ctx, r, res.RunKey); err != nil {
				return err
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("registration-refused", runs, ok, "")
}

// staleHeartbeat: a pooled instance whose agent died: its heartbeat goes stale, the claim that
// picks it discards it (terminated, never handed to the run) and the run gets another runner.
func staleHeartbeat(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{})
	const runs = 2
	ok := 0
	for i := range runs {
		err := func() error {
			if err := e.stock(ctx, r, 1); err != nil {
				return err
			}
			idle, err := e.sb.Store.ByState(ctx, store.StateIdle, time.Time{})
			if err != nil || len(idle) == 0 {
				return fmt.Errorf("no idle instance: %v", err)
			}
			victim := ""
			for _, rec := range idle {
				if e.sb.KillAgent(rec.ID) {
					victim = rec.ID
					break
				}
			}
			if victim == "" {
				return fmt.Errorf("no idle instance with a running agent among %d", len(idle))
			}
			time.Sleep(heartbeatMaxAge + time.Second)
			res, err := e.provision(ctx, r, e.idle(ctx))
			if err != nil {
				return fmt.Errorf("provision: %w", err)
			}
			for _, rn := range res.Runners {
				if rn.InstanceID == victim {
					return fmt.Errorf("the instance with a stale heartbeat %s was handed to run %s", victim, res.RunKey)
				}
			}
			if rec, err := e.sb.Store.Get(ctx, victim); err != nil || rec.State.Live() && rec.State != store.StateIdle {
				return fmt.Errorf("stale %s: %s, %v", victim, rec.State, err)
			}
			if _, err := e.release(ctx, r, res.RunKey); err != nil {
				return err
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("stale-heartbeat", runs, ok, "")
}

// agentKilled: the agent of a running runner dies; the release cannot get its deregistration and
// expires it instead of pooling it; refresh terminates it.
func agentKilled(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{})
	const runs = 2
	ok := 0
	for i := range runs {
		err := func() error {
			res, err := e.provision(ctx, r, 2)
			if err != nil {
				return fmt.Errorf("provision: %w", err)
			}
			dead := res.Runners[0].InstanceID
			if !e.sb.KillAgent(dead) {
				return fmt.Errorf("no agent on %s", dead)
			}
			rep, err := e.release(ctx, r, res.RunKey)
			if err != nil {
				return fmt.Errorf("release: %w", err)
			}
			for _, in := range rep.Instances {
				if in.ID == dead && in.Outcome != release.Expired {
					return fmt.Errorf("the instance without an agent %s: %s (%s), want expired", dead, in.Outcome, in.Reason)
				}
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("agent-killed", runs, ok, "")
}

// duplicateReleases: six releases of one run at once on two replicas, then one more: every
// instance is pooled exactly once, the last release changes nothing.
func duplicateReleases(t *testing.T, e *env) {
	ctx := t.Context()
	a, b := e.replica(replicaOptions{}), e.replica(replicaOptions{})
	const runs = 3
	ok := 0
	for i := range runs {
		err := func() error {
			res, err := e.provision(ctx, a, 3)
			if err != nil {
				return fmt.Errorf("provision: %w", err)
			}
			e.unhold(res.RunKey)
			var mu sync.Mutex
			pooled := map[string]int{}
			var wg sync.WaitGroup
			for j := range 6 {
				r := a
				if j%2 == 1 {
					r = b
				}
				wg.Go(func() {
					rep, err := r.rel.Release(ctx, res.RunKey, idleTime)
					if err != nil {
						t.Logf("concurrent release %d: %v", j, err)
					}
					mu.Lock()
					defer mu.Unlock()
					for _, in := range rep.Instances {
						if in.Outcome == release.Pooled {
							pooled[in.ID]++
						}
					}
				})
			}
			wg.Wait()
			if len(pooled) != len(res.Runners) {
				return fmt.Errorf("pooled %v, want each of the %d runners once", pooled, len(res.Runners))
			}
			for id, n := range pooled {
				if n != 1 {
					return fmt.Errorf("%s pooled by %d releases", id, n)
				}
			}
			before, err := e.check(ctx, a, invariant.Options{})
			if err != nil {
				return err
			}
			if err := before.Err(); err != nil {
				return err
			}
			again, err := b.rel.Release(ctx, res.RunKey, idleTime)
			if err != nil || again.Message != release.NothingToRelease {
				return fmt.Errorf("a release after the others = %+v, %v; want %q", again, err, release.NothingToRelease)
			}
			after, err := e.check(ctx, a, invariant.Options{})
			if err != nil {
				return err
			}
			if v := invariant.Unchanged(before, after); len(v) > 0 {
				return fmt.Errorf("a repeated release changed something: %v", v)
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("run %d: %v", i+1, err)
			continue
		}
		ok++
	}
	e.report("duplicate-release", runs, ok, "")
}

// clockSkew: the instances' clocks run ahead of or behind the reconciler's. Liveness is judged by
// the agent's acknowledgement of the claim (a value naming the run), not by comparing timestamps,
// so every skew works as usual. (Before, an instance further behind than the heartbeat tolerance
// looked dead and the provision was unsuccessful; that outcome is still accepted, never unsafe.)
func clockSkew(t *testing.T, e *env) {
	ctx := t.Context()
	r := e.replica(replicaOptions{})
	defer e.skew.Store(0)
	skews := []time.Duration{30 * time.Second, -heartbeatMaxAge / 2, -30 * time.Second}
	ok := 0
	var line []string
	for _, skew := range skews {
		err := func() error {
			if err := e.stock(ctx, r, 2); err != nil {
				return err
			}
			e.skew.Store(int64(skew))
			defer e.skew.Store(0)
			time.Sleep(1500 * time.Millisecond) // a heartbeat with the skewed clock
			res, _, err := workflow(ctx, e, r, 2, true)
			tolerated := -skew < heartbeatMaxAge
			switch {
			case err == nil:
				s := sources(res)
				line = append(line, fmt.Sprintf("%s:reused=%d,created=%d", skew, s[provision.SourceReused], s[provision.SourceCreated]))
			case !tolerated && errors.Is(err, provision.ErrFailed) && res.Outcome == "unsuccessful":
				line = append(line, fmt.Sprintf("%s:unsuccessful", skew))
			default:
				return err
			}
			return e.verify(ctx)
		}()
		if err != nil {
			t.Errorf("skew %s: %v", skew, err)
			continue
		}
		ok++
	}
	e.report("clock-skew", len(skews), ok, " "+strings.Join(line, " "))
}

// drainFaults consumes the EC2 server's queued failures of actions: each is called, without
// retries, until it answers something other than the injected InternalError. The calls are shaped
// so that none can change anything (a launch template that does not exist, an instance id that
// does not exist).
func drainFaults(t *testing.T, e *env, actions []string) {
	ctx := context.Background()
	cfg, _ := e.sb.Stack.AWSConfig(ctx)
	c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.RetryMaxAttempts = 1 })
	none := []string{"i-00000000000000000"}
	calls := map[string]func() error{
		"CreateFleet": func() error {
			_, err := c.CreateFleet(ctx, &ec2.CreateFleetInput{Type: ec2types.FleetTypeInstant,
				LaunchTemplateConfigs:       []ec2types.FleetLaunchTemplateConfigRequest{{LaunchTemplateSpecification: &ec2types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateId: aws.String("lt-00000000000000000"), Version: aws.String("1")}}},
				TargetCapacitySpecification: &ec2types.TargetCapacitySpecificationRequest{TotalTargetCapacity: aws.Int32(1), DefaultTargetCapacityType: ec2types.DefaultTargetCapacityTypeOnDemand}})
			return err
		},
		"CreateTags": func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: none, Tags: []ec2types.Tag{{Key: aws.String("x"), Value: aws.String("y")}}})
			return err
		},
		"TerminateInstances": func() error {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: none})
			return err
		},
		"DescribeInstances": func() error {
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: none})
			return err
		},
		"DescribeInstanceTypes": func() error {
			_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(5)})
			return err
		},
	}
	for _, a := range actions {
		for range 10 {
			err := calls[a]()
			if err == nil || !strings.Contains(err.Error(), "InternalError") {
				break
			}
			t.Logf("drained a queued %s failure", a)
		}
	}
}
