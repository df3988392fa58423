// The pool-job source's stages of the runner pipeline (package pipeline): a group of jobs of one
// pool is taken in the job ledger, then served by hot instances (ready, claimed conditionally for
// the job, so two replicas never pick the same one), stopped ones (claimed, then started with one
// StartInstances per 50) and cold starts for the overflow (one CreateFleet per group, package
// launch); each instance then gets a just-in-time runner bound to its job (register). A webhook's
// pool job and a scale set's job run the same stages; they differ in where the runner is minted.
package pooljob

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pipeline"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// held is a job this worker serves now.
type held struct {
	msg      message
	run      store.Run // its ledger entry, status serving
	takeover bool      // an earlier attempt's lease ran out: it may have left an instance
	inst     store.Instance
	src      string
}

// group is one pool's jobs of a batch going through the pipeline.
type group struct {
	w    *Worker
	spec warmpool.PoolSpec
	msgs []message
	o    *outcomes
	gr   *GroupReport
	log  *slog.Logger
	now  time.Time

	jobs         []*held // held in the ledger by this worker
	rest         []*held // held, and not given an instance yet
	hot, stopped []store.Instance
	failed       []*held // to hand back: a start or launch failed
	picked       []*held // given an instance
	regFailed    []*held // given an instance that could not get a runner (discarded)
	errs         []error
}

// source is the pipeline source of a group: a scale set's jobs when every job is one.
func source(msgs []message) pipeline.Source {
	for _, m := range msgs {
		if m.job.ScaleSetID == 0 {
			return pipeline.PoolJob
		}
	}
	return pipeline.ScaleSetJob
}

// serveGroup serves the jobs of one pool.
func (w *Worker) serveGroup(ctx context.Context, poolName string, msgs []message, o *outcomes) {
	gr := GroupReport{Pool: poolName, Jobs: len(msgs)}
	defer func() { o.lock(func() { o.rep.Groups = append(o.rep.Groups, gr) }) }()
	spec, ok := w.poolOf(ctx, poolName, msgs, o, &gr)
	if !ok {
		return
	}
	g := &group{w: w, spec: spec, msgs: msgs, o: o, gr: &gr, log: w.log.With("pool", poolName), now: w.cfg.Now()}
	src := source(msgs)
	_, err := pipeline.Run(ctx, src, pipeline.Stages(src, true), map[pipeline.Stage]pipeline.Step{
		pipeline.Ledger:   g.ledger,
		pipeline.Hot:      g.claimHot,
		pipeline.Stopped:  g.startStopped,
		pipeline.Cold:     g.coldStart,
		pipeline.Register: g.register,
	}, len(msgs))
	if err != nil {
		return // the jobs were handed back
	}
	g.settle(ctx)
}

// poolOf looks up the group's pool. Jobs of a pool that cannot be read now are retried; jobs of a
// pool that does not exist have their run cancelled.
func (w *Worker) poolOf(ctx context.Context, poolName string, msgs []message, o *outcomes, gr *GroupReport) (warmpool.PoolSpec, bool) {
	retryAll := func(err error) {
		gr.Err = err
		o.lock(func() {
			o.errors = append(o.errors, err)
			o.retry = append(o.retry, msgs...)
			for _, m := range msgs {
				o.rep.Requeued = append(o.rep.Requeued, m.job.JobID)
			}
		})
	}
	spec, ok, err := w.cfg.Pools.Lookup(ctx, poolName)
	switch {
	case err != nil:
		retryAll(fmt.Errorf("pool %s: %w", poolName, err))
	case !ok:
		w.cancelUnknown(ctx, poolName, msgs, o)
	case spec.Err != nil:
		// The configuration exists but cannot be read now: wait for it to be fixed.
		retryAll(fmt.Errorf("pool %s: configuration unusable: %w", poolName, spec.Err))
	default:
		return spec, true
	}
	return warmpool.PoolSpec{}, false
}

