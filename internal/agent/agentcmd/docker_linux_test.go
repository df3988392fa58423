//go:build linux

package agentcmd

import (
	"io"
	"strings"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
	"github.com/runnerpool/terraform-provider-runnerpool/test/agenttest"
)

// TestRootlessDockerOfRunnerUser: a "docker" class's daemon is the runner account's, with its
// subordinate range, in the directories the cleanup leaves alone; a runner user without an account
// is refused.
func TestRootlessDockerOfRunnerUser(t *testing.T) {
	t.Parallel()
	if _, err := RootlessDocker("no-such-runner-user", io.Discard); err == nil || !strings.Contains(err.Error(), "runner user") {
		t.Errorf("RootlessDocker of an unknown user: %v, want an error naming the runner user", err)
	}
	tools := agenttest.Docker(t)
	acct := agenttest.NewAccount(t, 0)
	d, err := RootlessDocker(acct.Name, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	start, count, _ := agent.SubordinateRange("/etc/subuid", acct.Name, acct.UID)
	if d.UID != acct.UID || d.GID != acct.GID || d.Home != acct.Home || d.SubStart != start || d.SubCount != count ||
		d.RuntimeDir != RootlessRuntimeDir || d.DataRoot != RootlessDataRoot || d.Script != tools.Script ||
		d.Host() != "unix://"+RootlessRuntimeDir+"/docker.sock" {
		t.Errorf("RootlessDocker = %+v, want the account's (subordinate %d+%d) in %s and %s", d, start, count, RootlessRuntimeDir, RootlessDataRoot)
	}
}
