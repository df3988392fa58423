//go:build linux

package sandbox_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// TestRootClassServesOneRepository: a runner class with job_access = "root". Its agent grants the
// runner user sudo (the sudoers drop-in it would write) and the docker group at boot. With reuse =
// "same-repository" a released instance is pooled for the run's repository alone: another
// repository's provision creates an instance, the same repository's next run reuses it. With reuse =
// "never" the release deregisters the runner but never pools the instance, whatever its agent
// reports, and refresh terminates it.
func TestRootClassServesOneRepository(t *testing.T) {
	t.Parallel()
	for _, reuse := range []string{declared.ReuseSameRepository, declared.ReuseNever} {
		t.Run(reuse, func(t *testing.T) {
			t.Parallel()
			uid := agenttest.ThrowawayUID(t)
			sb := start(t, sandbox.Options{RunnerUser: strconv.Itoa(uid), JobAccess: declared.JobAccessRoot, Reuse: reuse})
			cp := sb.Components(sandbox.ComponentOptions{})
			ctx := t.Context()

			runA := newRun()
			resA, err := cp.Provisioner.Provision(ctx, request(runA))
			if err != nil || len(resA.Runners) != 1 {
				t.Fatalf("provision A: %+v, %v", resA, err)
			}
			x := resA.Runners[0].InstanceID
			g, ok := sb.Grants.Of(x)
			wantSudo := "#" + strconv.Itoa(uid) + " ALL=(ALL) NOPASSWD: ALL\n"
			if !ok || g.JobAccess != declared.JobAccessRoot || !strings.HasSuffix(g.Sudoers, wantSudo) ||
				len(g.Groups) != 1 || g.Groups[0] != "docker" || g.RootlessDocker {
				t.Errorf("grant of the root class's instance = %+v (decided %v), want sudoers %q and the docker group", g, ok, wantSudo)
			}
			runJob(t, sb, resA.Label)
			rep, err := cp.Releaser.Release(ctx, resA.RunKey, 10*time.Minute)
			if err != nil || len(rep.Instances) != 1 {
				t.Fatalf("release A: %+v, %v", rep, err)
			}
			if reuse == declared.ReuseNever {
				neverPooled(t, sb, cp, rep, x)
				return
			}
			if rep.Count(release.Pooled) != 1 {
				t.Fatalf("release A = %+v, want pooled for the same repository", rep)
			}
			if rec := record(t, sb, x); rec.Scope != sandbox.Scope {
				t.Fatalf("pooled record's scope = %q, want the repository %s", rec.Scope, sandbox.Scope)
			}
			resB, err := cp.Provisioner.Provision(ctx, requestFor("5151", otherRepo, newRun()))
			if err != nil || len(resB.Runners) != 1 || resB.Runners[0].InstanceID == x || resB.Runners[0].Source != "created" {
				t.Fatalf("provision of another repository = %+v, %v; want a created instance, never the root instance %s", resB, err, x)
			}
			// B's pickup put A's message back as a misfit, delayed by the pickup's misfit delay (3 s).
			time.Sleep(4 * time.Second)
			resA2, err := cp.Provisioner.Provision(ctx, request(newRun()))
			if err != nil || len(resA2.Runners) != 1 || resA2.Runners[0].InstanceID != x || resA2.Runners[0].Source != "reused" {
				t.Fatalf("provision of A's next run = %+v, %v; want %s reused", resA2, err, x)
			}
		})
	}
}

// neverPooled: the release deregistered x's runner but expired it, refresh terminates it, and the
// next run of the same repository gets a created instance.
func neverPooled(t *testing.T, sb *sandbox.Sandbox, cp *sandbox.Components, rep release.Report, x string) {
	t.Helper()
	ctx := t.Context()
	if rep.Count(release.Expired) != 1 || !strings.Contains(rep.Instances[0].Reason, "does not reuse instances") {
		t.Fatalf("release = %+v, want expired: the class does not reuse instances", rep)
	}
	if !strings.Contains(rep.Instances[0].Reason, "deregistered") {
		t.Errorf("release reason %q: want the runner deregistered before the instance is expired", rep.Instances[0].Reason)
	}
	if n := poolMessages(t, sb); n != 0 {
		t.Errorf("pool holds %d messages, want 0", n)
	}
	if _, err := cp.Refresher.Run(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if rec := record(t, sb, x); rec.State != store.StateTerminated {
		t.Errorf("after refresh the instance is %s, want terminated", rec.State)
	}
	res, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil || len(res.Runners) != 1 || res.Runners[0].InstanceID == x || res.Runners[0].Source != "created" {
		t.Fatalf("next provision = %+v, %v; want a created instance", res, err)
	}
}
