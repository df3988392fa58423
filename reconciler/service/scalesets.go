// Scale sets in the reconciler (with warm pools): every replica runs the scale set listeners
// (reconciler/scalesets); one of them holds each configured scale set's message session, under a
// lease in the state table, and queues its jobs for the pool worker, which mints their runners from
// the scale set. On shutdown the listeners delete their sessions and release their leases, so another
// replica takes over at once; an abandoned replica (Abandon) leaves both, as a crash would.
package service

import (
	"cmp"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/scalesets"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// scaleSetListeners is the composition root's constructor of this replica's scale set listeners
// (controlplane.Warm.ScaleSets); the Manager it makes is kept for startScaleSets.
func (s *Service) scaleSetListeners(cfg config.Config, gh *ghaccess.Client) func(*pooljob.JobQueue) (pooljob.ScaleSetRunners, error) {
	repo := declared.NewRepository(s.store)
	// The long poll lasts about 50 s: the client's timeout must outlast it.
	hc := &http.Client{Timeout: 90 * time.Second, Transport: s.metrics.GitHubTransport(s.o.HTTPClient.Transport)}
	var mu sync.Mutex
	var broken []string
	return scalesets.Listeners(scalesets.Config{
		Store: s.store, Holder: cfg.ReplicaID, Registerer: s.metrics.Registry(), Now: s.o.Now,
		Logger: s.log.With("component", "scale_sets"),
		GitHub: gh, APIURL: cmp.Or(cfg.GitHubAPIURL, scalesets.DefaultAPIURL), HTTPClient: hc,
		ScaleSets: func(ctx context.Context) ([]declared.ScaleSet, error) {
			sets, problems, err := repo.ScaleSets(ctx)
			names := make([]string, 0, len(problems))
			for _, p := range problems {
				s.log.Warn("scale set configuration not usable: left out", "scale_set", p.Name, "err", p.Err)
				names = append(names, p.Name)
			}
			mu.Lock()
			broken = names
			mu.Unlock()
			return sets, err
		},
		Broken: func() []string {
			mu.Lock()
			defer mu.Unlock()
			return broken
		},
		Room: func(ctx context.Context, warmPool string) (int, bool, error) {
			wp, _, err := repo.GetWarmPool(ctx, warmPool)
			if err != nil {
				return 0, false, err
			}
			return s.quotas.caps.Room(ctx, wp.RunnerClass)
		},
		// s.auth is built after the warm pools; read it when a job comes.
		Allowed: func(repository string) bool { return s.auth.AllowsRepository(repository) },
	}, func(m *scalesets.Manager) { s.scaleSets = m })
}

// startScaleSets runs the listeners until stopScaleSets.
func (s *Service) startScaleSets() {
	if s.scaleSets == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.scaleSetsStop, s.scaleSetsDone = cancel, make(chan struct{})
	go func() {
		defer close(s.scaleSetsDone)
		s.scaleSets.Run(ctx)
	}()
}

// stopScaleSets stops the listeners: gracefully (sessions deleted, leases released), or as a crash
// when the replica was abandoned.
func (s *Service) stopScaleSets(abandoned bool) {
	if s.scaleSetsStop == nil {
		return
	}
	if abandoned {
		s.scaleSets.Kill()
	}
	s.scaleSetsStop()
	select {
	case <-s.scaleSetsDone:
	case <-time.After(30 * time.Second):
		s.log.Warn("scale set listeners did not stop within 30s")
	}
}
