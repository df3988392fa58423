// This file holds the check that instances' runners are gone, shared by the instances one
// operation works on at the same time (a release, a rollback's hand-backs): one runner listing per
// scope, taken once every instance of the batch has its agent's signal (or dropped out), instead of
// one listing per instance.

package ghaccess

import (
	"context"
	"sync"
	"time"
)

// RunnerLister lists a scope's runners; *Client satisfies it.
type RunnerLister interface {
	ListRunners(ctx context.Context, scope string) ([]Runner, error)
}

// ListingBatch gathers the deregistration checks of the instances an operation works on at the
// same time. Each participant either asks (Check) or leaves; when every active participant has done
// one or the other, the scopes asked for are listed once each and every asker gets its answer. A
// participant that starts later (the operation's concurrency limit) joins the next batch.
type ListingBatch struct {
	gh     RunnerLister
	mu     sync.Mutex
	active int                             // participants started that have neither asked nor left
	asks   map[string]*scopeListing        // the current batch, by scope
	wait   []chan map[string]*scopeListing // its askers
}

type scopeListing struct {
	runners []Runner
	err     error
}

// Participant is one instance's part in a batch; Leave is idempotent and a no-op after Check.
type Participant struct {
	b    *ListingBatch
	once sync.Once
}

// NewListingBatch starts an empty batch over gh.
func NewListingBatch(gh RunnerLister) *ListingBatch {
	return &ListingBatch{gh: gh, asks: map[string]*scopeListing{}}
}

// Join starts a participant.
func (b *ListingBatch) Join() *Participant {
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
	return &Participant{b: b}
}

// Check returns the runners of scope as listed after every active participant asked or left.
func (p *Participant) Check(ctx context.Context, scope string) ([]Runner, error) {
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
		// Asked twice: list alone (not expected; an instance asks once).
		return p.b.gh.ListRunners(ctx, scope)
	}
	select {
	case got := <-ch:
		l := got[scope]
		return l.runners, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Leave withdraws a participant that will not ask (a nil participant: nothing to withdraw).
func (p *Participant) Leave() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.b.mu.Lock()
		p.b.arrivedLocked()
		p.b.mu.Unlock()
	})
}

// arrivedLocked counts a participant done; the last one of a batch starts its listings.
func (b *ListingBatch) arrivedLocked() {
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

// shared is a batch carried by a context, with the participants of the instances that start
// together, joined before any of them can ask.
type shared struct {
	b     *ListingBatch
	first chan *Participant
}

type sharedKey struct{}
type participantKey struct{}

// ShareListings returns ctx carrying a new batch over gh for the instances an operation works on,
// with first participants joined up front: the instances that start together (at most the
// operation's concurrency). Each of them must call Participate with it, first thing, and Leave.
func ShareListings(ctx context.Context, gh RunnerLister, first int) context.Context {
	s := &shared{b: NewListingBatch(gh), first: make(chan *Participant, max(first, 0))}
	for range cap(s.first) {
		s.first <- s.b.Join()
	}
	return context.WithValue(ctx, sharedKey{}, s)
}

// Participate takes a participant of ctx's batch (one joined up front, else a new one) and returns
// a context carrying it, for ListRunnersShared; nil and ctx unchanged when ctx carries no batch, or
// carries a participant already.
func Participate(ctx context.Context) (context.Context, *Participant) {
	s, _ := ctx.Value(sharedKey{}).(*shared)
	if s == nil || ctx.Value(participantKey{}) != nil {
		return ctx, nil
	}
	var p *Participant
	select {
	case p = <-s.first:
	default:
		p = s.b.Join()
	}
	return context.WithValue(ctx, participantKey{}, p), p
}

// ListRunnersShared lists scope's runners through the participant ctx carries (Participate), or
// with gh alone when it carries none.
func ListRunnersShared(ctx context.Context, gh RunnerLister, scope string) ([]Runner, error) {
	if p, _ := ctx.Value(participantKey{}).(*Participant); p != nil {
		return p.Check(ctx, scope)
	}
	return gh.ListRunners(ctx, scope)
}

// LeaveShared withdraws the participant ctx carries (Participate), if any: its instance will not
// ask, so the others' listing need not wait for it. Idempotent.
func LeaveShared(ctx context.Context) {
	if p, _ := ctx.Value(participantKey{}).(*Participant); p != nil {
		p.Leave()
	}
}
