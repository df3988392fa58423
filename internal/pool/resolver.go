package pool

import (
	"fmt"
	"sort"
)

// Resolver finds the pool queue of a runner class.
type Resolver interface {
	Queue(runnerClass string) (*Queue, error)
}

// StaticResolver maps runner class names to queues.
type StaticResolver map[string]*Queue

// Queue returns the queue of the runner class or an error naming it.
func (r StaticResolver) Queue(runnerClass string) (*Queue, error) {
	q, ok := r[runnerClass]
	if !ok {
		return nil, fmt.Errorf("no pool queue for runner class %q", runnerClass)
	}
	return q, nil
}

// Queues lists every queue, ordered by runner class (refresh checks each one).
func (r StaticResolver) Queues() []*Queue {
	names := make([]string, 0, len(r))
	for name := range r {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]*Queue, 0, len(names))
	for _, name := range names {
		out = append(out, r[name])
	}
	return out
}
