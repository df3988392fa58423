package stack

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestWaitReadyRestartsAChildThatLostItsPort: another process takes the child's free port between
// freePort and the child's bind and answers the probe with a 400 in XML (what failed a CI run:
// "fauxqs refused ListQueues ... invalid character '<'"). The child, slow to start on a loaded
// machine, only reaches its bind seconds later and exits with EADDRINUSE; waitReady must wait for
// that exit and restart the child on another port, not report the foreign answer as the child's.
func TestWaitReadyRestartsAChildThatLostItsPort(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		starts  []int
		foreign *http.Server
	)
	spec := childSpec{
		name: "slow child",
		path: "/bin/sh",
		args: func(port int) []string {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, port)
			if len(starts) == 1 {
				// Slower than the 3 s the old wait allowed.
				return []string{"-c", "sleep 4; echo 'Error: listen EADDRINUSE: address already in use' >&2; exit 1"}
			}
			return []string{"-c", "sleep 60"}
		},
		probe:     probeSQS,
		probeName: "ListQueues",
	}
	c := &child{spec: spec}
	if err := c.start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.stop(time.Second) })

	// The foreign server takes the first port and refuses every SQS call.
	lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)))
	if err != nil {
		t.Fatalf("taking the child's port: %v", err)
	}
	foreign = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte("<Response><Errors><Error><Code>InvalidAction</Code></Error></Errors></Response>"))
	})}
	go func() { _ = foreign.Serve(lis) }()
	t.Cleanup(func() { _ = foreign.Close() })
	first := c.port

	// The restarted child "answers" on any other port.
	c.spec.probe = func(ctx context.Context, endpoint string) error {
		u, err := url.Parse(endpoint)
		if err != nil {
			return err
		}
		if u.Port() == strconv.Itoa(first) {
			return probeSQS(ctx, endpoint)
		}
		return nil
	}
	if err := c.waitReady(t.Context(), 30*time.Second, nil); err != nil {
		t.Fatalf("waitReady: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 || starts[1] == first {
		t.Errorf("child started on ports %v, want a second start on a port other than %d", starts, first)
	}
}
