// Package condwrite names the conditional writes of the state table: every write whose success
// depends on a condition (the store's instance, run, lease, configuration and once items, the
// quota ledger, the history's samples) is declared once with a stable name, and carries that name
// on its request's context. The list of them is enumerable (All), so a fault that loses the answer
// of conditional writes (test/faults.LostAnswer) can say which writes it hit and which it never
// reached.
//
// The name travels on the context only: nothing of it is sent to DynamoDB.
package condwrite

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Name is one conditional write, as declared by the package that makes it.
type Name string

var (
	mu       sync.Mutex
	declared = map[Name]bool{}
)

// Declare registers a conditional write under a stable name (package-level variables of the
// packages that write). Declaring a name twice panics: two writes would be counted as one.
func Declare(name string) Name {
	mu.Lock()
	defer mu.Unlock()
	n := Name(name)
	if name == "" || declared[n] {
		panic(fmt.Sprintf("condwrite: %q declared twice or empty", name))
	}
	declared[n] = true
	return n
}

// All lists the declared conditional writes of the packages linked into the program, sorted.
func All() []Name {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Name, 0, len(declared))
	for n := range declared {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

type key struct{}

// Context returns ctx carrying the write's name, for the request that makes the write.
func (n Name) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, n)
}

// From is the name of the conditional write a request's context carries ("" and false if none).
func From(ctx context.Context) (Name, bool) {
	n, ok := ctx.Value(key{}).(Name)
	return n, ok
}
