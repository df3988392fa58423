// The poll loop of a held session, and what each message does.

package scalesets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/cache"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// poller holds one session: the message protocol. What each job does is its scaler's (scaler.go).
type poller struct {
	l         *listener
	c         Client
	scaler    Scaler
	ss        scaleset.ScaleSet
	sess      scaleset.Session
	last      int64
	refreshed time.Time
	// queued holds, by job key, the queue time of the jobs this session queued: JobStarted carries
	// none worth trusting (ARC found it empty), JobAvailable and JobAssigned do.
	queued map[string]time.Time
	// acquired holds the jobs this session acquired (GHES shape): their JobAssigned is the answer.
	acquired map[string]bool
	// cancelled holds the assignments cancelled for want of a runner, awaiting reassignment; saved
	// is what the table holds of them (cancelled.go).
	cancelled, saved map[string]cancelledJob
	shape            string // shapeAssigned or shapeAvailable, once a job message told
	stats            keptStats
}

func newPoller(l *listener, c Client, ss scaleset.ScaleSet, sess scaleset.Session) *poller {
	return &poller{
		l: l, c: c, scaler: l.m.scaler, ss: ss, sess: sess, refreshed: l.m.cfg.Now(),
		queued: map[string]time.Time{}, acquired: map[string]bool{}, cancelled: map[string]cancelledJob{}, saved: map[string]cancelledJob{},
	}
}

// run polls until ctx ends or the session or the service fails (the caller backs off and opens a
// session again).
func (p *poller) run(ctx context.Context) error {
	cfg := p.l.m.cfg
	if err := p.loadCancelled(ctx); err != nil {
		return err
	}
	if p.sess.Statistics != nil {
		p.keepStats(ctx, *p.sess.Statistics)
	}
	for ctx.Err() == nil {
		if cfg.Now().Sub(p.refreshed) > cfg.SessionRefresh {
			if err := p.refresh(ctx); err != nil {
				return err
			}
		}
		msg, err := p.c.GetMessage(ctx, p.sess, p.last, p.l.capacity(ctx, p.ss.ID))
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, scaleset.ErrQueueTokenExpired):
			if err := p.refresh(ctx); err != nil {
				return err
			}
			continue
		case errors.Is(err, scaleset.ErrSessionGone):
			p.l.m.metrics.inc(p.l.m.metrics.sessions, "sessions", p.l.set.Name, "lost")
			return fmt.Errorf("scale set session lost: %w", err)
		case err != nil:
			return err
		case msg == nil:
			if err := p.withdrawVanished(ctx); err != nil {
				return err
			}
			continue
		}
		if err := p.handle(ctx, msg); err != nil {
			return err
		}
		if err := p.withdrawVanished(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p *poller) refresh(ctx context.Context) error {
	s, err := p.c.RefreshSession(ctx, p.ss.ID, p.sess.SessionID)
	if err != nil {
		return fmt.Errorf("refreshing the scale set session: %w", err)
	}
	p.sess, p.refreshed = s, p.l.m.cfg.Now()
	p.l.m.metrics.inc(p.l.m.metrics.sessions, "sessions", p.l.set.Name, "refreshed")
	return nil
}

// handle acts on one message and deletes it once its effect is durable. An error leaves the
// message in the queue: it comes again after the back-off.
func (p *poller) handle(ctx context.Context, msg *scaleset.Message) error {
	m, name, log := p.l.m.metrics, p.l.set.Name, p.l.log.With("message", msg.ID)
	switch {
	case msg.ID == 0:
		// Without an id it cannot be deleted: count it and let the back-off pace the redelivery.
		m.inc(m.messages, "messages", name, "malformed")
		return fmt.Errorf("message without an id: %v", msg.Problems)
	case msg.ID <= p.last:
		m.inc(m.messages, "messages", name, "out_of_order")
		log.Warn("scale set message out of order: deleted unhandled", "last", p.last)
		return p.delete(ctx, msg.ID)
	}
	for _, prob := range msg.Problems {
		outcome := "malformed"
		if msg.Type != scaleset.MessageTypeJobMessages {
			outcome = "unknown"
		}
		m.inc(m.messages, "messages", name, outcome)
		log.Warn("scale set message partly unreadable: the rest is handled", "problem", prob)
	}
	if msg.Statistics != nil {
		m.assigned.WithLabelValues(name).Set(float64(msg.Statistics.TotalAssignedJobs))
		p.keepStats(ctx, *msg.Statistics)
	}
	if err := p.jobs(ctx, msg.Jobs, log); err != nil {
		return err
	}
	if len(msg.Problems) == 0 {
		m.inc(m.messages, "messages", name, "handled")
	}
	return p.delete(ctx, msg.ID)
}

