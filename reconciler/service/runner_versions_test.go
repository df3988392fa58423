package service

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

func TestRunnerVersionsOfLiveRecords(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cur := runnerversion.Release{Version: "2.337.0", Published: now.Add(-72 * time.Hour)}
	live := []store.Instance{{RunnerVersion: "2.337.0"}, {RunnerVersion: "2.336.0"}, {RunnerVersion: "2.336.0"}, {}}
	counts, behind := RunnerVersions(live, cur, now)
	if diff := cmp.Diff(map[string]int{"2.337.0": 1, "2.336.0": 2, "unknown": 1}, counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if behind != 72*time.Hour {
		t.Errorf("oldest behind %s, want 72h", behind)
	}
	if _, behind := RunnerVersions(live[:1], cur, now); behind != 0 {
		t.Errorf("all current: behind %s, want 0", behind)
	}
}
