// Steps that run a test on the local stack in the clean copy: the stack's npm packages are the
// checkout's (installed there by make deps), named with stack.EnvNodeDir.
package main

import (
	"context"
	"path/filepath"
)

// stackTest runs the tests matching pattern of pkg in the clean copy, on a stack of its own.
func stackTest(pattern, pkg string) func(ctx context.Context, r *R) error {
	return func(ctx context.Context, r *R) error {
		nodeDir := filepath.Join(r.Checkout, "test", "stack", "node")
		_, err := r.run(ctx, r.Root, r.Env("RUNNERPOOL_STACK_NODE_DIR="+nodeDir), "go", "test", "-count=1", "-run", pattern, pkg)
		return err
	}
}
