// Child processes of the local stack (DynamoDB Local, fauxqs): started in their own process group so
// Close can signal the whole group, killed by the kernel if this process dies (Pdeathsig on Linux),
// with the last lines of their output kept for error messages.
package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// stopGrace is how long a child gets to exit after SIGTERM before its group is killed.
const stopGrace = 3 * time.Second

// childSpec says how to run one emulator.
type childSpec struct {
	name string // for messages: "DynamoDB Local"
	path string // binary
	args func(port int) []string
	dir  string
	env  []string // added to the environment
	// port is the fixed port, 0 for a free one; wildcard says the child binds every interface, so
	// a free port must be free there.
	port     int
	wildcard bool
	// probe is one readiness check against the child's endpoint.
	probe     func(ctx context.Context, endpoint string) error
	probeName string // for messages: "ListTables"
}

// child is one running emulator process.
type child struct {
	spec    childSpec
	port    int
	cmd     *exec.Cmd
	out     *tailBuffer
	exited  chan struct{} // closed once Wait returned; waitErr is set then
	waitErr error
}

func (c *child) url() string { return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// startChild starts spec on its port (a free one when none is fixed) and registers it with s so
// Close stops it. It does not wait for readiness: see waitReady.
func (s *Stack) startChild(ctx context.Context, opts Options, spec childSpec) (*child, error) {
	c := &child{spec: spec}
	s.children = append(s.children, c)
	return c, c.start(ctx, opts.ChildOutput)
}

func (c *child) start(ctx context.Context, extraOut io.Writer) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("starting %s: %w", c.spec.name, err)
	}
	c.port = c.spec.port
	if c.port == 0 {
		p, err := freePort(c.spec.wildcard)
		if err != nil {
			return fmt.Errorf("starting %s: %w", c.spec.name, err)
		}
		c.port = p
	}
	c.out = newTailBuffer(16 << 10)
	var out io.Writer = c.out
	if extraOut != nil {
		out = io.MultiWriter(c.out, extraOut)
	}
	// Not exec.CommandContext: ctx bounds the start, the child lives until Close.
	cmd := exec.Command(c.spec.path, c.spec.args(c.port)...)
	cmd.Dir = c.spec.dir
	if len(c.spec.env) > 0 {
		cmd.Env = append(os.Environ(), c.spec.env...)
	}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	// The output pipe is closed by the kernel when the group dies; WaitDelay bounds Wait should a
	// stray process keep it open.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", c.spec.name, err)
	}
	c.cmd = cmd
	c.exited = make(chan struct{})
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return nil
}

// waitReady probes c until it answers, it exits, ctx ends or timeout passes. A child on a free port
// that lost the race for it to another process is restarted on another port (twice at most).
func (c *child) waitReady(ctx context.Context, timeout time.Duration, extraOut io.Writer) error {
	deadline := time.Now().Add(timeout)
	restarts := 0
	var lastErr error
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.spec.probe(pctx, c.url())
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		// A 4xx answer means the server is up and refuses the probe: waiting will not help.
		var re *awshttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() >= 400 && re.HTTPStatusCode() < 500 {
			refused := fmt.Errorf("%s refused %s: %w", c.spec.name, c.spec.probeName, err)
			if c.spec.port != 0 {
				return refused
			}
			// On a free port the answer may come from another process that took the port between
			// freePort and the child's bind: then the child exits with a bind error once it gets as
			// far as binding, and the restart below moves it to another port. On a loaded machine a
			// child can take seconds to get there (node importing fauxqs, a JVM starting), so wait
			// for it up to the start's deadline; a child that is up and refuses the probe itself
			// fails the same way, only later.
			select {
			case <-c.exited:
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w (%w)", c.spec.name, ctx.Err(), refused)
			case <-time.After(time.Until(deadline)):
				return refused
			}
		}

		select {
		case <-c.exited:
			if c.spec.port == 0 && restarts < 2 && c.out.contains("in use", "EADDRINUSE", "BindException") {
				restarts++
				if err := c.start(ctx, extraOut); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("%s exited before it was ready (%v)%s", c.spec.name, c.waitErr, c.tailSuffix())
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", c.spec.name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer %s on %s within %s (last error: %v)%s",
				c.spec.name, c.spec.probeName, c.url(), timeout, lastErr, c.tailSuffix())
		}
	}
}

// stop sends SIGTERM to the child's process group, SIGKILL after grace, and waits for the child.
func (c *child) stop(grace time.Duration) error {
	if c.cmd == nil || c.cmd.Process == nil {
		return nil
	}
	pgid := c.cmd.Process.Pid // Setpgid: the child leads its own group.
	select {
	case <-c.exited:
		return nil
	default:
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.exited:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-c.exited:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", c.spec.name, pgid)
	}
}

// tailSuffix is the child's last output lines, formatted to end an error message.
func (c *child) tailSuffix() string {
	t := c.out.tail(20)
	if t == "" {
		return " (no output)"
	}
	return "; last output of " + c.spec.name + ":\n" + t
}

// ChildCPU is the user + system CPU time each emulator process (DynamoDB Local, fauxqs) has used
// since it started, by name: with the caller's own rusage, what a measured phase cost this
// machine's cores. Children restarted after losing their port count from their restart.
func (s *Stack) ChildCPU() (map[string]time.Duration, error) {
	out := make(map[string]time.Duration, len(s.children))
	for _, c := range s.children {
		if c.cmd == nil || c.cmd.Process == nil {
			continue
		}
		d, err := processCPU(c.cmd.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.spec.name, err)
		}
		out[c.spec.name] += d
	}
	return out, nil
}

// waitReady waits for every child at once.
func (s *Stack) waitReady(ctx context.Context, timeout time.Duration, extraOut io.Writer) error {
	began := time.Now()
	errs := make([]error, len(s.children))
	var wg sync.WaitGroup
	for i, c := range s.children {
		wg.Go(func() {
			errs[i] = c.waitReady(ctx, timeout, extraOut)
			if errs[i] == nil {
				s.logger.Debug("stack: emulator ready", "name", c.spec.name, "url", c.url(), "took", time.Since(began).Round(time.Millisecond))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// tail returns the last n non-empty lines.
func (t *tailBuffer) tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	var kept []string
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			kept = append(kept, l)
		}
	}
	if len(kept) > n {
		kept = kept[len(kept)-n:]
	}
	return strings.Join(kept, "\n")
}

func (t *tailBuffer) contains(subs ...string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range subs {
		if bytes.Contains(t.buf, []byte(s)) {
			return true
		}
	}
	return false
}

func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
