package runner

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// waitFile waits until path contains s.
func waitFile(t *testing.T, path, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), s) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never contained %q", path, s)
}

// envOf is the value of key in cmd's environment ("" when unset).
func envOf(cmd *exec.Cmd, key string) string {
	v := ""
	for _, kv := range cmd.Env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
