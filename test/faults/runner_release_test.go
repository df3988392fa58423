//go:build faults

// The runner-release step of the fault matrix: Actions runner releases published in the GitHub fake
// while runs hold runners, the pool is reused and a warm pool converges; a security release among
// them. The fake holds every runner to GitHub's policy (githubfake/runner_versions.go: no job for a
// runner behind a release published 30 days ago, none at once behind a security release); the
// product reads the release (runnerrelease.Cache), launches it (launchtemplate.Versions, the class's
// launch template carrying runnerpool's user data, so a simulated instance runs the runner its user
// data installs) and retires what fell behind by more than the operator's lag, at hand-back
// (release) and in refresh, never one holding a run (Cache.Due, the rule the service runs).
package faults_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

const (
	// releaseClass is the step's runner class (its pool queue is env.releaseQueue), releasePool its
	// warm pool.
	releaseClass = "release"
	releasePool  = "faults-release"
	// releaseLag is the operator's upgrade lag in this step, scaled down as the sandbox scales time
	// (the service's default is 7 days, runnerversion.DefaultLag).
	releaseLag = 2 * time.Second
)

// stepReleases are published one per round, in this order.
var stepReleases = []runnerversion.Release{{Version: "2.400.0"}, {Version: "2.401.0", Security: true}, {Version: "2.402.0"}}

// releaseAt is releaseClass as the product launches it after a release check: the launch template
// version that installs the current release, the runner it installs, and the rule that retires a
// runner behind it.
type releaseAt struct {
	lt, version, runner string
	cache               *runnerrelease.Cache
}

// due is the product's runner-due rule under the step's lag (nil without a release).
func (a *releaseAt) due() func(store.Instance) string {
	if a == nil {
		return nil
	}
	return func(rec store.Instance) string { return a.cache.Due(rec, releaseLag, time.Now()) }
}

// class is the provisioning class, as reconciler/service/classes.go builds it.
func (a *releaseAt) class(q *pool.Queue, subnets []string) runnerclass.Resolved {
	return runnerclass.Resolved{
		RunnerClass: declared.RunnerClass{
			Name: releaseClass, LaunchTemplateID: a.lt, Subnets: subnets,
			MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(idleTime),
		},
		Queue: q, TemplateVersion: a.version, RunnerVersion: a.runner,
	}
}

// releaseWorld is what the step's reconciler knows: the release cache and the launch template
// versions of its class.
type releaseWorld struct {
	e        *env
	rc       declared.RunnerClass
	cache    *runnerrelease.Cache
	versions *launchtemplate.Versions
	hot      int
}

func newReleaseWorld(ctx context.Context, e *env) (*releaseWorld, error) {
	lt, err := e.sb.ReleaseLaunchTemplate(ctx, "runnerpool-faults-release")
	if err != nil {
		return nil, err
	}
	// Every look reads GitHub (Every 1 ns): the service reads it once an hour; the window between a
	// publication and the product's next look is not what this step judges.
	cache := runnerrelease.New(e.sb.GitHub, e.sb.Store, runnerrelease.Options{Scope: sandbox.Scope, Every: time.Nanosecond, Logger: e.log})
	return &releaseWorld{e: e, cache: cache,
		versions: launchtemplate.New(e.sb.EC2, launchtemplate.Options{Logger: e.log, Release: cache.Current}),
		rc: declared.RunnerClass{
			Name: releaseClass, Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096, InstanceTypes: []string{"c*", "m*"},
			Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
			UsageClass: declared.UsageOnDemand, Subnets: slices.Sorted(maps.Keys(sandbox.Subnets)), QueueURL: e.releaseQueue,
			MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(idleTime), LaunchTemplateID: lt,
		}}, nil
}

// check is the product's release check: the current release read, the class's launch template
// version that installs it.
func (w *releaseWorld) check(ctx context.Context) (*releaseAt, error) {
	if _, err := w.cache.Refresh(ctx); err != nil {
		return nil, err
	}
	n, err := w.versions.For(ctx, w.rc)
	if err != nil {
		return nil, err
	}
	at := &releaseAt{lt: w.rc.LaunchTemplateID, version: n, runner: w.versions.Runner(w.rc, n), cache: w.cache}
	if cur, _ := w.cache.Current(); at.runner != cur.Version {
		return nil, fmt.Errorf("launch template version %s installs runner %q, the current release is %s", n, at.runner, cur.Version)
	}
	return at, nil
}

