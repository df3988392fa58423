// The pre-runner script: the user's own setup (packages, mounts, caches), run once at first boot as
// root, before the instance takes any run. Its result is the first signal the agent writes (UD_OK or
// UD_FAILED); a failed instance never registers a runner and waits for termination.
package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.buf, nil))
}

// runPreRunner runs the script and returns its output's tail; err says why it failed.
func runPreRunner(ctx context.Context, path string, timeout time.Duration) (tail string, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("pre-runner script: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("pre-runner script %s is not a regular file", path)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A script with a #! line and an execute bit runs as itself; anything else runs under /bin/sh (the
	// kernel refuses to exec a script without an interpreter line).
	cmd := exec.CommandContext(ctx, "/bin/sh", path)
	if fi.Mode().Perm()&0o111 != 0 && hasShebang(path) {
		cmd = exec.CommandContext(ctx, path)
	}
	out := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second // a script that leaves a child holding its output must not hang us
	err = cmd.Run()
	tail = strings.TrimSpace(out.String())
	switch {
	case err == nil:
		return tail, nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return tail, fmt.Errorf("pre-runner script timed out after %s", timeout)
	}
	return tail, fmt.Errorf("pre-runner script: %w", err)
}

// lastBytes shortens s to its last n bytes (for signal details, which must stay small).
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + string(bytes.ToValidUTF8([]byte(s[len(s)-n:]), nil))
}

func hasShebang(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 2)
	n, _ := f.Read(b)
	return n == 2 && string(b) == "#!"
}
