package sandbox_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// TestReRunJobsRunOnTheReRunsRunners (issue #28 item 8): attempt 1 of a run still holds its
// runner (its release has not run), registered and idle at GitHub. Attempt 2's jobs are queued from
// the start, as `runs-on: ${{ github.run_id }}-${{ github.run_attempt }}` with no needs queues them,
// before attempt 2 provisions. They run on attempt 2's runner only; attempt 1's late release then
// ends attempt 1's runner alone, and attempt 2's keeps serving. On the old code the runners of both
// attempts carried the bare run id: attempt 2's jobs could land on attempt 1's runner, and a job
// naming the attempt matched no runner at all.
func TestReRunJobsRunOnTheReRunsRunners(t *testing.T) {
	t.Parallel()
	sb := start(t, sandbox.Options{})
	cp := sb.Components(sandbox.ComponentOptions{})
	ctx := t.Context()

	run := newRun()
	first, err := cp.Provisioner.Provision(ctx, request(run))
	if err != nil || len(first.Runners) != 1 {
		t.Fatalf("provision of attempt 1: %v (%+v)", err, first)
	}
	old := first.Runners[0].InstanceID
	runJob(t, sb, first.Label) // attempt 1's job; its runner stays registered and idle

	// What the re-run's workflow names, queued before its provision.
	label := fmt.Sprintf("%s-%d", run, 2)
	queued := []int64{queueJob(sb, label), queueJob(sb, label)}
	second := request(run)
	second.Attempt = 2
	res, err := cp.Provisioner.Provision(ctx, second)
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision of attempt 2: %v (%+v)", err, res)
	}
	if res.Label != label || first.Label != run+"-1" {
		t.Fatalf("labels: attempt 1 %q, attempt 2 %q; want %s-1 and %s", first.Label, res.Label, run, label)
	}
	fresh := res.Runners[0].InstanceID
	queued = append(queued, queueJob(sb, res.Label)) // runs-on: ${{ needs.provision.outputs.label }}
	for _, id := range queued {
		if job := waitJob(t, sb, id); job.RunnerName != "runnerpool-"+fresh {
			t.Errorf("attempt 2's job %d ran on %q, want attempt 2's runner runnerpool-%s (attempt 1's is runnerpool-%s)", id, job.RunnerName, fresh, old)
		}
	}
	if labels := runnerLabels(sb, old); !slices.Contains(labels, first.Label) || slices.Contains(labels, label) {
		t.Errorf("attempt 1's runner has labels %v, want %s and not %s", labels, first.Label, label)
	}

	// Attempt 1's release, late: it ends attempt 1's runner and leaves attempt 2's alone.
	rep, err := cp.Releaser.Release(ctx, first.RunKey, 10*time.Minute)
	if err != nil || len(rep.Instances) != 1 || rep.Instances[0].ID != old || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release of attempt 1 = %+v, %v; want %s pooled, nothing else", rep, err, old)
	}
	if rec := record(t, sb, fresh); rec.State != store.StateRunning || rec.RunID != res.RunKey {
		t.Errorf("attempt 2's runner after attempt 1's release: %s for %q, want running for %s", rec.State, rec.RunID, res.RunKey)
	}
	if job := runJob(t, sb, res.Label); job.RunnerName != "runnerpool-"+fresh {
		t.Errorf("attempt 2's job after attempt 1's release ran on %q, want runnerpool-%s", job.RunnerName, fresh)
	}
}
