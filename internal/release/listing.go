// This file holds the release's GitHub check that an instance's runner is gone, shared by the
// instances of one release: one runner listing per scope, taken once every instance released
// alongside has its agent's signal (or dropped out), instead of one listing per instance.

package release

import (
	"context"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
)

// listingBatch gathers the deregistration checks of the instances a release works on at the same
// time. Each participant either asks (check) or leaves; when every active participant has done one
// or the other, the scopes asked for are listed once each and every asker gets its answer. A
// participant that starts later (the release's concurrency limit) joins the next batch.
type listingBatch struct {
	gh     GitHub
	mu     sync.Mutex
	active int                             // participants started that have neither asked nor left
	asks   map[string]*scopeListing        // the current batch, by scope
	wait   []chan map[string]*scopeListing // its askers
}

type scopeListing struct {
	runners []ghaccess.Runner
	err     error
}

// participant is one instance's part in the batch; leave is idempotent and a no-op after check.
type participant struct {
	b    *listingBatch
	once sync.Once
}

func newListingBatch(gh GitHub) *listingBatch {
	return &listingBatch{gh: gh, asks: map[string]*scopeListing{}}
}

// join starts a participant.
func (b *listingBatch) join() *participant {
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
	return &participant{b: b}
}

// check returns the runners of scope as listed after every active participant asked or left.
func (p *participant) check(ctx context.Context, scope string) ([]ghaccess.Runner, error) {
	ch := make(chan map[string]*scopeListing, 1)
	done := false
	p.once.Do(func() {
		done = true
		b := p.b
		b.mu.Lock()
		if b.asks[scope] == nil {
			b.asks[scope] = &scopeListing{}
		}
		b.wait = append(b.wait, ch)
		b.arrivedLocked()
		b.mu.Unlock()
	})
	if !done {
		// Asked twice: list alone (not expected; releaseOne asks once).
		runners, err := p.b.gh.ListRunners(ctx, scope)
		return runners, err
	}
	select {
	case got := <-ch:
		l := got[scope]
		return l.runners, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// leave withdraws a participant that will not ask.
func (p *participant) leave() {
	p.once.Do(func() {
		p.b.mu.Lock()
		p.b.arrivedLocked()
		p.b.mu.Unlock()
	})
}

// arrivedLocked counts a participant done; the last one of a batch starts its listings.
func (b *listingBatch) arrivedLocked() {
	b.active--
	if b.active > 0 || len(b.wait) == 0 {
		return
	}
	asks, wait := b.asks, b.wait
	b.asks, b.wait = map[string]*scopeListing{}, nil
	go func() {
		// Its own deadline: the askers wait within theirs.
		ctx, cancel := context.WithTimeout(context.Background(), listingTimeout)
		defer cancel()
		for scope, l := range asks {
			l.runners, l.err = b.gh.ListRunners(ctx, scope)
		}
		for _, ch := range wait {
			ch <- asks
		}
	}()
}

// listingTimeout bounds one batch's listings.
const listingTimeout = 2 * time.Minute

type participantKey struct{}

// withParticipant carries an instance's participant to its deregistration check.
func withParticipant(ctx context.Context, p *participant) context.Context {
	return context.WithValue(ctx, participantKey{}, p)
}

func participantOf(ctx context.Context) *participant {
	p, _ := ctx.Value(participantKey{}).(*participant)
	return p
}
