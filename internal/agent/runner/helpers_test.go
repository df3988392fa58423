package runner

import (
	"context"
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

// runUntilStopped runs a until its run.sh wrote "run.sh" to log, then stops it the way the agent
// does (ctx done): Run must return nil.
func runUntilStopped(t *testing.T, a *Actions, log string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFile(t, log, "run.sh")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after stop: %v", err)
	}
}
