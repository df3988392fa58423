//go:build linux

package agent_test

import (
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner/fakerunner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
)

// TestReleaseKillsLeftDaemon: the job of a run leaves daemons behind, double-forked into a session of
// their own, under the runner user (a throwaway uid here). The agent's release kills every one of
// them before it confirms the release (UD_REMOVE_REG_REMOVE_RUN), so none is there when the instance
// goes back to the pool.
func TestReleaseKillsLeftDaemon(t *testing.T) {
	t.Parallel()
	uid := agent.ThrowawayUID(t)
	e := newEnv(t, envOptions{notice: agent.NoticeIMDSTags, manual: true})
	id := e.launch()
	endpoint := e.imdsEndpoint(id)
	dirs := agenttest.InstanceDirs(e.root, id)
	cfg := e.agentConfig(envOptions{notice: agent.NoticeIMDSTags})
	cfg.StateDir, cfg.WorkDir = dirs.State, dirs.Work
	cfg.RunnerUser = strconv.Itoa(uid)
	cfg.IMDS = imds.New(imds.Options{Endpoint: endpoint})
	cfg.NewRunner = func(string) (runner.Runner, error) {
		return fakerunner.New(fakerunner.Options{BaseURL: e.ghURL, Dir: dirs.Runner, WorkDir: dirs.Work,
			JobDuration: 50 * time.Millisecond, PollWait: 5 * time.Second, Logger: cfg.Logger})
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}()

	e.putCredential(id, "run-1", store.CredentialRegistration, e.runnerToken("registration"))
	e.create(id, "run-1")
	e.waitSignal(id, store.SignalRegistered, "run-1")
	e.toRunning(id, "run-1")

	// The job: a daemon in a session of its own and a loop that keeps forking, then it exits.
	job := exec.CommandContext(t.Context(), "/bin/sh", "-c",
		`setsid sh -c 'sleep 600 & ( while :; do sleep 600 & sleep 0.01; done ) & wait' </dev/null >/dev/null 2>&1 & exit 0`)
	job.Dir = "/"
	job.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := job.CombinedOutput(); err != nil {
		t.Fatalf("starting the job's daemon: %v: %s", err, out)
	}
	t.Cleanup(func() {
		for _, pid := range mustProcesses(t, uid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if !eventually(func() bool { return len(mustProcesses(t, uid)) >= 3 }) {
		t.Fatalf("the job's daemons did not start: %v", mustProcesses(t, uid))
	}

	e.release(id, "run-1")
	e.waitSignal(id, store.SignalReleased, "run-1")
	if left := mustProcesses(t, uid); len(left) != 0 {
		t.Errorf("processes of the runner uid %d left after the release was confirmed: %v", uid, left)
	}
}

func mustProcesses(t *testing.T, uid int) []int {
	t.Helper()
	pids, err := agent.ProcessesOf(uid)
	if err != nil {
		t.Fatal(err)
	}
	return pids
}
