package bench

import (
	"context"
	"sync"
	"testing"
	"time"
)

// spin burns CPU for d.
func spin(d time.Duration) (n int) {
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
	}
	return n
}

// TestReplicaCPUCountsOnlyReplicaGoroutines: of two goroutines burning CPU side by side, only the
// one started under a replica's labels (and the goroutine it starts in turn) counts as the
// replica's.
func TestReplicaCPUCountsOnlyReplicaGoroutines(t *testing.T) {
	rep, all, err := replicaCPU(func() {
		var wg sync.WaitGroup
		asReplica(t.Context(), "r1", func(context.Context) {
			wg.Go(func() { spin(300 * time.Millisecond) }) // inherits the labels
		})
		wg.Go(func() { spin(300 * time.Millisecond) }) // the driver's
		wg.Wait()
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep <= 0 || rep >= all {
		t.Errorf("replica CPU %s of %s profiled: want some, not all", rep, all)
	}
}
