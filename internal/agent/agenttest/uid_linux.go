//go:build linux

package agenttest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent"
)

var uidMu sync.Mutex

// ThrowawayUID is a random high uid (60000+) that no process and no account uses, for a test that runs
// a job's processes under a runner user (agent.Config.RunnerUser as a number). Tests run as root.
func ThrowawayUID(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test starts processes under another uid and needs root (euid %d)", os.Geteuid())
	}
	uidMu.Lock()
	defer uidMu.Unlock()
	passwd, _ := os.ReadFile("/etc/passwd")
	for range 100 {
		uid := 60000 + rand.IntN(5000)
		if pids, err := agent.ProcessesOf(uid); err != nil || len(pids) > 0 {
			continue
		}
		if bytes.Contains(passwd, []byte(":"+strconv.Itoa(uid)+":")) {
			continue
		}
		return uid
	}
	t.Fatal("no unused uid found")
	return 0
}
