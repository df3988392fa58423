//go:build !linux

// Outside Linux the agent cannot find a user's processes or file owners; it runs on Linux instances
// only, and this keeps the package building elsewhere.
package agent

import (
	"context"
	"errors"
)

func killUserProcesses(context.Context, int) error {
	return errors.New("killing a user's processes is supported on Linux only")
}

// ProcessesOf lists a uid's processes (Linux only).
func ProcessesOf(int) ([]int, error) {
	return nil, errors.New("listing a user's processes is supported on Linux only")
}

func fileOwner(string) (int, bool) { return 0, false }

func killUIDRange(context.Context, int, int) error {
	return errors.New("killing processes is supported on Linux only")
}

// ProcessesOfRange lists the processes of a uid range (Linux only).
func ProcessesOfRange(int, int) ([]int, error) {
	return nil, errors.New("listing processes is supported on Linux only")
}

func removeSysVIPC(string, int) error { return nil }
