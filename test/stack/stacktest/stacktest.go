// Package stacktest gives tests the local stack: the one `make test` publishes in the environment,
// or else one started for the test binary and stopped by Main. With it `go test ./...` works both
// under `make test` and on its own.
//
// A package's tests use it like this:
//
//	func TestMain(m *testing.M) { stacktest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		st := stacktest.Shared(t)
//		table := stacktest.UniqueName(t, "state")
//		db := st.DynamoDB()
//		...
//	}
//
// The shared stack is shared by every package's tests running at once, so tests create their own
// tables and queues (UniqueName) and never list or delete what they did not create. Under `make test`
// the stack's EC2, GitHub and OIDC fields are nil (those servers run in the runnerpool-stack
// process): a test that needs in-process hooks, such as EC2 fault injection, starts its own server
// with httptest (ec2server.New, githubfake.New, oidcissuer.New) instead.
package stacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// startTimeout bounds starting a stack for the test binary (DynamoDB Local's JVM takes ~1-2 s).
const startTimeout = 2 * time.Minute

var (
	once     sync.Once
	shared   *stack.Stack
	startErr error
	owned    atomic.Bool // shared was started here, so Main stops it
)

// Shared returns the local stack for this test binary: the one in the environment (stack.FromEnv)
// when there is one, else one started on first use and stopped by Main. It fails the test when the
// stack cannot be had (for example "java not found on PATH: run make deps ...").
//
// A package that calls Shared without Main in its TestMain leaves its stack to the kernel: the
// children get SIGKILL when the test binary exits (Linux), but nothing stops them more gently.
func Shared(t testing.TB) *stack.Stack {
	t.Helper()
	once.Do(func() {
		shared, startErr = stack.FromEnv()
		if startErr != nil || shared != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		shared, startErr = stack.Start(ctx, stack.Options{})
		owned.Store(startErr == nil)
	})
	if startErr != nil {
		t.Fatalf("local stack: %v", startErr)
	}
	return shared
}

// Main runs the tests, stops the stack Shared started (if it did) and exits with the tests' code.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if owned.Load() {
		if err := shared.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "stacktest: stopping the local stack: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// maxNameLen fits both DynamoDB table names (3-255 of [A-Za-z0-9_.-]) and SQS queue names (1-80 of
// [A-Za-z0-9_-]), leaving room for a ".fifo" suffix.
const maxNameLen = 80 - len(".fifo")

var nameSeq atomic.Uint64

// UniqueName returns a name for a table or queue of this test: prefix, the test's name, and a random
// part, so tests and test binaries running at once against one stack never share a resource. It is
// at most 75 characters of [A-Za-z0-9_-], valid as a DynamoDB table name and as an SQS queue name
// (append ".fifo" for a FIFO queue).
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("UniqueName: %v", err)
	}
	suffix := fmt.Sprintf("%s%d", hex.EncodeToString(b[:]), nameSeq.Add(1))
	head := sanitize(prefix)
	if head != "" {
		head += "-"
	}
	middle := sanitize(t.Name())
	if room := maxNameLen - len(head) - len(suffix) - 1; len(middle) > room {
		if room < 0 {
			room = 0
		}
		middle = middle[len(middle)-room:] // the end of a subtest path is its distinctive part
	}
	name := head + strings.Trim(middle, "-_") + "-" + suffix
	if len(name) > maxNameLen {
		name = name[len(name)-maxNameLen:]
	}
	return strings.TrimLeft(name, "-_")
}

// sanitize keeps [A-Za-z0-9_-] and turns every other run of characters into one "-".
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
			dash = false
		default:
			if !dash {
				b.WriteByte('-')
				dash = true
			}
		}
	}
	return b.String()
}