// delete deletes a handled message. A failure is logged, not returned: the message comes again to
// a later holder, and handling it again changes nothing.
func (p *poller) delete(ctx context.Context, id int64) error {
	err := p.c.DeleteMessage(ctx, p.sess, id)
	if errors.Is(err, scaleset.ErrQueueTokenExpired) {
		if err = p.refresh(ctx); err == nil {
			err = p.c.DeleteMessage(ctx, p.sess, id)
		}
	}
	if err != nil {
		p.l.log.Warn("handled scale set message not deleted: a redelivery is handled once", "message", id, "err", err)
	}
	p.last = id
	return nil
}

// Service shapes, detected from the messages (never configured): github.com assigns jobs itself
// (JobAssigned of a job nobody here acquired), GHES versions that need acquisition offer them
// (JobAvailable).
const (
	shapeAssigned  = "assigned"
	shapeAvailable = "available"
)

type logger interface {
	Warn(string, ...any)
	Info(string, ...any)
}

// jobs queues the jobs of a batch for the pool worker: those assigned to the scale set (github.com)
// and those it acquired among the available ones (GHES), then the completions. A cancelled
// assignment keeps its runner for the job's reassignment; started jobs are measured.
func (p *poller) jobs(ctx context.Context, jobs []scaleset.JobMessage, log logger) error {
	m, name := p.l.m.metrics, p.l.set.Name
	var avail, assigned, completed []warmpool.Job
	for _, jm := range jobs {
		m.inc(m.jobs, "jobs", name, jm.Type)
		key := jm.Key()
		switch jm.Type {
		case scaleset.JobAvailable:
			p.detect(shapeAvailable, log)
			if j, ok := p.admit(jm, log); ok {
				avail = append(avail, j)
			}
		case scaleset.JobAssigned:
			delete(p.cancelled, key) // assigned again: the runner brought up for it stays for it
			if p.acquired[key] {
				continue // GHES: the answer to this session's acquisition, already queued
			}
			p.detect(shapeAssigned, log)
			if j, ok := p.admit(jm, log); ok {
				assigned = append(assigned, j)
			}
		case scaleset.JobStarted:
			if at, ok := p.queued[key]; ok && !at.IsZero() {
				m.start.WithLabelValues(name).Observe(p.l.m.cfg.Now().Sub(at).Seconds())
			}
			delete(p.queued, key)
			if err := p.bind(ctx, jm, log); err != nil {
				return err
			}
		case scaleset.JobCompleted:
			delete(p.queued, key)
			delete(p.acquired, key)
			j := p.job(warmpool.ActionCompleted, jm)
			if jm.Result == "canceled" && jm.RunnerID == 0 && jm.RunnerName == "" {
				// No runner took the assignment in time: github.com assigns the job again, up to 3
				// times (actions/scaleset README, "Job Reassignment"). Its runner is kept for that;
				// withdrawn only if no reassignment comes (withdrawVanished).
				p.cancelled[key] = cancelledJob{At: p.l.m.cfg.Now(), Job: j}
				continue
			}
			completed = append(completed, j)
		}
	}
	if err := p.acquire(ctx, avail, log); err != nil {
		return err
	}
	for _, j := range assigned {
		res, err := p.scaler.Assigned(ctx, j)
		if err != nil {
			return fmt.Errorf("queueing assigned job %d: %w", j.JobID, err)
		}
		log.Info("scale set job assigned", "job", j.JobID, "repository", j.Repository, "pool", j.Pool, "result", res)
	}
	if err := p.complete(ctx, completed, log); err != nil {
		return err
	}
	return p.saveCancelled(ctx)
}

// bind binds a started job to the runner that took it (JobStarted names it, by runnerId and
// runnerName: actions/scaleset types.go). On github.com that is any idle runner of the scale set,
// not necessarily the one brought up for the job: the ledger then swaps the two jobs' instances,
// each with its own runner id (pooljob.JobQueue.Bind). The id is GitHub's, not an instance's word.
func (p *poller) bind(ctx context.Context, jm scaleset.JobMessage, log logger) error {
	rebound, err := p.scaler.Started(ctx, p.job(warmpool.ActionQueued, jm), jm.RunnerName, jm.RunnerID)
	if err != nil {
		return fmt.Errorf("binding started job %d: %w", jm.Number(), err)
	}
	log.Info("scale set job started", "job", jm.Number(), "runner", jm.RunnerName, "runner_id", jm.RunnerID, "rebound", rebound)
	return nil
}

