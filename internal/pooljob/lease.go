package pooljob

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// leases keeps a batch's jobs held while they are served. A job is held twice, by its message's
// visibility timeout and by its ledger entry's serving lease (judged by the entry's updated_at),
// both WorkerConfig.Lease long. Serving can take longer than that (stopped instances started one
// after another, EC2 throttling), and a lapsed lease makes another worker take the job over and
// discard what this one claimed for it. So every third of the lease, until the batch is settled,
// the messages' visibility is extended and the ledger entries this worker holds are renewed.
type leases struct {
	w    *Worker
	msgs []message
	mu   sync.Mutex
	runs map[string]int64 // ledger key -> the version this worker holds
	stop context.CancelFunc
	done chan struct{}
}

// keepLeases starts renewing the leases of msgs (and of the ledger entries added with hold).
func (w *Worker) keepLeases(ctx context.Context, msgs []message) *leases {
	lctx, cancel := context.WithCancel(ctx)
	l := &leases{w: w, msgs: msgs, runs: map[string]int64{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		if len(msgs) == 0 {
			return
		}
		t := time.NewTicker(max(w.cfg.Lease/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				l.renew(lctx)
			}
		}
	}()
	return l
}

// hold adds a ledger entry this worker serves now.
func (l *leases) hold(r store.Run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[r.Key] = r.Version
}

// end stops the renewals and waits for one in flight.
func (l *leases) end() {
	l.stop()
	<-l.done
}

func (l *leases) renew(ctx context.Context) {
	if err := l.w.cfg.Jobs.extend(ctx, l.msgs, l.w.cfg.Lease); err != nil && ctx.Err() == nil {
		// A receipt handle that expired (the message came back and was received again) cannot
		// be extended: the ledger still keeps another worker from serving the job twice.
		l.w.log.Warn("pool jobs: extending the messages' visibility failed", "messages", len(l.msgs), "err", err)
	}
	l.mu.Lock()
	runs := maps.Clone(l.runs)
	l.mu.Unlock()
	for key, version := range runs {
		err := l.w.cfg.Store.RenewRun(ctx, key, version)
		switch {
		case errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound):
			// The entry moved on (served, handed back, or taken over): nothing left to hold.
			l.mu.Lock()
			if l.runs[key] == version {
				delete(l.runs, key)
			}
			l.mu.Unlock()
		case err != nil && ctx.Err() == nil:
			l.w.log.Warn("pool jobs: renewing a ledger lease failed", "ledger", key, "err", err)
		}
	}
}
