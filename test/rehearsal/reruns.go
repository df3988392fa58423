// Steps that run a test on the local stack in the clean copy: the stack's npm packages are the
// checkout's (installed there by make deps), named with stack.EnvNodeDir. releaseTest's tests (build
// tag rehearsal, in this package) also read the release: RUNNERPOOL_RELEASE_DIST, VERSION and
// RELEASE_URL (R.Env), its host's CA in SSL_CERT_FILE.
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

// releaseTest runs pkg's rehearsal-tagged tests matching pattern in the clean copy, on a stack of
// their own and the release the earlier steps built and serve.
func releaseTest(pattern, pkg string) func(ctx context.Context, r *R) error {
	return func(ctx context.Context, r *R) error {
		nodeDir := filepath.Join(r.Checkout, "test", "stack", "node")
		_, err := r.run(ctx, r.Root, r.Env("RUNNERPOOL_STACK_NODE_DIR="+nodeDir, "RUNNERPOOL_RELEASE_DIST="+r.Dist),
			"go", "test", "-count=1", "-tags", "rehearsal", "-run", pattern, "-v", pkg)
		return err
	}
}

// userdataOSStep runs TestUserDataOnDebianFromRelease (internal/userdata, build tags userdata_os
// and rehearsal; needs root, as make userdata-os-test does) on the release host.
func userdataOSStep(ctx context.Context, r *R) error {
	_, err := r.run(ctx, r.Root, r.Env(), "go", "test", "-count=1", "-tags", "userdata_os rehearsal",
		"-run", "^TestUserDataOnDebianFromRelease$", "-v", "./internal/userdata/")
	return err
}
