// Scale sets through a replica: the listener `runnerpool serve` runs for a scale set the provider
// wrote to the state table, and the pool worker that serves its jobs.
package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestScaleSetServesPoolJob: a replica creates the configured scale set at GitHub, holds its
// message session, and a job queued for it (runs-on: the scale set's name, no webhook) is served by
// the warm pool's hot instance, whose agent registers for it.
func TestScaleSetServesPoolJob(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	repo := declared.NewRepository(env.Store)
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatal(err)
	}
	wp := declared.WarmPool{Name: "warm", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 1}}}
	if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
		t.Fatal(err)
	}
	set := declared.ScaleSet{Name: "linux-warm", WarmPool: "warm", Scope: servicetest.Repository, MaxRunners: 5}
	if _, err := repo.PutScaleSet(ctx, set, 0); err != nil {
		t.Fatal(err)
	}
	hot := env.Hot(t, rc, wp.Name, declared.SpecHash(rc, wp), 1)[0]
	env.Start(t, "a", map[string]string{"RUNNERPOOL_RUNNER_CLASSES_FILE": ""})
	waitFor(t, 20*time.Second, "the replica to hold the scale set's session", func() bool {
		st, ok := env.GitHub.ScaleSet(servicetest.Repository, "linux-warm")
		return ok && st.Session != nil && st.Session.Owner == "a"
	})
	env.GitHub.QueueScaleSetJob("acme", "api", 9001, "linux-warm")
	waitFor(t, 20*time.Second, "the hot instance claimed for the scale set job and its agent registered", func() bool {
		rec, err := env.Store.Get(ctx, hot)
		if err != nil || !strings.HasPrefix(rec.RunID, "job:ss") || (rec.State != store.StateClaimed && rec.State != store.StateRunning) {
			return false
		}
		reg := env.Registered(hot)
		return len(reg) == 1 && reg[0] == rec.RunID
	})
	if creds := env.Credentials(hot); len(creds) != 1 || !creds[0].JIT {
		t.Errorf("hot instance's credentials %+v: want one JIT configuration", creds)
	}
	env.Audit(t)
}