// admit renders a job message as a pool job and checks this deployment may serve it.
func (p *poller) admit(jm scaleset.JobMessage, log logger) (warmpool.Job, bool) {
	m, name := p.l.m.metrics, p.l.set.Name
	j := p.job(warmpool.ActionQueued, jm)
	if err := p.scaler.Admit(j); err != nil {
		m.inc(m.jobs, "jobs", name, "refused")
		log.Warn("scale set job refused: not served", "job", jm.Number(), "repository", j.Repository, "err", err)
		return j, false
	}
	p.queued[jm.Key()] = jm.QueueTime
	return j, true
}

// detect notes the service's shape; a change is logged.
func (p *poller) detect(shape string, log logger) {
	if p.shape != shape {
		log.Info("scale set service shape detected", "shape", shape, "was", p.shape)
		p.shape = shape
	}
}

// complete queues completions. A completion that cannot be read is skipped.
func (p *poller) complete(ctx context.Context, completed []warmpool.Job, log logger) error {
	m, name := p.l.m.metrics, p.l.set.Name
	for _, j := range completed {
		if err := j.Validate(); err != nil {
			m.inc(m.jobs, "jobs", name, "refused")
			log.Warn("scale set job completion unreadable: skipped", "job", j.JobID, "err", err)
			continue
		}
		if err := p.scaler.Completed(ctx, j); err != nil {
			return fmt.Errorf("queueing completion of job %d: %w", j.JobID, err)
		}
	}
	return nil
}

// withdrawVanished ends the jobs whose assignment was cancelled and not made again within
// CancelGrace (the service gave up, or the run was cancelled): the runner brought up for such a
// job serves no demand, and the completion ends its instance unless its runner took another job.
func (p *poller) withdrawVanished(ctx context.Context) error {
	now := p.l.m.cfg.Now()
	for key, c := range p.cancelled {
		if now.Sub(c.At) < p.l.m.cfg.CancelGrace {
			continue
		}
		if err := p.complete(ctx, []warmpool.Job{c.Job}, p.l.log); err != nil {
			return err
		}
		p.l.log.Info("scale set job's assignment cancelled and not made again: its runner withdrawn", "job", c.Job.JobID)
		delete(p.cancelled, key)
	}
	return p.saveCancelled(ctx)
}

// acquire asks for the available jobs and queues the ones acquired. Acquiring again is
// idempotent at the service, and queueing again is at the ledger, so a redelivered message serves
// nothing twice.
func (p *poller) acquire(ctx context.Context, avail []warmpool.Job, log logger) error {
	if len(avail) == 0 {
		return nil
	}
	ids := make([]int64, len(avail))
	for i, j := range avail {
		ids[i] = j.JobID
	}
	got, err := p.c.AcquireJobs(ctx, p.sess, p.ss.ID, ids)
	if errors.Is(err, scaleset.ErrQueueTokenExpired) {
		if err = p.refresh(ctx); err == nil {
			got, err = p.c.AcquireJobs(ctx, p.sess, p.ss.ID, ids)
		}
	}
	if err != nil {
		return fmt.Errorf("acquiring jobs: %w", err)
	}
	acquired := map[int64]bool{}
	for _, id := range got {
		acquired[id] = true
	}
	for _, j := range avail {
		if !acquired[j.JobID] {
			log.Info("scale set job not acquired: another listener or a cancellation took it", "job", j.JobID)
			continue
		}
		p.acquired[j.ScaleSetJob] = true
		res, err := p.scaler.Assigned(ctx, j)
		if err != nil {
			return fmt.Errorf("queueing job %d: %w", j.JobID, err)
		}
		log.Info("scale set job acquired", "job", j.JobID, "repository", j.Repository, "pool", j.Pool, "result", res)
	}
	return nil
}

// job renders a job message as a pool job of the scale set's warm pool.
func (p *poller) job(action string, jm scaleset.JobMessage) warmpool.Job {
	return warmpool.Job{
		Action: action, JobID: jm.Number(), ScaleSetJob: jm.Key(), RunID: jm.WorkflowRunID, RunAttempt: 1,
		Repository: jm.OwnerName + "/" + jm.RepositoryName, Labels: p.l.set.ScaleSetLabels(), Pool: p.l.set.WarmPool,
		RunnerName: jm.RunnerName, Conclusion: jm.Result, CreatedAt: jm.QueueTime,
		ScaleSet: p.l.set.Name, ScaleSetID: p.ss.ID, ScaleSetScope: p.l.set.Scope, Event: jm.EventName,
		Workflow: jm.Workflow(),
		// The message names no ref and no default branch (actions/scaleset types.go,
		// JobMessageBase): the ref is the one jobWorkflowRef was read at, for the repository's own
		// workflow; the default branch is looked up at the cache's presign (docs/cache.md).
		Ref: cache.RefOfWorkflowRef(jm.OwnerName+"/"+jm.RepositoryName, jm.JobWorkflowRef),
	}
}
