// The claim loop over a list of candidates: a warm pool's hot instances for pool jobs, and stopped
// warm instances for every path (Starter). Each run takes the next candidate with a conditional
// claim (from -> claimed for the run, so two replicas never take the same one); a candidate
// another claimer took, or one no longer usable, is skipped for the next.
package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Claimant is the part of the store a claim of candidates uses; *store.Store satisfies it.
type Claimant interface {
	Get(ctx context.Context, id string) (store.Instance, error)
	Claim(ctx context.Context, id, runID string, threshold time.Time, from ...store.State) (store.Instance, error)
}

// takeConcurrency bounds the parallel claim writes of one Take.
const takeConcurrency = 16

// Taken is what Take did.
type Taken struct {
	// Claimed is aligned with the runs: the record claimed for each (zero: no candidate was left).
	Claimed []store.Instance
	// Lost counts candidates that were no longer in state from, expired, or taken by another claimer.
	Lost int
}

// Take gives each entry of runs (a run id; repeat it for several instances of one run) one of the
// candidates, trying them in order (the caller sorts them by preference) with a conditional claim
// from state from and threshold as the claim deadline. Every run's claim is tried; the error joins
// the store failures whose outcome could not be known, and never hides what was claimed.
func Take(ctx context.Context, st Claimant, cands []store.Instance, runs []string, threshold time.Time, from store.State) (Taken, error) {
	res := Taken{Claimed: make([]store.Instance, len(runs))}
	var (
		mu   sync.Mutex
		next int
		errs []error
	)
	pick := func() (store.Instance, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(cands) {
			return store.Instance{}, false
		}
		next++
		return cands[next-1], true
	}
	var g errgroup.Group
	g.SetLimit(takeConcurrency)
	for i, runID := range runs {
		g.Go(func() error {
			for ctx.Err() == nil {
				cand, ok := pick()
				if !ok {
					return nil
				}
				in, err := claimOne(ctx, st, cand.ID, runID, threshold, from)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case in.ID == "":
					res.Lost++
				default:
					res.Claimed[i] = in
				}
				mu.Unlock()
				if in.ID != "" {
					return nil
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	return res, errors.Join(errs...)
}

// claimOne claims one candidate. It returns the record when the instance is now the run's, a zero
// record when the candidate is gone (lost race, no longer in state from, expired), or an error
// when the outcome cannot be known.
func claimOne(ctx context.Context, st Claimant, id, runID string, threshold time.Time, from store.State) (store.Instance, error) {
	in, err := st.Claim(ctx, id, runID, threshold, from)
	switch {
	case err == nil:
		return in, nil
	case errors.Is(err, store.ErrNotFound):
		return store.Instance{}, nil
	}
	var ce *store.ConflictError
	if errors.As(err, &ce) && (ce.Current != store.StateClaimed || ce.RunID != runID) {
		return store.Instance{}, nil
	}
	// A retried write whose first attempt landed, or an unknown outcome: the record says which.
	dctx, cancel := detached(ctx)
	defer cancel()
	cur, gerr := st.Get(dctx, id)
	switch {
	case gerr == nil && cur.State == store.StateClaimed && cur.RunID == runID:
		return cur, nil
	case gerr == nil:
		return store.Instance{}, nil
	}
	return store.Instance{}, fmt.Errorf("claiming %s %s for %s: %w", from, id, runID, err)
}
