// Phases 1 and 2: records past their threshold are marked terminating, then terminated in EC2 and
// marked terminated.
//
// The two steps make termination crash-safe: a record is marked before TerminateInstances is
// called, so a pass that dies in between leaves the record terminating, and the next pass (which
// retries every terminating record) finishes the job. The mark is conditional on the state read and
// on the threshold still having passed, so a record renewed since the read (a claim, a release, a
// registration) loses nothing.

package refresh

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
)

func (r *Refresher) expiry(ctx context.Context, p *pass) {
	expired, terminating := r.listExpiry(ctx, p)
	var toMark []store.Instance
	for _, rec := range expired {
		if rec.State == store.StateTerminating {
			terminating = append(terminating, rec)
		} else {
			toMark = append(toMark, rec)
		}
	}
	p.update(func(rep *Report) { rep.Expiry.Expired = len(toMark) })
	marked := r.markExpired(ctx, p, toMark)
	ids, created := toTerminate(p, marked, toMark, terminating)
	if len(ids) == 0 {
		return
	}
	r.terminateMarked(ctx, p, ids, created)
}

// listExpiry reads the expired and the terminating records (brief: ids and states are all this
// phase reads), both listings at once.
func (r *Refresher) listExpiry(ctx context.Context, p *pass) (expired, terminating []store.Instance) {
	var expErr, termErr error
	var wg sync.WaitGroup
	wg.Go(func() { expired, expErr = r.st.ExpiredBrief(ctx, p.now) })
	wg.Go(func() { terminating, termErr = r.st.ByStateBrief(ctx, store.StateTerminating, time.Time{}) })
	wg.Wait()
	if expErr != nil {
		p.fail(PhaseExpiry, fmt.Errorf("listing expired records: %w", expErr))
	}
	if termErr != nil {
		p.fail(PhaseExpiry, fmt.Errorf("listing terminating records: %w", termErr))
	}
	return expired, terminating
}

// markExpired marks the expired records terminating, each on the state it was read in, and returns
// the ids it marked.
func (r *Refresher) markExpired(ctx context.Context, p *pass, toMark []store.Instance) map[string]bool {
	marked := map[string]bool{}
	forEach(r.opts.Concurrency, toMark, func(rec store.Instance) {
		_, err := r.st.Transition(ctx, rec.ID, store.Change{
			From: []store.State{rec.State}, To: store.StateTerminating, ExpiredAt: p.now, Reason: "threshold passed",
		})
		switch {
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// Renewed, moved on or gone since the read: not ours to terminate.
			r.log.DebugContext(ctx, "refresh: record changed since read, left alone", "instance", rec.ID, "error", err)
			p.update(func(rep *Report) { rep.Expiry.Renewed++ })
		case err != nil:
			p.fail(PhaseExpiry, fmt.Errorf("marking %s terminating: %w", rec.ID, err))
		default:
			p.update(func(rep *Report) { rep.Expiry.Marked++; marked[rec.ID] = true })
		}
	})
	return marked
}

// toTerminate returns the ids to terminate in EC2, sorted (those just marked and every record
// already terminating, retried), and when each record was written, just after its launch.
func toTerminate(p *pass, marked map[string]bool, toMark, terminating []store.Instance) ([]string, map[string]time.Time) {
	ids := make([]string, 0, len(marked)+len(terminating))
	for id := range marked {
		ids = append(ids, id)
	}
	seen := maps.Clone(marked)
	created := map[string]time.Time{}
	for _, rec := range toMark {
		created[rec.ID] = rec.CreatedAt
	}
	for _, rec := range terminating {
		created[rec.ID] = rec.CreatedAt
		if !seen[rec.ID] {
			seen[rec.ID] = true
			ids = append(ids, rec.ID)
			p.update(func(rep *Report) { rep.Expiry.Retried++ })
		}
	}
	slices.Sort(ids)
	return ids, created
}

// terminateMarked terminates ids in EC2 and marks terminated the records of those EC2 accepted or
// proved gone.
func (r *Refresher) terminateMarked(ctx context.Context, p *pass, ids []string, created map[string]time.Time) {
	res := terminate.Batches(ctx, r.ec2, ids, r.opts.BatchSize)
	for _, err := range res.Errs {
		p.fail(PhaseExpiry, err)
	}
	// An instance EC2 answers unknown within the consistency window of its launch may be running:
	// its record stays terminating, and the next pass asks again.
	gone, unseen := res.Proven(func(id string) time.Time { return created[id] }, p.now)
	p.update(func(rep *Report) {
		rep.Expiry.TerminateCalls += res.Calls
		rep.Expiry.AlreadyGone = append(rep.Expiry.AlreadyGone, gone...)
		rep.Expiry.Unseen = append(rep.Expiry.Unseen, unseen...)
	})
	// The records keep the reason they were marked with (threshold passed, or another component's).
	forEach(r.opts.Concurrency, append(res.Done, gone...), func(id string) {
		_, err := r.st.Transition(ctx, id, store.Change{From: []store.State{store.StateTerminating}, To: store.StateTerminated})
		switch {
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// Another component finished it first.
		case err != nil:
			p.fail(PhaseExpiry, fmt.Errorf("marking %s terminated (terminated in EC2; retried next pass): %w", id, err))
		default:
			p.update(func(rep *Report) { rep.Expiry.Terminated = append(rep.Expiry.Terminated, id) })
		}
	})
}
