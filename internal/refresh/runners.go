// Phase 4: leftover GitHub runners. An agent removes its runner when its run is released, but an
// instance that dies (expired, terminated, lost) leaves its runner registered and offline, where it
// clutters the runner list and counts against GitHub's runner limits.
//
// Only runners this deployment can prove are its own and dead are deleted: named for an instance
// (RunnerNamePrefix + instance id, the agent's naming), offline, not busy, and whose instance is an
// orphan this pass terminated or has a record in this deployment's table that is terminating or terminated.
// A runner of an instance with no record at all is left alone: another deployment sharing the
// organisation may own it (and a live instance in created or claimed state may be between
// registering its runner and connecting it, which also shows offline).
//
// The phase is also the after-the-fact check of releases that spent no listing: a release pools an
// instance on its agent's signed word that the runner was removed (release.Releaser, for a class
// reused across repositories and a signal signed by the pinned key). A runner still registered,
// in any status, for an instance that was pooled well before the listing began breaks that word:
// it is deleted (whatever process holds its credentials can take no further job), reported in
// OfPooled and logged. The margin (PooledCheckMargin) covers clock skew between
// replicas and GitHub's listing catching up with a removal.

package refresh

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// RunnerNamePrefix starts the name of every runner an agent registers: runnerpool-<instance id>.
const RunnerNamePrefix = "runnerpool-"

// PooledCheckMargin is how long before a listing an instance must have been pooled for its still
// registered runner to count as one its release left behind.
const PooledCheckMargin = 30 * time.Second

type scopedRunner struct {
	scope    string
	runner   ghaccess.Runner
	instance string
	listed   time.Time // when the listing that showed it was asked for
}

// PooledScopesPerPass caps the scopes of pooled instances one pass lists on top of the configured
// scopes (a random choice each pass when there are more): at most that many listings a minute of
// GitHub's budget go to checking releases after the fact.
const PooledScopesPerPass = 50

func (r *Refresher) runners(ctx context.Context, p *pass, orphans map[string]bool) {
	if r.gh == nil {
		return // no GitHub: the phase does nothing
	}
	var candidates []scopedRunner
	for _, scope := range r.scopesToCheck(p) {
		listed := r.opts.Now()
		list, err := r.gh.ListRunners(ctx, scope)
		if err != nil {
			p.fail(PhaseRunners, fmt.Errorf("listing runners of %s: %w", scope, err))
			continue
		}
		for _, rn := range list {
			id, ok := InstanceOfRunner(rn.Name)
			if !ok {
				continue
			}
			p.update(func(rep *Report) { rep.Runners.Checked++ })
			candidates = append(candidates, scopedRunner{scope: scope, runner: rn, instance: id, listed: listed})
		}
	}
	forEach(r.opts.Concurrency, candidates, func(c scopedRunner) {
		dead := c.runner.Status == "offline" && !c.runner.Busy
		if orphans[c.instance] {
			if dead {
				r.deleteRunner(ctx, p, c, false)
			}
			return
		}
		if !dead && !pooledBefore(p.live[c.instance], c.listed) {
			return // a live runner of an instance not in the pool: its run's (no read per runner)
		}
		rec, err := r.st.Get(ctx, c.instance)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return // not provably ours
		case err != nil:
			p.fail(PhaseRunners, fmt.Errorf("reading the record of runner %s: %w", c.runner.Name, err))
		case rec.State == store.StateTerminating || rec.State == store.StateTerminated:
			if dead {
				r.deleteRunner(ctx, p, c, false)
			}
		case pooledBefore(rec, c.listed):
			r.log.WarnContext(ctx, "refresh: a pooled instance's runner is still registered; deleting it",
				"instance", c.instance, "scope", c.scope, "runner", c.runner.Name, "runner_id", c.runner.ID,
				"status", c.runner.Status, "busy", c.runner.Busy, "pooled_at", rec.PooledAt)
			r.deleteRunner(ctx, p, c, true)
		}
	})
}

// scopesToCheck is the configured scopes, then up to PooledScopesPerPass others that instances in
// the pass's listing were pooled under (past the margin), so that a release's scope is checked even
// when only its owner is configured.
func (r *Refresher) scopesToCheck(p *pass) []string {
	seen := map[string]bool{}
	for _, sc := range r.opts.Scopes {
		seen[strings.ToLower(sc)] = true
	}
	var pooled []string
	for _, rec := range p.live {
		sc := strings.ToLower(pool.GitHubScope(rec.Scope)) // the repository its runner registered in
		if sc == "" || seen[sc] || !pooledBefore(rec, p.now) {
			continue
		}
		seen[sc] = true
		pooled = append(pooled, sc)
	}
	rand.Shuffle(len(pooled), func(i, j int) { pooled[i], pooled[j] = pooled[j], pooled[i] })
	return append(slices.Clone(r.opts.Scopes), pooled[:min(len(pooled), PooledScopesPerPass)]...)
}

// pooledBefore reports whether rec is idle in the pool since more than PooledCheckMargin before t.
func pooledBefore(rec store.Instance, t time.Time) bool {
	return rec.State == store.StateIdle && rec.RunID == "" && !rec.PooledAt.IsZero() && rec.PooledAt.Add(PooledCheckMargin).Before(t)
}

// deleteRunner deletes the runner at GitHub and reports it (ofPooled: a pooled instance's).
func (r *Refresher) deleteRunner(ctx context.Context, p *pass, c scopedRunner, ofPooled bool) {
	if err := r.gh.DeleteRunner(ctx, c.scope, c.runner.ID); err != nil {
		p.fail(PhaseRunners, fmt.Errorf("deleting runner %s of %s: %w", c.runner.Name, c.scope, err))
		return
	}
	name := c.scope + "/" + c.runner.Name
	p.update(func(rep *Report) {
		if ofPooled {
			rep.Runners.OfPooled = append(rep.Runners.OfPooled, name)
			return
		}
		rep.Runners.Deleted = append(rep.Runners.Deleted, name)
	})
}

// InstanceOfRunner returns the instance id a runner is named for (RunnerNamePrefix + an EC2
// instance id), and false for any other name.
func InstanceOfRunner(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, RunnerNamePrefix)
	if !ok || !validInstanceID(id) {
		return "", false
	}
	return id, true
}

// validInstanceID reports whether id has EC2's instance id format: i- and 8 or 17 hex digits.
func validInstanceID(id string) bool {
	hex, ok := strings.CutPrefix(id, "i-")
	if !ok || (len(hex) != 8 && len(hex) != 17) {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
