//go:build faults

package faults_test

import (
	"context"
	"fmt"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// lostRunnerRelease: keep a scope's runner release, then a later read of a newer one, as the
// release cache does once an hour; an answer lost on either write is the write's own (a retry
// finds fetched_at equal, which the condition admits), and the table ends with the later release.
func lostRunnerRelease(ctx context.Context, e *env, r *replica, tag string) error {
	rel := runnerversion.Default
	at := time.Now().UTC().Truncate(time.Millisecond)
	if err := r.st.PutRunnerRelease(ctx, store.RunnerRelease{Scope: tag, Release: rel, FetchedAt: at}); err != nil {
		return fmt.Errorf("runner release first put: %w", err)
	}
	later := at.Add(time.Hour)
	if err := r.st.PutRunnerRelease(ctx, store.RunnerRelease{Scope: tag, Release: rel, FetchedAt: later}); err != nil {
		return fmt.Errorf("runner release later put: %w", err)
	}
	got, err := e.sb.Store.GetRunnerRelease(ctx, tag)
	if err != nil || !got.FetchedAt.Equal(later) || got.Release.Version != rel.Version {
		return fmt.Errorf("runner release after the writes: %+v, %v; want version %s fetched at %s", got, err, rel.Version, later)
	}
	return nil
}
