// Package runner is the agent's interface to a GitHub Actions runner: register it for one run with a
// short-lived credential taken from the instance's own item, run it until the agent stops it, and remove
// it again. Two drivers implement it: Actions (the real actions runner's config.sh and run.sh, in this
// package) and fakerunner (the GitHub fake's runner protocol, for tests and the demo).
package runner

import (
	"context"
	"errors"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// Runner is one runner installation on an instance. An instance has one runner at a time; the agent
// registers it for a run, runs it, and removes it on release. A driver keeps its registration on disk
// (as the real runner does in .runner and .credentials), so that a restarted agent can Run or Remove a
// runner that an earlier agent process registered.
type Runner interface {
	// Register configures the runner under name with the credential's labels (or with the credential's
	// JIT configuration, which carries name and labels itself), replacing a runner of the same name.
	Register(ctx context.Context, cred store.Credential, name string) error
	// Run runs the registered runner until ctx is done (the agent stops it; Run then returns nil once
	// the runner has shut down) or the runner exits by itself (Run returns why).
	Run(ctx context.Context) error
	// Remove deregisters the runner with a remove token and forgets the local registration. Removing
	// when nothing is registered succeeds.
	Remove(ctx context.Context, cred store.Credential) error
}

// ErrVersionRefused is returned (wrapped) by Register and Run when GitHub refused the runner for its
// version: below the registration floor, or too far behind the current release to be assigned jobs.
var ErrVersionRefused = errors.New("GitHub refused the runner's version")

// ErrNotRegistered is returned by Run when there is no registration to run.
var ErrNotRegistered = errors.New("runner is not registered")

// ErrSpent is returned (wrapped) by Run when a runner registered with a just-in-time configuration
// exited by itself: such a runner is ephemeral, it exits after its one job and GitHub removes it
// (actions/runner src/Runner.Listener/Runner.cs: an ephemeral runner returns ReturnCode.Success
// once its job completed, after deleting its local configuration), and a runner whose registration
// is gone cannot open a session again (MessageListener.cs CreateSessionAsync: "invalid_client",
// CreateSessionResult.Failure, ReturnCode.TerminatedError). The driver forgets the configuration:
// the runner is not run again, and no credential comes to register it again.
var ErrSpent = errors.New("the runner's just-in-time registration is spent")