// converger is replica r's convergence of the step's warm pool, its spec hash naming the runner
// (config.SpecHashWithRunner, as warmpool.ConfigTargets makes it).
func (w *releaseWorld) converger(r *replica, at *releaseAt) *poolsize.Converger {
	targets := func(context.Context, time.Time) ([]warmpool.PoolSpec, error) {
		return []warmpool.PoolSpec{{
			Name: releasePool, Schedule: "faults", Hot: w.hot, Stopped: w.hot, SpecHash: declared.SpecHashWithRunner("faults-release-v1", at.runner), Scope: sandbox.Scope,
			Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: releaseClass, LaunchTemplateID: at.lt, Subnets: w.rc.Subnets, InstanceTypes: w.rc.InstanceTypes, CPU: 2, MemoryMiB: 4096}, RunnerVersion: at.runner, TemplateVersion: at.version, Queue: pool.NewQueue(r.sqs, w.e.releaseQueue)},
		}}, nil
	}
	c, err := poolsize.NewConverger(r.st, r.ec2, fleet.New(r.ec2, fleet.Options{Logger: w.e.log}), targets,
		poolsize.Options{DeploymentID: sandbox.DeploymentID, Now: r.now, Logger: w.e.log})
	if err != nil {
		w.e.t.Fatalf("converger: %v", err)
	}
	return c
}

// settle converges the step's warm pool (settlePool).
func (w *releaseWorld) settle(ctx context.Context, c *poolsize.Converger) error {
	return settlePool(ctx, c, releasePool)
}

// releaseTally is what the step counts.
type releaseTally struct {
	healthyTerminated, stuck, reused, retiredHandBack, retiredRefresh, exposed, handedBehind int
	// seen holds the instances handed to the step's runs, retired those counted retired by refresh.
	seen, retired map[string]bool
}

