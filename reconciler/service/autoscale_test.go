package service_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// TestAutoscaledPoolEndToEnd: a warm pool with an autoscale block, written as the provider writes
// it, is sized by the policy in the running service: with no demand recorded it keeps its
// minimum (1 hot), not its window's maxima (3 hot, 2 stopped); the leader keeps the decision in
// the pool's autoscale item, and the dashboard's pools page shows that target, the window's
// maxima and the queue time (none measured yet) against the goal.
func TestAutoscaledPoolEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := autoscaledPool(t, "auto", 3, 2)
	r := env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_DASHBOARD_LISTEN": "127.0.0.1:0",
		"RUNNERPOOL_CONVERGE_SCHEDULE": "@every 1s", "RUNNERPOOL_HISTORY_SAMPLE_INTERVAL": "10s",
	})
	waitFor(t, 20*time.Second, "the pool's autoscale decision", func() bool {
		st, err := env.Store.GetAutoscale(ctx, "auto")
		return err == nil && st.Hot == 1 && st.Stopped == 0 && st.Decision.WindowHot == 3 && st.Decision.WindowStopped == 2
	})
	dash := r.Service.DashboardURL()
	waitFor(t, 40*time.Second, "the pools page showing the policy's target", func() bool {
		code, body := get(t, http.MethodGet, dash+"/pools")
		return code == http.StatusOK && strings.Contains(body, "<td>1 hot, 0 stopped</td>") &&
			strings.Contains(body, "<th>queue time p95 / goal</th><td>— (no job measured in the last hour) / 5.0s</td>") &&
			strings.Contains(body, "window max 3 hot, 2 stopped")
	})
}

// autoscaledPool is a service env whose table holds the test runner class and a warm pool name
// with an autoscale block (goal 5 s, min 1 hot) within a window of hot and stopped, as the
// provider writes them.
func autoscaledPool(t *testing.T, name string, hot, stopped int) *servicetest.Env {
	t.Helper()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	repo := declared.NewRepository(env.Store)
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	wp := declared.WarmPool{Name: name, RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: hot, Stopped: stopped}},
		Autoscale: &declared.Autoscale{QueueTimeP95: declared.Duration(5 * time.Second), MinHot: 1}}
	if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	return env
}