// ledger is the ledger stage: the jobs are taken in the job ledger, so a job served already, or
// held by another worker, is not served twice; a job queued too long is abandoned. An earlier
// attempt that crashed half-way may have left an instance for a job: adopted if its agent
// registered for the job, else ended and the job served afresh. It returns how many jobs are not
// to be served here.
func (g *group) ledger(ctx context.Context, _ int) (int, error) {
	w, o := g.w, g.o
	jobs := make([]*held, len(g.msgs))
	warmpool.Each(len(g.msgs), func(i int) {
		m := g.msgs[i]
		if age := g.now.Sub(m.job.CreatedAt); !m.job.CreatedAt.IsZero() && age > w.cfg.MaxJobAge {
			g.log.Warn("pool job too old to serve: abandoned", "job", m.job.JobID, "age", age)
			if r, status, err := w.ledger.begin(ctx, m.job); err == nil && (status == beginServe || status == beginTakeover) {
				_, _ = w.ledger.set(ctx, r, warmpool.JobAbandoned, warmpool.JobResult{At: g.now, Reason: "queued " + age.String() + " ago"})
			}
			o.lock(func() { o.rep.Dropped++; o.del = append(o.del, m) })
			return
		}
		r, status, err := w.ledger.begin(ctx, m.job)
		switch {
		case err != nil:
			o.lock(func() {
				o.errors = append(o.errors, err)
				o.retry = append(o.retry, m)
				o.rep.Requeued = append(o.rep.Requeued, m.job.JobID)
			})
		case status == beginDone:
			o.lock(func() { o.rep.Dropped++; o.del = append(o.del, m) })
		case status == beginBusy:
			// Another worker holds it; its message comes back after the lease if that one fails.
		default:
			jobs[i] = &held{msg: m, run: r, takeover: status == beginTakeover}
			o.leases.hold(r)
		}
	})
	jobs = slices.DeleteFunc(jobs, func(h *held) bool { return h == nil })
	for _, h := range w.clearStale(ctx, jobs, g.log) {
		o.lock(func() {
			o.del = append(o.del, h.msg)
			o.rep.Served = append(o.rep.Served, Served{JobID: h.msg.job.JobID, Pool: g.spec.Name, InstanceID: h.inst.ID, Source: h.src})
		})
		jobs = slices.DeleteFunc(jobs, func(x *held) bool { return x == h })
	}
	g.jobs, g.rest = jobs, slices.Clone(jobs)
	return len(g.msgs) - len(jobs), nil
}

// list reads the pool's usable hot and stopped instances, soonest to expire first (they serve
// before they dangle).
func (g *group) list(ctx context.Context) error {
	recs, err := g.w.cfg.Store.ByPool(ctx, g.spec.Name)
	if err != nil {
		return err
	}
	for _, in := range recs {
		// A pooled instance serves a job only with its agent's key pinned (at its warm-up): its
		// agent starts the runner only then, and nothing here would pin it soon (agent/pin.go).
		usable := in.RunID == "" && in.Threshold.After(g.now) && in.AgentKey != "" && (g.spec.SpecHash == "" || in.SpecHash == g.spec.SpecHash)
		switch {
		case usable && in.State == store.StateReady:
			g.hot = append(g.hot, in)
		case usable && in.State == store.StateStopped:
			g.stopped = append(g.stopped, in)
		}
	}
	byThreshold := func(a, b store.Instance) int {
		return cmp.Or(a.Threshold.Compare(b.Threshold), strings.Compare(a.ID, b.ID))
	}
	slices.SortFunc(g.hot, byThreshold)
	slices.SortFunc(g.stopped, byThreshold)
	return nil
}

