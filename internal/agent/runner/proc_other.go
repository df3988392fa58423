//go:build !unix

// Process handling of the Actions driver where there are no Unix process groups and credentials: the
// agent runs on Linux instances only, this keeps the package building elsewhere.
package runner

import (
	"errors"
	"os"
	"os/exec"
)

var (
	sigInterrupt = os.Interrupt
	sigKill      = os.Kill
)

func asUser(_ *exec.Cmd, name string) error {
	if name != "" {
		return errors.New("running as another user is supported on Unix only")
	}
	return nil
}

func signalGroup(cmd *exec.Cmd, sig os.Signal) {
	if cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}
