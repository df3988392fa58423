package warmpool_test

import (
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// A completed job's instance goes back to its repository's pool (PoolSpec.Recycle) only when its
// run is known not to run a pull request's code: a fork's job could leave a re-tagged image that
// the repository's next push, with secrets, would run. Recycling used to follow the repository
// alone. The rule is the step path's (pool.TrustedEvent, whose table is in internal/pool).
func TestJobTrusted(t *testing.T) {
	t.Parallel()
	for event, want := range map[string]bool{
		"":                    false, // a webhook's job: the event is unknown
		"pull_request":        false,
		"pull_request_target": true,
		"push":                true,
	} {
		if got := (warmpool.Job{Event: event}).Trusted(); got != want || got != pool.TrustedEvent(event) {
			t.Errorf("Job{Event: %q}.Trusted() = %v, want %v (pool.TrustedEvent)", event, got, want)
		}
	}
}