// runnerReleases: three rounds, one release published in each (the second a security release).
// A round: the warm pool settled on the current release, a run provisioned (reusing the pool), the
// release published while the run holds its runners (a security release after its job ran: GitHub
// stops assigning jobs to older runners at once, and a job already queued for one fails whatever the
// control plane does), the product's release check, the lag, a refresh pass (retires the idle, hot
// and stopped runners behind, never the held run's), the warm pool rolled over, the held run handed
// back (its runners retired), and a new run on runners of the new release. No job may fail, every
// runner handed to a run must be one GitHub assigns jobs to (handed_behind) and runs the version its
// record says, no instance of the current release may be lost (healthy_terminated, with the invariant
// checker's), and at the end every live instance runs a version GitHub assigns jobs to, within the lag.
func runnerReleases(t *testing.T, e *env) {
	ctx := t.Context()
	w, err := newReleaseWorld(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	w.hot = 1
	tl := &releaseTally{seen: map[string]bool{}, retired: map[string]bool{}}
	ok := 0
	for i, rel := range stepReleases {
		if err := releaseRound(ctx, w, tl, rel); err != nil {
			if errors.Is(err, errStuck) {
				tl.stuck++
			}
			t.Errorf("round %d (release %s, security %t): %v", i+1, rel.Version, rel.Security, err)
			continue
		}
		ok++
	}
	if err := w.endState(ctx); err != nil {
		t.Errorf("at the end: %v", err)
	}
	e.report("runner-release", len(stepReleases), ok, fmt.Sprintf(" healthy_terminated=%d stuck_runs=%d reused=%d retired_at_hand_back=%d retired_by_refresh=%d handed_behind=%d exposed_after_security=%d",
		tl.healthyTerminated, tl.stuck, tl.reused, tl.retiredHandBack, tl.retiredRefresh, tl.handedBehind, tl.exposed))
	if tl.healthyTerminated+tl.stuck+tl.handedBehind > 0 {
		t.Errorf("healthy_terminated=%d stuck_runs=%d handed_behind=%d, want 0", tl.healthyTerminated, tl.stuck, tl.handedBehind)
	}
	if tl.reused == 0 || tl.retiredHandBack == 0 || tl.retiredRefresh == 0 {
		t.Errorf("reused=%d retired_at_hand_back=%d retired_by_refresh=%d: the step did not exercise each path", tl.reused, tl.retiredHandBack, tl.retiredRefresh)
	}
}

func releaseRound(ctx context.Context, w *releaseWorld, tl *releaseTally, rel runnerversion.Release) error {
	e := w.e
	at, err := w.check(ctx)
	if err != nil {
		return err
	}
	r := e.replica(replicaOptions{release: at})
	if err := w.settle(ctx, w.converger(r, at)); err != nil {
		return fmt.Errorf("warm pool on %s: %w", at.runner, err)
	}
	held, err := w.workflowStart(ctx, r, tl)
	if err != nil {
		return err
	}
	if rel.Security {
		if err := runJob(e, held); err != nil {
			return err
		}
	}
	e.sb.Stack.GitHub.PublishRunnerRelease(rel)
	if !rel.Security {
		// The held runners are behind now; GitHub assigns them jobs for 30 days.
		if err := runJob(e, held); err != nil {
			return err
		}
	}
	next, err := w.check(ctx)
	if err != nil {
		return err
	}
	if next.runner != rel.Version {
		return fmt.Errorf("after publishing %s the product launches %s", rel.Version, next.runner)
	}
	if rel.Security {
		// The downloads endpoints do not say a release is a security one: until the lag passes, a
		// claim could take a pooled runner GitHub gives no job to. Shown, not hidden.
		n, err := w.claimableUnassignable(ctx)
		if err != nil {
			return err
		}
		tl.exposed += n
	}
	time.Sleep(releaseLag + 200*time.Millisecond)
	r2 := e.replica(replicaOptions{release: next})
	if _, err := r2.ref.Run(ctx); err != nil {
		return fmt.Errorf("refresh after the release: %w", err)
	}
	if err := w.heldUntouched(ctx, held); err != nil {
		return err
	}
	n, err := retiredDue(ctx, e, tl.retired)
	if err != nil {
		return err
	}
	tl.retiredRefresh += n
	if n, err := w.claimableUnassignable(ctx); err != nil || n > 0 {
		return fmt.Errorf("%d claimable instances GitHub gives no job to after the lag and a refresh pass (%v)", n, err)
	}
	if err := w.settle(ctx, w.converger(r2, next)); err != nil {
		return fmt.Errorf("warm pool rolling over to %s: %w", next.runner, err)
	}
	hb, err := e.release(ctx, r2, held.RunKey)
	if err != nil {
		return fmt.Errorf("hand-back of the held run: %w", err)
	}
	for _, in := range hb.Instances {
		if in.Outcome != release.Expired || !retiredBehind(in.Reason, rel.Security) {
			return fmt.Errorf("hand-back of %s behind the release: %s (%s), want retired", in.ID, in.Outcome, in.Reason)
		}
		tl.retiredHandBack++
	}
	fresh, err := w.workflowStart(ctx, r2, tl)
	if err != nil {
		return err
	}
	if err := runJob(e, fresh); err != nil {
		return err
	}
	if _, err := e.release(ctx, r2, fresh.RunKey); err != nil {
		return fmt.Errorf("release of the new run: %w", err)
	}
	var used []string
	for _, rn := range fresh.Runners {
		used = append(used, rn.InstanceID)
	}
	bad, err := e.judge(ctx, judged{used: used})
	tl.healthyTerminated += bad
	if err != nil {
		return err
	}
	lost, err := w.lostCurrent(ctx, tl.seen)
	tl.healthyTerminated += lost
	return err
}

// workflowStart provisions two runners of the class (reusing the pool and the warm pool first) and
// checks each is one GitHub assigns jobs to and runs the version its record says.
func (w *releaseWorld) workflowStart(ctx context.Context, r *replica, tl *releaseTally) (provision.Result, error) {
	e := w.e
	req := e.request(2)
	req.RunnerClass = releaseClass
	res, err := r.prov.Provision(ctx, req)
	if res.RunKey != "" {
		e.mu.Lock()
		e.answered = append(e.answered, res.RunKey)
		e.mu.Unlock()
	}
	if err != nil {
		return res, fmt.Errorf("provision: %w", err)
	}
	e.hold(res)
	if run, gerr := e.sb.Store.GetRun(ctx, res.RunKey); gerr == nil && run.Status == provision.StatusProvisioning {
		return res, fmt.Errorf("%w: run %s still provisioning", errStuck, res.RunKey)
	}
	releases := e.sb.Stack.GitHub.RunnerReleases()
	registered := map[string]string{}
	for _, gr := range e.sb.Stack.GitHub.Runners("acme", "app") {
		registered[gr.Name] = gr.Version
	}
	for _, rn := range res.Runners {
		tl.seen[rn.InstanceID] = true
		if rn.Source != provision.SourceCreated {
			tl.reused++
		}
		rec, err := e.sb.Store.Get(ctx, rn.InstanceID)
		if err != nil {
			return res, err
		}
		if got := registered["runnerpool-"+rn.InstanceID]; got != rec.RunnerVersion {
			return res, fmt.Errorf("%s (%s) registered runner %q, its record says %q", rn.InstanceID, rn.Source, got, rec.RunnerVersion)
		}
		if err := runnerversion.Assignable(rec.RunnerVersion, releases, time.Now()); err != nil {
			tl.handedBehind++
			return res, fmt.Errorf("%s (%s) handed to run %s: %w", rn.InstanceID, rn.Source, res.RunKey, err)
		}
	}
	return res, nil
}

// claimableUnassignable counts the class's live run-less instances a claim could take (idle and
// pooled, ready or stopped, within their thresholds) whose runner GitHub gives no job to now.
func (w *releaseWorld) claimableUnassignable(ctx context.Context) (int, error) {
	live, err := w.e.sb.Store.LiveBrief(ctx)
	if err != nil {
		return 0, err
	}
	releases, now, n := w.e.sb.Stack.GitHub.RunnerReleases(), time.Now(), 0
	for _, rec := range live {
		if rec.RunnerClass != releaseClass || rec.RunID != "" || rec.Expired(now) || !dueStatesOf(rec.State) {
			continue
		}
		if runnerversion.Assignable(rec.RunnerVersion, releases, now) != nil {
			n++
		}
	}
	return n, nil
}

func dueStatesOf(s store.State) bool {
	return s == store.StateIdle || s == store.StateReady || s == store.StateStopped
}

// heldUntouched: the refresh pass left the held run's instances alone (never during a job).
func (w *releaseWorld) heldUntouched(ctx context.Context, held provision.Result) error {
	for _, rn := range held.Runners {
		rec, err := w.e.sb.Store.Get(ctx, rn.InstanceID)
		if err != nil {
			return err
		}
		if rec.RunID != held.RunKey || !rec.State.Live() || rec.Expired(time.Now()) {
			return fmt.Errorf("refresh touched %s of the held run %s: %s, run %q, threshold %s (%s)", rn.InstanceID, held.RunKey, rec.State, rec.RunID, rec.Threshold, rec.Reason)
		}
	}
	return nil
}

// retiredBehind tells whether a hand-back's reason retires a runner behind the current release. After
// a security release GitHub refuses the held runner at once, its runner exits with
// RunnerVersionDeprecated and the agent gives the hand-back up with runnerversion.OutdatedDetail
// (internal/agent outdated.go) before the release's own check can call it behind: either retires it.
func retiredBehind(reason string, security bool) bool {
	if strings.Contains(reason, "is behind the current release") {
		return true
	}
	return security && strings.Contains(reason, runnerversion.OutdatedDetail)
}

// retiredDue counts the class's run-less instances a refresh pass just retired for their runner
// (expired with the runner-due reason, still idle, ready or stopped), each once (counted).
func retiredDue(ctx context.Context, e *env, counted map[string]bool) (int, error) {
	n := 0
	for _, st := range []store.State{store.StateIdle, store.StateReady, store.StateStopped} {
		recs, err := e.sb.Store.ByState(ctx, st, time.Time{})
		if err != nil {
			return n, fmt.Errorf("listing %s records: %w", st, err)
		}
		for _, rec := range recs {
			if rec.RunnerClass == releaseClass && rec.RunID == "" && rec.Expired(time.Now()) && !counted[rec.ID] &&
				strings.Contains(rec.Reason, "is behind the current release") && !strings.Contains(rec.Reason, "deregistered, not pooled") {
				counted[rec.ID] = true
				n++
			}
		}
	}
	return n, nil
}

// lostCurrent counts the class's instances seen by the step that run the current release and were
// terminated or expired anyway: a healthy instance lost.
func (w *releaseWorld) lostCurrent(ctx context.Context, seen map[string]bool) (int, error) {
	cur, _ := w.cache.Current()
	n := 0
	for id := range seen {
		rec, err := w.e.sb.Store.Get(ctx, id)
		if err != nil {
			return n, err
		}
		if rec.RunnerVersion == cur.Version && (!rec.State.Live() || rec.State == store.StateTerminating || rec.Expired(time.Now())) {
			w.e.t.Logf("runner-release: %s on the current release %s is %s (%s)", id, cur.Version, rec.State, rec.Reason)
			n++
		}
	}
	return n, nil
}

// endState: after a release check and a refresh pass, every live instance of the class runs a
// version GitHub assigns jobs to and is within the lag; then the warm pool is scaled to zero.
func (w *releaseWorld) endState(ctx context.Context) error {
	at, err := w.check(ctx)
	if err != nil {
		return err
	}
	r := w.e.replica(replicaOptions{release: at})
	if _, err := r.ref.Run(ctx); err != nil {
		return err
	}
	live, err := w.e.sb.Store.LiveBrief(ctx)
	if err != nil {
		return err
	}
	releases, now := w.e.sb.Stack.GitHub.RunnerReleases(), time.Now()
	var errs []error
	for _, rec := range live {
		if rec.RunnerClass != releaseClass || rec.Expired(now) || rec.State == store.StateTerminating {
			continue
		}
		if err := runnerversion.Assignable(rec.RunnerVersion, releases, now); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", rec.ID, rec.State, err))
		}
		if why := w.cache.Due(rec, releaseLag, now); why != "" {
			errs = append(errs, fmt.Errorf("%s (%s): %s", rec.ID, rec.State, why))
		}
	}
	w.hot = 0
	return errors.Join(append(errs, w.settle(ctx, w.converger(r, at)))...)
}
