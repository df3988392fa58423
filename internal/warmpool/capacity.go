// The instance caps of warm pools: each fleet's instances, the converger's and a pool job's cold
// starts alike, are reserved before it is launched (package launch) and the reservation is settled
// on the instances recorded.
package warmpool

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Capacity reserves instances against the instance caps; *quota.Caps satisfies it.
type Capacity interface {
	Reserve(ctx context.Context, id, runnerClass string, n int) error
	Settle(ctx context.Context, id, runnerClass string, instances []string) error
	Release(ctx context.Context, id, runnerClass string) error
}

// ReservationID names one fleet's reservation. It must be new for every fleet: reserving an id
// that exists counts nothing (that is how a retried call counts once).
func ReservationID(prefix string) string {
	return fmt.Sprintf("%s/%016x", prefix, rand.Uint64())
}
