//go:build !linux

package bench

import "context"

// phaseDocker: rootless Docker runs on Linux only.
func phaseDocker(_ context.Context, _ *harness, res *Result) error {
	res.add(Figure{Name: "docker_job_overhead_ms", Missing: "rootless Docker runs on Linux only", Unit: "ms"})
	return nil
}
