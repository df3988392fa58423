package scalesets_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/scaleset"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"
)

// crashingClient kills its replica at its at-th call: before the call when at is odd, after the
// call was applied (its answer lost) when at is even.
type crashingClient struct {
	scalesets.Client
	calls atomic.Int64
	at    int64
	die   func()
}

var errCrashed = errors.New("replica crashed")

func (c *crashingClient) hit(call func() error) error {
	n := c.calls.Add(1)
	switch {
	case n < c.at:
		return call()
	case n == c.at && c.at%2 == 1:
		go c.die()
		return errCrashed
	case n == c.at:
		_ = call()
		go c.die()
		return errCrashed
	}
	return errCrashed // dead: nothing goes through any more
}

func (c *crashingClient) CreateSession(ctx context.Context, id int64, owner string) (s scaleset.Session, err error) {
	err = c.hit(func() error { s, err = c.Client.CreateSession(ctx, id, owner); return err })
	return s, err
}

func (c *crashingClient) GetMessage(ctx context.Context, s scaleset.Session, last int64, capacity int) (m *scaleset.Message, err error) {
	err = c.hit(func() error { m, err = c.Client.GetMessage(ctx, s, last, capacity); return err })
	return m, err
}

func (c *crashingClient) DeleteMessage(ctx context.Context, s scaleset.Session, id int64) error {
	return c.hit(func() error { return c.Client.DeleteMessage(ctx, s, id) })
}

func (c *crashingClient) AcquireJobs(ctx context.Context, s scaleset.Session, id int64, ids []int64) (got []int64, err error) {
	err = c.hit(func() error { got, err = c.Client.AcquireJobs(ctx, s, id, ids); return err })
	return got, err
}

// crashingEnqueuer shares the client's counter: a crash may come between acquiring a job and
// queueing it.
type crashingEnqueuer struct {
	c    *crashingClient
	jobs scalesets.Enqueuer
}

func (q crashingEnqueuer) Enqueue(ctx context.Context, j warmpool.Job) (res string, err error) {
	err = q.c.hit(func() error { res, err = q.jobs.Enqueue(ctx, j); return err })
	return res, err
}

func (q crashingEnqueuer) Bind(ctx context.Context, j warmpool.Job, runner string, runnerID int64) (ok bool, err error) {
	err = q.c.hit(func() error { ok, err = q.jobs.Bind(ctx, j, runner, runnerID); return err })
	return ok, err
}

// TestCrashAtAnyCall: the replica holding the session dies at its k-th call to the Actions service
// or the job queue (before or after the call took effect). The other replica takes over, and every
// job queued before or after the crash is served exactly once.
func TestCrashAtAnyCall(t *testing.T) {
	t.Parallel()
	for i, at := range []int64{2, 3, 4, 5, 6, 7, 8, 9} {
		shape := allShapes[i%2] // each shape at odd and even kill points
		t.Run(fmt.Sprintf("%s/call_%d", shape, at), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shape)
			cc, b, ids := e.crashThenTakeOver(t, at, 800)
			for _, id := range ids {
				if st := e.ledger(t, id); st != warmpool.JobQueued {
					t.Errorf("job %d: ledger %q before serving, want queued", id, st)
				}
			}
			served := e.serveAll(t, e.worker(t, b.m), ids, nil)
			for _, id := range ids {
				if served[id] != 1 {
					t.Errorf("job %d served %d times, want once", id, served[id])
				}
			}
			if cc.calls.Load() < at {
				t.Logf("replica a made only %d calls: it did not crash", cc.calls.Load())
			}
		})
	}
}

// crashThenTakeOver starts replica a, which dies at its at-th call, queues four jobs (ids from
// firstJob) around the crash, starts replica b and waits until every job is in the ledger. It
// returns a's client, b and the jobs.
func (e *env) crashThenTakeOver(t *testing.T, at, firstJob int64) (*crashingClient, *replica, []int64) {
	t.Helper()
	var a *replica
	cc := &crashingClient{at: at, die: func() { a.kill() }}
	a = e.crashingReplica(t, "a", cc)
	eventually(t, "a session held by a", func() bool { return e.sessionOwner() == "a" || cc.calls.Load() >= at })
	var ids []int64
	for i := range 4 {
		ids = append(ids, e.gh.QueueScaleSetJob(org, "api", firstJob+int64(i), setName))
		time.Sleep(100 * time.Millisecond)
	}
	b := e.replica(t, "b")
	for _, id := range ids {
		eventually(t, fmt.Sprintf("job %d in the ledger", id), func() bool { return e.ledger(t, id) != "" })
	}
	return cc, b, ids
}

// crashingReplica is a replica whose scale set client and job queue go through cc.
func (e *env) crashingReplica(t *testing.T, holder string, cc *crashingClient) *replica {
	t.Helper()
	return e.start(t, holder, func(c *scalesets.Config) {
		c.Jobs = crashingEnqueuer{c: cc, jobs: e.jobs}
		c.Client = func(scope string) (scalesets.Client, error) {
			cc.Client = e.client(t, scope)
			return cc, nil
		}
	})
}
