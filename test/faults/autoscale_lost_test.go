//go:build faults

package faults_test

import (
	"context"
	"fmt"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// lostAutoscale: create a pool's autoscale item and move it on a version, as the leader does each
// pass; an answer lost on either write is the write's own (recognised), and the item ends at
// version 2 with the second write's targets.
func lostAutoscale(ctx context.Context, e *env, r *replica, tag string) error {
	st, err := r.st.PutAutoscale(ctx, store.AutoscaleState{Pool: tag, Hot: 1}, 0)
	if err != nil {
		return fmt.Errorf("autoscale item create: %w", err)
	}
	st.Hot, st.Stopped = 2, 3
	if _, err := r.st.PutAutoscale(ctx, st, st.Version); err != nil {
		return fmt.Errorf("autoscale item update: %w", err)
	}
	got, err := e.sb.Store.GetAutoscale(ctx, tag)
	if err != nil || got.Version != 2 || got.Hot != 2 || got.Stopped != 3 {
		return fmt.Errorf("autoscale item after the writes: %+v, %v; want version 2, 2 hot, 3 stopped", got, err)
	}
	return nil
}
