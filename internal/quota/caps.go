// Instance caps: the deployment's cap and each runner class's share, reserved before every fleet
// is created (a provision's or a warm pool's) and settled on the instances it launched.
package quota

import (
	"context"
	"time"
)

// DefaultPendingDeadline is how long an instance reservation may stay unsettled: a fleet call and
// its record writes are each bounded by minutes. Past it Repair releases the reservation (its
// owner crashed between reserving and launching), and instances launched meanwhile are adopted in
// the same Repair (RepairOptions.AdoptAfter is the same deadline).
const DefaultPendingDeadline = 10 * time.Minute

// Caps reserves instances against the instance caps. A nil *Caps, or one with no cap that applies,
// reserves nothing.
type Caps struct {
	Ledger *Ledger
	// MaxInstances caps the deployment (0: no cap).
	MaxInstances int
	// ClassMax is a runner class's own cap (0: none); nil: no class has one.
	ClassMax func(class string) int
	// Deadline of pending reservations (default DefaultPendingDeadline).
	Deadline time.Duration
}

// PendingDeadline is how long a pending instance reservation may stay unsettled (Deadline, or
// DefaultPendingDeadline): Repair adopts unpaid instances at the same age.
func (c *Caps) PendingDeadline() time.Duration {
	if c == nil || c.Deadline <= 0 {
		return DefaultPendingDeadline
	}
	return c.Deadline
}

// Applies reports whether an instance of the class is capped at all.
func (c *Caps) Applies(class string) bool {
	return c != nil && c.Ledger != nil && (c.MaxInstances > 0 || c.classMax(class) > 0)
}

func (c *Caps) classMax(class string) int {
	if c.ClassMax == nil {
		return 0
	}
	return c.ClassMax(class)
}

// Reserve reserves n instances of a runner class under id (a fleet's idempotency token: a retry
// of the same fleet reserves nothing more). A refusal is a *RefusedError; nothing is reserved.
func (c *Caps) Reserve(ctx context.Context, id, class string, n int) error {
	if !c.Applies(class) || n <= 0 {
		return nil
	}
	d := c.PendingDeadline()
	limits := []Limit{
		{Kind: LimitDeployment, Counter: DeploymentCounter, Max: c.MaxInstances},
		{Kind: LimitRunnerClass, Counter: ClassCounter(class), Max: c.classMax(class)},
	}
	return c.Ledger.Reserve(ctx, Reservation{ID: "fleet#" + id, Amount: n, Deadline: c.Ledger.o.Now().Add(d)}, limits)
}

// Settle names the instances a reservation's fleet launched (the units beyond them are given back).
func (c *Caps) Settle(ctx context.Context, id, class string, instances []string) error {
	if !c.Applies(class) {
		return nil
	}
	return c.Ledger.Settle(ctx, "fleet#"+id, instances)
}

// Release gives a reservation back: its fleet launched nothing.
func (c *Caps) Release(ctx context.Context, id, class string) error {
	if !c.Applies(class) {
		return nil
	}
	return c.Ledger.Release(ctx, "fleet#"+id)
}

// Room is how many more instances of a runner class the caps allow now (capped false: no cap
// applies, and room is meaningless). Pending reservations count against it.
func (c *Caps) Room(ctx context.Context, class string) (room int, capped bool, _ error) {
	if !c.Applies(class) {
		return 0, false, nil
	}
	room = -1
	for _, lim := range []struct {
		counter string
		max     int
	}{{DeploymentCounter, c.MaxInstances}, {ClassCounter(class), c.classMax(class)}} {
		if lim.max <= 0 {
			continue
		}
		used, err := c.Ledger.Counter(ctx, lim.counter)
		if err != nil {
			return 0, true, err
		}
		if left := max(lim.max-used, 0); room < 0 || left < room {
			room = left
		}
	}
	return room, true, nil
}

// Adopt says which live instances Repair counts when no reservation pays for them: those of a
// capped class, or all when the deployment is capped.
func (c *Caps) Adopt(class string) bool { return c.Applies(class) }