// claimHot is the hot stage (after listing the pool): each job takes a ready instance with a
// conditional claim (package claim's loop).
func (g *group) claimHot(ctx context.Context, _ int) (int, error) {
	if err := g.list(ctx); err != nil {
		g.w.release(ctx, g.jobs, fmt.Errorf("pool %s: listing instances: %w", g.spec.Name, err), g.o)
		g.gr.Err = err
		return 0, err
	}
	taken, err := claim.Take(ctx, g.w.cfg.Store, g.hot, runsOf(g.rest), g.now.Add(g.w.cfg.ClaimTimeout), store.StateReady)
	if err != nil {
		g.errs = append(g.errs, err)
	}
	var rest []*held
	for i, h := range g.rest {
		if taken.Claimed[i].ID == "" {
			rest = append(rest, h)
			continue
		}
		h.inst, h.src = taken.Claimed[i], warmpool.SourceHot
		g.gr.Hot++
	}
	g.rest = rest
	return g.gr.Hot, nil
}

// startStopped is the stopped stage: stopped instances are claimed for the jobs and started in
// batches of 50 (claim.Starter); a job whose instance would not start is handed back.
func (g *group) startStopped(ctx context.Context, _ int) (int, error) {
	if len(g.stopped) == 0 || ctx.Err() != nil {
		return 0, nil
	}
	sres, err := g.w.cfg.Starter.ClaimAndStart(ctx, g.stopped, runsOf(g.rest), g.now.Add(g.w.cfg.ClaimTimeout))
	if err != nil {
		g.errs = append(g.errs, err)
	}
	g.gr.StartCalls = sres.StartCalls
	byRun := map[string]store.Instance{}
	for _, in := range sres.Started {
		byRun[in.RunID] = in
	}
	var cold []*held
	for _, h := range g.rest {
		switch in, ok := byRun[h.msg.job.RunKey()]; {
		case ok:
			h.inst, h.src = in, warmpool.SourceStarted
			g.gr.Started++
		case slices.Contains(sres.StartFailed, h.msg.job.RunKey()):
			g.failed = append(g.failed, h)
		default:
			cold = append(cold, h)
		}
	}
	g.rest = cold
	return g.gr.Started, nil
}

// coldStart is the cold stage: one instance per job left, launched and recorded (package launch).
func (g *group) coldStart(ctx context.Context, _ int) (int, error) {
	if ctx.Err() != nil {
		return 0, nil
	}
	created, err := g.w.coldStart(ctx, g.spec, g.rest, g.now)
	if err != nil {
		g.errs = append(g.errs, err)
	}
	for i, h := range g.rest {
		if i < len(created) {
			h.inst, h.src = created[i], warmpool.SourceCreated
			g.gr.Created++
			continue
		}
		g.failed = append(g.failed, h)
	}
	g.rest = nil
	return g.gr.Created, nil
}

// register is the register stage: a runner bound to each job on its instance.
func (g *group) register(ctx context.Context, _ int) (int, error) {
	for _, h := range g.jobs {
		if h.inst.ID != "" {
			g.picked = append(g.picked, h)
		}
	}
	g.regFailed = g.w.register(ctx, g.picked, g.log)
	g.w.watchPins(ctx, g.picked, g.regFailed, g.log)
	return len(g.picked) - len(g.regFailed), nil
}

// settle hands back the jobs not served (a failed start, launch or registration, or the batch's
// context ended before they were given an instance) and reports the served ones.
func (g *group) settle(ctx context.Context) {
	retry := slices.Concat(g.failed, g.regFailed)
	if ctx.Err() != nil {
		for _, h := range g.jobs {
			if h.inst.ID == "" && !slices.Contains(retry, h) {
				retry = append(retry, h)
			}
		}
	}
	if len(retry) > 0 {
		g.w.release(ctx, retry, errors.New("not warmpool.JobResult now"), g.o)
	}
	g.o.lock(func() {
		for _, h := range g.picked {
			if slices.Contains(g.regFailed, h) {
				continue
			}
			g.o.del = append(g.o.del, h.msg)
			g.o.rep.Served = append(g.o.rep.Served, Served{JobID: h.msg.job.JobID, Pool: g.spec.Name, InstanceID: h.inst.ID, Source: h.src})
		}
	})
	if err := errors.Join(g.errs...); err != nil {
		g.gr.Err = err
		g.o.lock(func() { g.o.errors = append(g.o.errors, fmt.Errorf("pool %s: %w", g.spec.Name, err)) })
	}
}
