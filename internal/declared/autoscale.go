// A warm pool's autoscale settings: the queue-time goal the policy (internal/autoscale) sizes the
// pool to, the pool-wide minimum, and an optional hourly budget. With them, each schedule window's
// hot and stopped counts are the window's maxima, within which the converger keeps what the policy
// decides (internal/warmpool/autoscale.go).
package declared

import (
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
)

// Autoscale is a warm pool's autoscale block.
type Autoscale struct {
	// QueueTimeP95 is the goal: 95 % of the pool's jobs start within it.
	QueueTimeP95 Duration `json:"queue_time_p95"`
	// QueueTimeP99, when set, is a tail goal: 99 % of the pool's jobs start within it (the
	// policy then keeps stopped instances as the tail's buffer where their start meets it).
	QueueTimeP99 Duration `json:"queue_time_p99,omitempty"`
	// MinHot and MinStopped are kept whatever the demand (each window's counts are the maxima).
	MinHot     int `json:"min_hot,omitempty"`
	MinStopped int `json:"min_stopped,omitempty"`
	// BudgetPerHour caps the idle capacity's spend, in USD per hour; 0: none.
	BudgetPerHour float64 `json:"budget_per_hour,omitempty"`
}

// Limits of an autoscale block.
const (
	MinQueueGoal  = time.Second
	MaxQueueGoal  = time.Hour
	MaxBudgetHour = 100000.0
)

// validate adds the block's problems, including minima above a window's maxima.
func (a *Autoscale) validate(c *collector, schedules []schedule.Schedule) {
	c.add("autoscale.queue_time_p95", ValidateDuration("queue_time_p95", a.QueueTimeP95.Std(), MinQueueGoal, MaxQueueGoal))
	if p99 := a.QueueTimeP99.Std(); p99 != 0 {
		c.add("autoscale.queue_time_p99", ValidateDuration("queue_time_p99", p99, MinQueueGoal, MaxQueueGoal))
		if p99 < a.QueueTimeP95.Std() {
			c.add("autoscale.queue_time_p99", fmt.Errorf("queue_time_p99 %s is below queue_time_p95 %s: the 99th percentile cannot be shorter than the 95th", p99, a.QueueTimeP95.Std()))
		}
	}
	c.add("autoscale.min_hot", schedule.ValidateCount(a.MinHot))
	c.add("autoscale.min_stopped", schedule.ValidateCount(a.MinStopped))
	if a.BudgetPerHour < 0 || a.BudgetPerHour > MaxBudgetHour {
		c.add("autoscale.budget_per_hour", fmt.Errorf("budget_per_hour %v: want 0 to %v USD", a.BudgetPerHour, MaxBudgetHour))
	}
	for _, s := range schedules {
		if a.MinHot > s.Hot || a.MinStopped > s.Stopped {
			c.add("autoscale", fmt.Errorf("min_hot %d and min_stopped %d exceed schedule %q's maxima (hot %d, stopped %d): with autoscale, a schedule's counts are its window's maxima",
				a.MinHot, a.MinStopped, s.Name, s.Hot, s.Stopped))
		}
	}
}
