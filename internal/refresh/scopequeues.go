// The pool check's scope queues (pool/scope.go): a runner class's pool keeps a queue per scope
// beside its class queue. The check lists them by name prefix and checks each like the class
// queue, counting against each the pooled records whose scope puts their message there; it moves
// a live message found in the wrong queue of the class to its own, and deletes a scope queue that
// stayed empty, with no pooled record expecting it, for EmptyScopeQueueAge (a release creates it
// again).

package refresh

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
)

// scopeQueues lists q's scope queues: those SQS lists by q's name prefix, and those the pass's
// pooled records expect (a queue that is missing must still have its records pooled again).
func (r *Refresher) scopeQueues(ctx context.Context, p *pass, q *pool.Queue) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(url string) {
		if q.IsScopeQueue(url) && !seen[url] {
			seen[url] = true
			out = append(out, url)
		}
	}
	listed, err := pool.ListScopeQueues(ctx, r.opts.SQS, q.URL())
	for _, url := range listed {
		add(url)
	}
	for url := range p.pooled {
		add(url)
	}
	slices.Sort(out)
	return out, err
}

// emptyFor is how long the scope queue at url has been seen empty with no pooled record expecting
// it (negative: it is not, or it is the class queue).
func (r *Refresher) emptyFor(p *pass, q *pool.Queue, url string, counts queueCounts) time.Duration {
	if !q.IsScopeQueue(url) {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if counts.total() > 0 || len(r.pooledIn(p, url)) > 0 {
		delete(r.emptySince, url)
		return -1
	}
	if r.emptySince == nil {
		r.emptySince = map[string]time.Time{}
	}
	since, ok := r.emptySince[url]
	if !ok {
		r.emptySince[url], since = p.now, p.now
	}
	return p.now.Sub(since)
}

// deleteQueue deletes a scope queue that stayed empty. A release racing the deletion loses its
// message with the queue; the record stays pooled, the second look finds it, and the next pass
// pools it again (into a new queue).
func (r *Refresher) deleteQueue(ctx context.Context, p *pass, q *pool.Queue, url string) {
	if _, err := r.opts.SQS.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil && !pool.IsQueueMissing(err) {
		p.fail(PhasePool, fmt.Errorf("deleting empty scope queue %s: %w", url, err))
		return
	}
	q.Forget(url)
	r.mu.Lock()
	delete(r.emptySince, url)
	r.mu.Unlock()
	r.log.InfoContext(ctx, "refresh: empty scope queue deleted", "queue", url, "empty_for", r.opts.EmptyScopeQueueAge)
	p.update(func(rep *Report) { rep.Pool.DeletedQueues = append(rep.Pool.DeletedQueues, url) })
}

// move puts a live message found at url into the queue of its scope; false leaves it where it is.
func (r *Refresher) move(ctx context.Context, q *pool.Queue, url string, m pool.Message) bool {
	if err := q.PutInScope(ctx, m); err != nil {
		r.log.WarnContext(ctx, "refresh: pool message not moved to its scope queue; left where it is", "queue", url, "instance", m.InstanceID, "error", err)
		return false
	}
	r.log.InfoContext(ctx, "refresh: pool message moved to its scope queue", "from", url, "to", q.URLFor(m.Scope), "instance", m.InstanceID)
	return true
}
