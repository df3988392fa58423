package bench

import (
	"strings"
	"sync"
	"testing"
)

// leakyPoller stands for what a phase forgets to stop: a goroutine that runs until told. Not
// inlined, so that its frame shows in the stacks.
//
//go:noinline
func leakyPoller(started chan<- struct{}, stop <-chan struct{}) {
	started <- struct{}{}
	<-stop
}

func TestGoroutinesNameWhatAPhaseLeftRunning(t *testing.T) {
	before := goroutines()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait() // gone before the next test counts
	defer close(stop)
	started := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); leakyPoller(started, stop) }()
		<-started // running: its stack shows leakyPoller, not the go statement's wrapper
	}
	grown, extra := grownGoroutines(before, goroutines())
	if extra < 3 {
		t.Fatalf("3 goroutines started, %d counted more: %v", extra, grown)
	}
	if len(grown) == 0 || !strings.Contains(grown[0], "test/bench.leakyPoller") || !strings.HasPrefix(grown[0], "3× ") {
		t.Errorf("the leftover is not named first: %v", grown)
	}
}

func TestFuncName(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"github.com/x/y/internal/agent.(*agent).heartbeat(0xc000123, {0x1, 0x2})", "github.com/x/y/internal/agent.(*agent).heartbeat"},
		{"created by net/http.(*Server).Serve in goroutine 42", "created by net/http.(*Server).Serve"},
		{"main.main()", "main.main"},
	} {
		if got := funcName(tc.line); got != tc.want {
			t.Errorf("funcName(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestInstanceGoroutinesCountApart(t *testing.T) {
	stack := "goroutine 7 [select]:\n" + module + "/internal/agent.(*agent).heartbeat(0x1)\n\t/x/agent.go:359 +0x1cf\ncreated by " + module + "/internal/agent.(*agent).run in goroutine 6"
	if !instanceGoroutine(stack) {
		t.Error("an agent's goroutine is not counted as a simulated instance's")
	}
	if instanceGoroutine("goroutine 8 [chan receive]:\n" + module + "/test/bench.leakyPoller(0x1)") {
		t.Error("a poller of the harness is counted as a simulated instance's")
	}
}

func TestSlowestNamesTheCycles(t *testing.T) {
	got := slowest([]float64{120, 180, 130, 175}, []int{2, 3, 5, 9}, 2)
	if want := "cycle 3 180 ms, cycle 9 175 ms"; got != want {
		t.Errorf("slowest = %q, want %q", got, want)
	}
}
