// The many repos phase: one deployment serving an organisation. ManyRepos repositories share one
// runner class (whose pool keeps a queue per repository beside the class queue, pool/scope.go);
// each has ManyReposIdle idle runners narrowed to it by its own releases. Two bursts, all
// repositories at once:
//
//   - served: ManyReposIdle workflows of one runner per repository (demand equals supply): the
//     calls per reused runner and the provisions' p99, against the single-repository figures;
//   - oversubscribed: ManyReposWorkflows workflows per repository: the reuse ratio, reused ÷
//     min(demand, supply). A provision must reuse what its own repository left, and nothing
//     of the other repositories' is in its way;
//   - the same-size baseline: one repository holding as many idle runners as all of them, and a
//     burst of as many provisions of one, in the same run: what a burst of that size costs this
//     machine (its agents, emulators and replica share two cores) when nothing is shared, so that
//     the served burst's p99 can be read against it as well as against the 30-provision burst.
package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
)

const reuseManyRepos = "reuse-many-repos"

// soloRepo is the same-size baseline's repository.
const soloRepo, soloRepoID = "acme/solo", "7999"

func manyRepo(i int) (repo, id string) {
	return fmt.Sprintf("acme/repo-%02d", i), strconv.Itoa(7000 + i)
}

// burstOf runs per repository n provisions of one runner, all at once, and measures them as burst
// does, with the reconciler's calls while they ran.
func (h *harness) burstOf(ctx context.Context, repos, n int) (burstOutcome, map[string]int, error) {
	return h.burstIn(ctx, repos, n, manyRepo, "")
}

// burstIn is burstOf with the repositories named by repoOf, its CPU profile kept as profileName
// (with -profile; empty: not kept).
func (h *harness) burstIn(ctx context.Context, repos, n int, repoOf func(int) (string, string), profileName string) (burstOutcome, map[string]int, error) {
	var reqs []apiv1.ProvisionRequest
	var wfs []*workflow
	for r := range repos {
		repo, id := repoOf(r)
		for range n {
			wf, err := h.newWorkflowOf(h.svc.URL(), repo, id)
			if err != nil {
				return burstOutcome{}, nil, err
			}
			wfs = append(wfs, wf)
			reqs = append(reqs, reuseRequest(reuseManyRepos, "small", 1))
		}
	}
	before := h.calls()
	out, err := h.burstWith(ctx, wfs, reqs, profileName)
	return out, diff(before, out.callsAfter), err
}

func diff(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func phaseManyRepos(ctx context.Context, h *harness, res *Result) (err error) {
	// Up to twice repos × idle agents, idle: the cache phase after it would run beside them.
	defer func() {
		err = errors.Join(err, h.retireIdle(context.WithoutCancel(ctx), "the many repos phase is over", reuseManyRepos))
	}()
	repos, idle, wf := h.o.ManyRepos, h.o.ManyReposIdle, h.o.ManyReposWorkflows
	for r := range repos {
		repo, id := manyRepo(r)
		if err := h.fillOf(ctx, repo, id, reuseManyRepos, "small", idle); err != nil {
			return err
		}
	}
	h.say("  %d repositories with %d idle runners each in one class", repos, idle)
	served, byOp, err := h.burstIn(ctx, repos, idle, manyRepo, "manyrepos")
	if err != nil {
		res.note("many repos, served burst: %v", err)
	}
	res.Calls["many repos (reused)"], res.Runners["many repos (reused)"] = byOp, served.reused
	calls := total(byOp)
	lat := slices.Sorted(slices.Values(served.lat))
	res.add(Figure{Name: "api_calls_per_reused_runner_many_repos", Value: float64(calls) / float64(max(served.reused, 1)), Unit: "calls",
		How: fmt.Sprintf("%d repositories sharing one runner class, %d idle runners each; %d concurrent provisions of 1 per repository (demand = supply): the reconciler's AWS and GitHub requests while they ran, per runner reused (%d reused; goal ≤ 1.2× api_calls_per_reused_runner)", repos, idle, idle, served.reused)})
	res.add(Figure{Name: "provision_p99_ms_many_repos", Value: Percentile(lat, 99), Unit: "ms",
		How: "the same burst's provisions as the workflows see them, 99th percentile (goal within 2× of homogeneous_burst_p99_ms)"})
	res.add(Figure{Name: "burst_cpu_ms_per_runner_many_repos", Value: ms(served.cpu.total()) / float64(max(served.reused, 1)), Unit: "ms",
		How: "the many repos served burst: " + served.cpu.describe(served.reused, served.wall)})
	if err := h.fillOf(ctx, soloRepo, soloRepoID, reuseManyRepos, "small", repos*idle); err != nil {
		return err
	}
	solo, _, err := h.burstIn(ctx, 1, repos*idle, func(int) (string, string) { return soloRepo, soloRepoID }, "")
	if err != nil {
		res.note("many repos, same-size baseline: %v", err)
	}
	soloLat := slices.Sorted(slices.Values(solo.lat))
	res.add(Figure{Name: "provision_p99_ms_same_size_one_repo", Value: Percentile(soloLat, 99), Unit: "ms",
		How: fmt.Sprintf("the baseline of provision_p99_ms_many_repos: one repository with %d idle runners in the same class, %d concurrent provisions of 1 (%d reused), same run: a burst of that size on this machine with no repository sharing anything; provision_p99_ms_many_repos is %.2fx it", repos*idle, repos*idle, solo.reused, Percentile(lat, 99)/max(Percentile(soloLat, 99), 1))})
	over, _, err := h.burstOf(ctx, repos, wf)
	if err != nil {
		res.note("many repos, oversubscribed burst: %v", err)
	}
	supply, demand := repos*idle, repos*wf
	res.add(Figure{Name: "reuse_ratio_many_repos", Value: float64(over.reused) / float64(min(supply, demand)), Unit: "",
		How: fmt.Sprintf("%d repositories, %d idle runners each in one class, %d concurrent workflows of 1 runner per repository: runners reused ÷ min(demand %d, supply %d) (%d reused; goal ≥ 0.95)", repos, idle, wf, demand, supply, over.reused)})
	h.say("  many repos: served burst %d reused, p99 %.0f ms, %.1f calls per reused runner; same-size one-repository burst p99 %.0f ms; oversubscribed %d of %d reused",
		served.reused, Percentile(lat, 99), float64(calls)/float64(max(served.reused, 1)), Percentile(soloLat, 99), over.reused, min(supply, demand))
	return nil
}
