// The quota phase: does the per-repository limit hold with two replicas deciding at once? Two
// replicas limited to 10 runners per repository (their own, started for the phase) take 40
// concurrent provisions of one runner from one repository, half each. The figure is the most
// runners the repository's runs held at once, sampled from the table while the provisions run and
// counted once they answered (nothing is released before): quota_enforced_under_race, goal <= 10.
package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/client"
)

const (
	quotaLimit      = 10
	quotaProvisions = 40
)

func phaseQuota(ctx context.Context, h *harness, res *Result) error {
	saved := h.env
	h.env = maps.Clone(saved)
	if h.env == nil {
		h.env = map[string]string{}
	}
	h.env["RUNNERPOOL_MAX_RUNNERS_PER_REPOSITORY"] = fmt.Sprint(quotaLimit)
	urls := make([]string, 2)
	for i, id := range []string{"bench-quota-a", "bench-quota-b"} {
		svc, stop, err := h.startReplica(ctx, id, false)
		if err != nil {
			h.env = saved
			return err
		}
		defer stop()
		urls[i] = svc.URL()
	}
	h.env = saved

	wfs, err := h.quotaWorkflows(urls)
	if err != nil {
		return err
	}
	runs := map[string]bool{}
	for _, wf := range wfs {
		runs[apiv1.RunKey(repositoryID, wf.runID, 1)] = true
	}
	stop := make(chan struct{})
	peak := heldPeak(h.sb.Store, runs, stop)
	served, refused, errs := quotaRace(ctx, wfs)
	close(stop)
	most := <-peak
	held, err := heldNow(ctx, h.sb.Store, runs)
	if err != nil {
		errs = append(errs, err)
	}
	most = max(most, held)
	h.say("quota: %d provisions of 1 against a limit of %d over 2 replicas: %d served, %d refused (429), at most %d held at once",
		quotaProvisions, quotaLimit, len(served), refused, most)
	res.add(Figure{Name: "quota_enforced_under_race", Value: float64(most), Unit: "runners",
		How: fmt.Sprintf("2 replicas, %d concurrent provisions of 1 runner from one repository limited to %d (--max-runners-per-repository); the most runners its runs held at once (table sampled every 20 ms during the race, and after it); goal <= %d", quotaProvisions, quotaLimit, quotaLimit)})
	if len(served) != quotaLimit {
		res.note("quota: %d provisions served, want %d (the limit must be reached, not undershot)", len(served), quotaLimit)
	}
	if err := h.releaseAll(ctx, served); err != nil {
		errs = append(errs, err)
	}
	if most > quotaLimit {
		errs = append(errs, fmt.Errorf("the repository held %d runners at once, over its limit of %d", most, quotaLimit))
	}
	return errors.Join(errs...)
}

// quotaWorkflows are the race's workflow runs, alternating replicas; their clients do not retry a
// 429.
func (h *harness) quotaWorkflows(urls []string) ([]*workflow, error) {
	wfs := make([]*workflow, quotaProvisions)
	for i := range wfs {
		wf, err := h.newWorkflowAt(urls[i%2])
		if err != nil {
			return nil, err
		}
		wf.c, err = client.New(urls[i%2], client.StaticToken(wf.token), client.Options{HTTPClient: h.http, Retry: client.Retry{Attempts: 1}})
		if err != nil {
			return nil, err
		}
		wfs[i] = wf
	}
	return wfs, nil
}

// quotaRace runs the provisions at once.
func quotaRace(ctx context.Context, wfs []*workflow) (served []*workflow, refused int, errs []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, wf := range wfs {
		wg.Go(func() {
			_, _, err := wf.provision(ctx, 1)
			var ae *client.APIError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				served = append(served, wf)
			case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests && ae.Body.Code == apiv1.CodeQuotaExceeded:
				refused++
			default:
				errs = append(errs, fmt.Errorf("provision of run %s: %w", wf.runID, err))
			}
		})
	}
	wg.Wait()
	return served, refused, errs
}

// heldPeak samples, until stop is closed, how many live instances serve one of the runs, and
// sends the most seen.
func heldPeak(st *store.Store, runs map[string]bool, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		peak := 0
		for {
			if n, err := heldNow(context.Background(), st, runs); err == nil {
				peak = max(peak, n)
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return out
}

// heldNow counts the live instances serving one of the runs, by id: Live lists state by state, and
// an instance that moved in between is listed twice.
func heldNow(ctx context.Context, st *store.Store, runs map[string]bool) (int, error) {
	recs, err := st.Live(ctx)
	if err != nil {
		return 0, err
	}
	held := map[string]bool{}
	for _, r := range recs {
		if runs[r.RunID] {
			held[r.ID] = true
		}
	}
	return len(held), nil
}
