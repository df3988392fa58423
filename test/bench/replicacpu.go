// The replicas' own CPU time, told apart from what shares the bench process with them (the
// simulated agents, the GitHub fake, the EC2 server, the OIDC issuer, the driver): every goroutine
// of a replica carries the pprof label component=replica (startReplica starts the service under
// it, and goroutines inherit their creator's labels), and a CPU profile of a measured run sums the
// samples so labelled.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/google/pprof/profile"
)

const labelComponent, componentReplica = "component", "replica"

// asReplica runs f with the goroutine labels of replica id: what f starts is the replica's.
func asReplica(ctx context.Context, id string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelComponent, componentReplica, "replica", id), f)
}

// replicaCPU runs f under a CPU profile and returns the CPU time of the samples of replica
// goroutines, and of all samples. The profile samples 100 times a second: a run of a few seconds
// of replica CPU holds some hundreds of samples. Background garbage collection is no goroutine's;
// the allocating goroutines' GC assists are theirs.
func replicaCPU(f func()) (replica, all time.Duration, err error) {
	return replicaCPUSaved(f, "")
}

// replicaCPUSaved is replicaCPU that also writes the profile to save (when not empty).
func replicaCPUSaved(f func(), save string) (replica, all time.Duration, err error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		f()
		return 0, 0, fmt.Errorf("profiling the replicas: %w", err)
	}
	f()
	pprof.StopCPUProfile()
	if save != "" {
		if err := os.WriteFile(save, buf.Bytes(), 0o644); err != nil {
			return 0, 0, fmt.Errorf("saving the profile: %w", err)
		}
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the replicas' profile: %w", err)
	}
	cpu := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "cpu" })
	if cpu < 0 {
		return 0, 0, fmt.Errorf("the replicas' profile has no cpu samples (types %v)", p.SampleType)
	}
	for _, s := range p.Sample {
		d := time.Duration(s.Value[cpu])
		all += d
		if slices.Contains(s.Label[labelComponent], componentReplica) {
			replica += d
		}
	}
	return replica, all, nil
}
