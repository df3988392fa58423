// `runnerpool agent`: the instance agent (internal/agent), started on every runner instance by the
// systemd unit the user data installs (internal/userdata). The flags live in internal/agent/agentcmd.
package main

import (
	"context"
	"errors"
	"io"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/agentcmd"
)

// runAgent parses the agent's flags and runs it until the instance terminates itself or ctx ends
// (SIGTERM from systemd).
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := agentcmd.Run(ctx, args, stdout, stderr)
	if errors.Is(err, agentcmd.ErrUsage) {
		return errUsage
	}
	return err
}
