// The steps of one provision: selection, creation, fleet validation, and post-provision (success,
// unsuccessful, dump).
package provision

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launch"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pipeline"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/quota"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"golang.org/x/sync/errgroup"
)

// job is one provision in progress: what it was asked, and every instance it holds.
type job struct {
	req    Request
	key    string
	token  string // CreateFleet client token of this try (fleetToken)
	rc     runnerclass.Resolved
	labels []string
	// usage and types are the usage class and allowed-instance-types patterns of the runners: the
	// request's combined with the runner class's (Request.usageClass, Request.instanceTypes).
	usage string
	types []string
	log   *slog.Logger
	// regToken is the run's registration token, shared by every runner of the provision (reused,
	// started or created): minted once, while selection runs.
	regToken *claim.TokenSource

	res     Result
	claimed []claim.Claimed  // selected: claimed for the run
	started []store.Instance // stopped warm instances claimed for the run and started
	created []store.Instance // created: launched, with a record written
	mu      sync.Mutex       // guards res.Undone
}

func (j *job) undone(u Undone) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.res.Undone = append(j.res.Undone, u)
}

// discarded is the action of a discard that returned err: terminated, or expired when EC2 did
// not show the instance yet.
func discarded(err error) string {
	if errors.Is(err, claim.ErrNotTerminatedYet) {
		return ActionExpired
	}
	return ActionTerminated
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// provision runs the steps. The Result it returns is final: every instance the job touched is
// running for the run, back in the pool, or terminated (or expired for refresh to terminate).
func (p *Provisioner) provision(ctx context.Context, req Request, key, token string, log *slog.Logger) (Result, error) {
	start := time.Now()
	rc := p.cfg.RunnerClasses[req.runnerClass(p.cfg)]
	types, _ := req.instanceTypes(rc)
	j := &job{
		req: req, key: key, token: token, rc: rc, labels: req.labels(rc),
		usage: req.usageClass(rc), types: types, log: log,
	}
	err := p.steps(ctx, j)
	j.res.Timing.Total = time.Since(start)
	j.res.Labels = j.labels
	return j.res, err
}

// steps runs the workflow source's stages of the runner pipeline (package pipeline): selection
// from the pool (hot), stopped warm instances, creation (cold) and validation; then post-provision.
// The outcome is in j.res.
func (p *Provisioner) steps(ctx context.Context, j *job) error {
	req := j.req
	cpu, mem := req.size(p.cfg)
	j.regToken = p.reg.TokenFor(req.Repository)
	j.regToken.Start(ctx)
	// Selection claims the instances the run's repository and trust level may have
	// (pool.RunScope: a class that keeps images keeps a pull request's runs and the base
	// repository's apart); the runners register in the repository whatever it is.
	filter := pool.Filter{
		UsageClass: req.reuseUsageClass(j.rc), InstanceTypes: j.types, MinCPU: cpu, MinMemoryMiB: mem,
		ResourceClass: req.ResourceClass, Scope: pool.RunScope(req.Repository, req.Event, declared.KeepsAcrossRuns(j.rc.JobAccess)),
	}
	steps := map[pipeline.Stage]pipeline.Step{
		pipeline.Hot: func(ctx context.Context, n int) (int, error) { return p.selectPooled(ctx, j, n, filter) },
		pipeline.Stopped: func(ctx context.Context, n int) (int, error) {
			if err := ctx.Err(); err != nil {
				return 0, &stepError{err: fmt.Errorf("before starting stopped instances: %w", err), unsuccessful: true}
			}
			t := time.Now()
			defer func() { j.res.Timing.Start = time.Since(t) }()
			err := p.startStopped(ctx, j, n, filter)
			return len(j.started), err
		},
		pipeline.Cold: func(ctx context.Context, n int) (int, error) {
			if err := ctx.Err(); err != nil {
				return 0, &stepError{err: fmt.Errorf("before creation: %w", err), unsuccessful: true}
			}
			err := p.create(ctx, j, n, j.usage, cpu, mem)
			return len(j.created), err
		},
		pipeline.Validate: func(ctx context.Context, n int) (int, error) {
			if len(j.started)+len(j.created) == 0 {
				return n, nil // reused runners were verified when claimed
			}
			t := time.Now()
			defer func() { j.res.Timing.Validate = time.Since(t) }()
			return n, p.validateFleet(ctx, j)
		},
	}
	stages := pipeline.Stages(pipeline.Workflow, p.opts.Starter != nil)
	if _, err := pipeline.Run(ctx, pipeline.Workflow, stages, steps, req.Count); err != nil {
		return p.failed(ctx, j, err)
	}
	return p.succeed(ctx, j)
}

// selectPooled is the hot stage: claim workers over the runner class's pool (its queue, then the
// table's idle index) for n instances that fit filter.
func (p *Provisioner) selectPooled(ctx context.Context, j *job, n int, filter pool.Filter) (int, error) {
	t := time.Now()
	defer func() { j.res.Timing.Select = time.Since(t) }()
	cres, err := p.claimer.ClaimN(ctx, claim.Request{
		RunID: j.key, Scope: j.req.Repository, Labels: j.labels, Count: n, Queue: j.rc.Queue, Pickup: p.opts.Pickup, Token: j.regToken,
		Filter: filter, SecondLook: p.secondLook(j.rc.Name, filter),
	})
	j.claimed = cres.Claimed
	for _, d := range cres.Discarded {
		j.undone(Undone{InstanceID: d.InstanceID, Action: discarded(d.Err), Reason: "failed its checks: " + d.Reason, Error: errString(d.Err)})
	}
	if err != nil {
		// Dumped unless the request ended (failed): nobody planned for a selection that fails.
		return len(j.claimed), fmt.Errorf("selection: %w", err)
	}
	j.log.Debug("selection done", "claimed", len(j.claimed), "indexed", cres.Indexed, "second_look", cres.SecondLook,
		"discarded", len(cres.Discarded), "lost", cres.Lost, "receives", cres.Stats.Receives, "exhausted", cres.Stats.Exhausted)
	return len(j.claimed), nil
}

// stepError classifies a failure: unsuccessful (nothing unexpected happened: no capacity, an
// instance did not register, the request was cancelled) or not (dump).
type stepError struct {
	err          error
	unsuccessful bool
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func (p *Provisioner) failed(ctx context.Context, j *job, err error) error {
	var se *stepError
	if errors.As(err, &se) && se.unsuccessful || ctx.Err() != nil {
		return p.unsuccessful(ctx, j, err)
	}
	return p.dump(ctx, j, err)
}

// create launches n instances with one fleet and writes their records (package launch: the
// reservation against the caps, the fleet, the records and the settlement), then issues their
// registration credentials.
func (p *Provisioner) create(ctx context.Context, j *job, n int, usage string, cpu, mem int) error {
	t := time.Now()
	defer func() { j.res.Timing.Create = time.Since(t) }()
	out, err := p.launch.Launch(ctx, launch.Order{
		Count: n, RunnerClass: j.rc.Name, Reservation: j.token,
		Shape: launch.Shape{
			UsageClass: usage, InstanceTypes: j.types, MinCPU: cpu, MinMemoryMiB: mem,
			AllowBurstable: j.req.AllowBurstable, FallbackToOnDemand: j.req.FallbackToOnDemand,
			ClientToken: j.token, Spec: p.launchSpec(j.rc, j.key),
		},
		Record: func(_ int, l fleet.Launched) store.Instance {
			// The record carries the request's minimum size rather than the launched type's, so
			// a later pool filter on it never over-promises.
			return store.Instance{
				ID: l.ID, State: store.StateCreated, RunID: j.key, Threshold: p.opts.Now().Add(p.cfg.createdTimeout(j.rc)),
				UsageClass: l.UsageClass, InstanceType: l.InstanceType, CPU: cpu, MemoryMiB: mem,
				ResourceClass: j.req.ResourceClass, RunnerClass: j.rc.Name, Scope: j.req.Repository, Zone: l.Zone,
				RunnerVersion: j.rc.RunnerVersion, JobAccess: j.rc.JobAccess, Reason: "created for run " + j.key,
			}
		},
	})
	for _, e := range out.Ended {
		j.undone(Undone{InstanceID: e.InstanceID, Action: ActionTerminated, Reason: e.Reason, Error: errString(e.Err)})
	}
	j.created = append(j.created, out.Recorded...)
	if err != nil {
		// A refusal of the caps, no capacity or a refused fleet request are unsuccessful (what was
		// recorded of a partial fleet is terminated with the rest); a record not written is not.
		return &stepError{err: fmt.Errorf("creation: %w", err), unsuccessful: !errors.Is(err, launch.ErrNotRecorded)}
	}
	j.log.Debug("created", "instances", len(out.Recorded))
	if ctx.Err() != nil {
		return &stepError{err: fmt.Errorf("creation: %w", ctx.Err()), unsuccessful: true}
	}
	// The agent of a created instance reads its record on boot (created, with the run) and then
	// its registration credential.
	err = p.each(len(j.created), func(i int) error { return p.reg.IssueWith(ctx, j.created[i], j.labels, j.regToken) })
	if err != nil {
		return &stepError{err: fmt.Errorf("issuing registrations: %w", err), unsuccessful: ctx.Err() != nil}
	}
	return nil
}

// secondLook lists, through the table's by_fit index (no scan, and only the records of the
// request's runner class and of the scopes that cover its repository), the idle and hot instances
// that fit the request, in random order so that concurrent requests spread over them.
// It is selection's answer to what the pool queue cannot show: an empty short poll on a small queue
// (SQS samples a subset of its servers), messages other requests hold for the moment, a message
// lost in a crash. The listing is eventually consistent; the conditional claim decides.
func (p *Provisioner) secondLook(runnerClass string, f pool.Filter) func(ctx context.Context) ([]pool.Message, error) {
	if p.opts.NoSecondLook {
		return nil
	}
	return func(ctx context.Context) ([]pool.Message, error) {
		now := p.opts.Now()
		var out []pool.Message
		recs, err := p.fitting(ctx, claim.PoolStates, runnerClass, f.Scope)
		if err != nil {
			// Not the request's failure: creation makes up what the queue did not give.
			p.log.Warn("second look through the idle index failed; creating instead", "err", err)
			return nil, nil
		}
		for _, rec := range recs {
			m := claim.MessageOf(rec)
			// Only what the control plane pooled itself (store.Instance.PooledAt: a release or
			// unclaim that verified the hand-back, or a warm-up that made it hot, and no
			// transition since): a release still waiting for its agent, or one whose agent forged
			// its signal while GitHub still lists the runner, lists the record idle without the
			// mark. The index may lag; the claim's condition on the mark decides.
			pooled := !rec.PooledAt.IsZero()
			if pooled && rec.RunnerClass == runnerClass && rec.RunID == "" && !rec.Expired(now) && m.Validate() == nil && fits(f, rec) {
				out = append(out, m)
			}
		}
		rand.Shuffle(len(out), func(i, k int) { out[i], out[k] = out[k], out[i] })
		return out, nil
	}
}

// fitting lists the live records in states of the runner class whose scope covers the request's
// (pool.CoveringScopes: the repository, and its owner), one by_fit query per scope for all the
// states (store.FittingIn), the scopes at once: what the request can use, never the whole pool.
// A request of a repository's untrusted scope (pool.RunScope) also lists the repository's own warm
// instances, which never ran a job (fits). The caller still filters (size, type, pool mark,
// expiry, fits). A table created before the index existed lists by state instead, as it did then
// (the provider warns about such a table at plan).
func (p *Provisioner) fitting(ctx context.Context, states []store.State, runnerClass, scope string) ([]store.Instance, error) {
	type query struct {
		scope  string
		states []store.State
	}
	var queries []query
	for _, sc := range pool.CoveringScopes(scope) {
		queries = append(queries, query{sc, states})
	}
	if repo, warm := pool.GitHubScope(scope), slices.DeleteFunc(slices.Clone(states), ranAJob); repo != scope && len(warm) > 0 {
		queries = append(queries, query{repo, warm})
	}
	got := make([][]store.Instance, len(queries))
	errs := make([]error, len(queries))
	var wg sync.WaitGroup
	for i, q := range queries {
		wg.Go(func() { got[i], errs[i] = p.st.FittingIn(ctx, q.states, runnerClass, q.scope) })
	}
	wg.Wait()
	if err := errors.Join(errs...); errors.Is(err, store.ErrNoIndex) {
		p.log.Warn("the state table lacks the by_fit index: selection lists the whole pool by state", "err", err)
		var out []store.Instance
		for _, st := range states {
			recs, err := p.st.ByState(ctx, st, time.Time{})
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
		}
		return out, nil
	} else if err != nil {
		return nil, err
	}
	return slices.Concat(got...), nil
}

// fits reports whether the record's instance fits the request: its pool message matches the
// filter, or it is a warm pool's instance that never ran a job (hot or stopped), which serves
// every trust level of its repository (the filter on the repository's own scope). A pooled
// instance that ran a run's jobs serves only runs of that run's trust level (pool.RunScope).
func fits(f pool.Filter, rec store.Instance) bool {
	m := claim.MessageOf(rec)
	if f.Matches(m) {
		return true
	}
	f.Scope = pool.GitHubScope(f.Scope)
	return !ranAJob(rec.State) && f.Matches(m)
}

// ranAJob reports whether an instance in state may have run a job: only a warm pool's warmed
// instances, hot (ready) or stopped, never did (both come from warming alone).
func ranAJob(state store.State) bool {
	return state != store.StateReady && state != store.StateStopped
}

// startStopped is the stopped branch of selection: it claims up to n stopped warm-pool instances of
// the runner class that fit the request, starts them (one StartInstances per 50) and issues their
// registration credentials; their agents register once booted, and validation waits for them with
// the created ones. Candidates are taken soonest-to-expire first, so the instances closest to being
// replaced serve first. A failure of this branch is not the request's: what it could not start is
// left to creation, and only an instance it claimed and cannot hand a credential fails the request.
func (p *Provisioner) startStopped(ctx context.Context, j *job, n int, f pool.Filter) error {
	recs, err := p.fitting(ctx, []store.State{store.StateStopped}, j.rc.Name, f.Scope)
	if err != nil {
		j.log.Warn("stopped warm instances not listed; creating instead", "err", err)
		return nil
	}
	now := p.opts.Now()
	var cands []store.Instance
	for _, rec := range recs {
		if rec.RunnerClass == j.rc.Name && rec.RunID == "" && !rec.Expired(now) && fits(f, rec) {
			cands = append(cands, rec)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	slices.SortFunc(cands, func(a, b store.Instance) int {
		return cmp.Or(a.Threshold.Compare(b.Threshold), strings.Compare(a.ID, b.ID))
	})
	runs := make([]string, n)
	for i := range runs {
		runs[i] = j.key
	}
	// A started instance boots and registers within the created timeout, as a created one does.
	sres, serr := p.opts.Starter.ClaimAndStart(ctx, cands, runs, now.Add(p.cfg.createdTimeout(j.rc)))
	j.started = sres.Started
	for _, d := range sres.Discarded {
		j.undone(Undone{InstanceID: d.InstanceID, Action: discarded(d.Err), Reason: "stopped warm instance not started: " + d.Reason, Error: errString(d.Err)})
	}
	if serr != nil || len(sres.StartFailed) > 0 {
		j.log.Warn("stopped warm instances not all started; creating the rest", "start_failed", len(sres.StartFailed), "err", serr)
	}
	if ctx.Err() != nil {
		return &stepError{err: fmt.Errorf("starting stopped instances: %w", ctx.Err()), unsuccessful: true}
	}
	j.log.Debug("stopped warm instances started", "started", len(j.started), "lost", sres.Lost, "start_calls", sres.StartCalls)
	err = p.each(len(j.started), func(i int) error { return p.reg.IssueWith(ctx, j.started[i], j.labels, j.regToken) })
	if err != nil {
		return &stepError{err: fmt.Errorf("issuing registrations to started instances: %w", err), unsuccessful: ctx.Err() != nil}
	}
	return nil
}

// validateFleet waits for every started and created instance to register and be alive: all or
// nothing. The first failure ends the wait for the others.
func (p *Provisioner) validateFleet(ctx context.Context, j *job) error {
	booting := append(slices.Clone(j.started), j.created...)
	errs := make([]error, len(booting)) // every instance's own outcome, read below
	g, vctx := errgroup.WithContext(ctx)
	for i, rec := range booting {
		g.Go(func() error {
			errs[i] = p.reg.WaitRegistered(vctx, rec.ID, j.key, p.cfg.registrationWait(j.rc))
			return errs[i]
		})
	}
	_ = g.Wait()
	var checks, others []error
	for _, err := range errs {
		switch {
		case err == nil:
		case claim.CheckFailed(err):
			checks = append(checks, err)
		case errors.Is(err, context.Canceled) && ctx.Err() == nil:
			// cancelled because another instance failed
		default:
			others = append(others, err)
		}
	}
	if len(checks) > 0 {
		return &stepError{err: fmt.Errorf("fleet validation: %w", errors.Join(checks...)), unsuccessful: true}
	}
	if len(others) > 0 {
		return &stepError{err: fmt.Errorf("fleet validation: %w", errors.Join(others...)), unsuccessful: ctx.Err() != nil}
	}
	return nil
}

// succeed moves every selected and created instance to running for the run. It finishes even when
// ctx ends: every instance is verified, and the run record will hold the answer.
func (p *Provisioner) succeed(ctx context.Context, j *job) error {
	t := time.Now()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.RollbackTimeout)
	defer cancel()
	threshold := p.opts.Now().Add(p.runningThreshold(j.rc))
	runners := make([]Runner, len(j.claimed)+len(j.started)+len(j.created))
	err := p.each(len(runners), func(i int) error {
		if i < len(j.claimed) {
			cl := j.claimed[i]
			in, err := p.claimer.Promote(dctx, cl, threshold)
			runners[i] = Runner{InstanceID: in.ID, InstanceType: in.InstanceType, UsageClass: in.UsageClass, Zone: in.Zone, Source: SourceReused}
			return err
		}
		if i -= len(j.claimed); i < len(j.started) {
			in, err := p.claimer.Promote(dctx, claim.Claimed{Instance: j.started[i]}, threshold)
			runners[len(j.claimed)+i] = Runner{InstanceID: in.ID, InstanceType: in.InstanceType, UsageClass: in.UsageClass, Zone: in.Zone, Source: SourceStarted}
			return err
		}
		i -= len(j.started)
		rec := j.created[i]
		in, err := p.st.Transition(dctx, rec.ID, store.Change{
			From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: j.key,
			Threshold: threshold, Reason: "registered for run " + j.key,
		})
		if err != nil {
			return fmt.Errorf("promoting %s: %w", rec.ID, err)
		}
		runners[len(j.claimed)+len(j.started)+i] = Runner{InstanceID: in.ID, InstanceType: in.InstanceType, UsageClass: in.UsageClass, Zone: in.Zone, Source: SourceCreated}
		return nil
	})
	if err != nil {
		return p.dump(ctx, j, fmt.Errorf("post-provision: %w", err))
	}
	slices.SortFunc(runners, func(a, b Runner) int {
		return cmp.Or(cmp.Compare(sourceRank[a.Source], sourceRank[b.Source]), strings.Compare(a.InstanceID, b.InstanceID))
	})
	j.res.Status, j.res.Runners = StatusSucceeded, runners
	j.res.Timing.Post = time.Since(t)
	j.log.Info("provisioned", "reused", len(j.claimed), "started", len(j.started), "created", len(j.created))
	return nil
}

var sourceRank = map[string]int{SourceReused: 0, SourceStarted: 1, SourceCreated: 2}

func (p *Provisioner) runningThreshold(rc runnerclass.Resolved) time.Duration {
	switch {
	case p.cfg.RunningThreshold > 0:
		return p.cfg.RunningThreshold
	case rc.MaxRuntime > 0:
		return rc.MaxRuntime.Std()
	}
	return DefaultMaxRuntime
}

// unsuccessful undoes a provision that could not be completed: selected instances go back to the
// pool (terminated if that fails; one whose agent took the run's credential only through a release
// of it, claim.Claimer.Unclaim), started and created ones are terminated (a started warm instance
// cannot go back to stopped; its pool's convergence replaces it).
func (p *Provisioner) unsuccessful(ctx context.Context, j *job, cause error) error {
	t := time.Now()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.RollbackTimeout)
	defer cancel()
	reason := "provision unsuccessful: " + cause.Error()
	// The hand-backs share their GitHub checks: one runner listing per scope.
	dctx = p.claimer.ShareListings(dctx, min(len(j.claimed), p.opts.Concurrency))
	_ = p.each(len(j.claimed), func(i int) error {
		cl := j.claimed[i]
		uerr := p.claimer.Unclaim(dctx, cl, time.Time{}, j.rc.Queue)
		if uerr == nil {
			j.undone(Undone{InstanceID: cl.Instance.ID, Action: ActionReturned, Reason: reason})
			return nil
		}
		derr := p.reg.Discard(dctx, cl.Instance.ID, j.key, reason)
		j.undone(Undone{InstanceID: cl.Instance.ID, Action: discarded(derr),
			Reason: reason + "; could not go back to the pool: " + uerr.Error(), Error: errString(derr)})
		return nil
	})
	p.discardCreated(dctx, j, reason)
	j.res.Timing.Post = time.Since(t)
	j.res.Status, j.res.Outcome, j.res.Error = StatusFailed, "unsuccessful", cause.Error()
	// Undone because the request ended, not for want of capacity or a failed check: the same run
	// attempt may try again (StatusRolledBack).
	// So is a provision refused by an instance cap: the same run attempt may ask again once
	// instances are freed.
	j.res.Retryable = ctx.Err() != nil || errors.Is(cause, quota.ErrRefused)
	j.log.Info("provision unsuccessful", "err", cause, "returned", len(j.claimed), "terminated", len(j.started)+len(j.created))
	return cause
}

// dump terminates everything the provision selected or created: the safety net for errors
// nobody planned for, so no instance is left half-provisioned.
func (p *Provisioner) dump(ctx context.Context, j *job, cause error) error {
	t := time.Now()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.RollbackTimeout)
	defer cancel()
	reason := "provision dumped: " + cause.Error()
	_ = p.each(len(j.claimed), func(i int) error {
		id := j.claimed[i].Instance.ID
		derr := p.reg.Discard(dctx, id, j.key, reason)
		j.undone(Undone{InstanceID: id, Action: discarded(derr), Reason: reason, Error: errString(derr)})
		return nil
	})
	p.discardCreated(dctx, j, reason)
	j.res.Timing.Post = time.Since(t)
	j.res.Status, j.res.Outcome, j.res.Error = StatusFailed, "dump", cause.Error()
	j.log.Error("provision dumped", "err", cause, "claimed", len(j.claimed), "started", len(j.started), "created", len(j.created))
	return cause
}

// discardCreated terminates the started and created instances of the job.
func (p *Provisioner) discardCreated(ctx context.Context, j *job, reason string) {
	booting := append(slices.Clone(j.started), j.created...)
	_ = p.each(len(booting), func(i int) error {
		id := booting[i].ID
		derr := p.reg.Discard(ctx, id, j.key, reason)
		j.undone(Undone{InstanceID: id, Action: discarded(derr), Reason: reason, Error: errString(derr)})
		return nil
	})
}

// each runs f(0..n-1) with at most Concurrency at once and joins the errors.
func (p *Provisioner) each(n int, f func(i int) error) error {
	if n == 0 {
		return nil
	}
	// Every f runs whatever the others return: all errors are joined, none cancels the rest.
	errs := make([]error, n)
	var g errgroup.Group
	g.SetLimit(p.opts.Concurrency)
	for i := range n {
		g.Go(func() error { errs[i] = f(i); return nil })
	}
	_ = g.Wait()
	return errors.Join(errs...)
}
