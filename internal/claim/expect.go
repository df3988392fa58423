// expect.go: when a claimed instance's registration will likely show in its reports, learned from
// the claims verified before, so that the shared poller (watch.go) reads then rather than at a
// back-off interval that by then has grown to PollInterval. A registration at GitHub takes about
// the same time on every instance of a deployment (about 2 s: the runner's configure), and every
// read the poll makes past it is waited out by the job that asked for the runner.
package claim

import (
	"slices"
	"sync"
	"time"
)

// regSamples is how many recent registrations the expectation is learned from.
const regSamples = 16

// regMinSamples is how many it needs before it shapes a schedule.
const regMinSamples = 4

// regTimes learns how long claimed instances take to report their registration: the median of the
// last regSamples lower bounds. A wait's lower bound is the time from its subscription to the last
// read that did not show the registration yet (0 when the first read did): the registration came
// after it. Polling from the median of those bounds reads before most registrations and then every
// ClaimPollInterval, growing by half, so the read that sees one comes within about that interval;
// an expectation too early costs a read, one too late moves up at once, since the reads that miss
// are its samples.
type regTimes struct {
	mu      sync.Mutex
	samples []time.Duration // a ring of the last regSamples bounds
	next    int
}

// add records a verified registration's lower bound.
func (rt *regTimes) add(d time.Duration) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.samples) < regSamples {
		rt.samples = append(rt.samples, d)
		return
	}
	rt.samples[rt.next] = d
	rt.next = (rt.next + 1) % regSamples
}

// expect is the median of the bounds, or 0 while there are fewer than regMinSamples.
func (rt *regTimes) expect() time.Duration {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.samples) < regMinSamples {
		return 0
	}
	s := slices.Sorted(slices.Values(rt.samples))
	return s[len(s)/2]
}
