// Counter counts AWS calls by service and operation: what benchmarks report as "AWS calls per
// provisioned runner", and what an operator compares against the account's throttling limits.
package awslimit

import (
	"context"
	"maps"
	"sync"

	"github.com/aws/smithy-go/middleware"
)

const counterMiddlewareID = "runnerpool.CallCounter"

// Counter counts the requests the SDK sends (every attempt, retries included), keyed
// "Service.Operation" (e.g. "EC2.CreateFleet", "DynamoDB.UpdateItem"). Add it to any client's
// APIOptions, or to aws.Config.APIOptions to count every client made from that config. It is safe
// for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{counts: map[string]int{}} }

// AddMiddleware is an APIOptions entry that counts each attempt of the operation.
func (c *Counter) AddMiddleware(stack *middleware.Stack) error {
	m := middleware.FinalizeMiddlewareFunc(counterMiddlewareID, func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		c.add(middleware.GetServiceID(ctx) + "." + middleware.GetOperationName(ctx))
		return next.HandleFinalize(ctx, in)
	})
	if _, ok := stack.Finalize.Get("Retry"); ok {
		return stack.Finalize.Insert(m, "Retry", middleware.After)
	}
	return stack.Finalize.Add(m, middleware.Before)
}

func (c *Counter) add(key string) {
	c.mu.Lock()
	c.counts[key]++
	c.mu.Unlock()
}

// Counts returns a copy of the counts.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Total is the number of calls counted.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.counts {
		t += v
	}
	return t
}

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	clear(c.counts)
	c.mu.Unlock()
}
