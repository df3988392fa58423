// Phase 4: leftover GitHub runners. An agent removes its runner when its run is released, but an
// instance that dies (expired, terminated, lost) leaves its runner registered and offline, where it
// clutters the runner list and counts against GitHub's runner limits.
//
// Only runners this deployment can prove are its own and dead are deleted: named for an instance
// (RunnerNamePrefix + instance id, the agent's naming), offline, not busy, and whose instance is an
// orphan of this pass or has a record in this deployment's table that is terminating or terminated.
// A runner of an instance with no record at all is left alone: another deployment sharing the
// organisation may own it (and a live instance in created or claimed state may be between
// registering its runner and connecting it, which also shows offline).

package refresh

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// RunnerNamePrefix starts the name of every runner an agent registers: runnerpool-<instance id>.
const RunnerNamePrefix = "runnerpool-"

type scopedRunner struct {
	scope    string
	runner   ghaccess.Runner
	instance string
}

func (r *Refresher) runners(ctx context.Context, p *pass, orphans map[string]bool) {
	var candidates []scopedRunner
	for _, scope := range r.opts.Scopes {
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
			if rn.Status == "offline" && !rn.Busy {
				candidates = append(candidates, scopedRunner{scope: scope, runner: rn, instance: id})
			}
		}
	}
	forEach(r.opts.Concurrency, candidates, func(c scopedRunner) {
		if !orphans[c.instance] {
			rec, err := r.st.Get(ctx, c.instance)
			switch {
			case errors.Is(err, store.ErrNotFound):
				return // not provably ours
			case err != nil:
				p.fail(PhaseRunners, fmt.Errorf("reading the record of runner %s: %w", c.runner.Name, err))
				return
			case rec.State != store.StateTerminating && rec.State != store.StateTerminated:
				return
			}
		}
		if err := r.gh.DeleteRunner(ctx, c.scope, c.runner.ID); err != nil {
			p.fail(PhaseRunners, fmt.Errorf("deleting runner %s of %s: %w", c.runner.Name, c.scope, err))
			return
		}
		p.update(func(rep *Report) { rep.Runners.Deleted = append(rep.Runners.Deleted, c.scope+"/"+c.runner.Name) })
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
