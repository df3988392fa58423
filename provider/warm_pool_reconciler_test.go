// End to end with the reconciler: a warm pool applied with Terraform is picked up by a running
// replica (test/servicetest) on its next convergence cycle, which launches the pool's
// instances in the environment's EC2 server and records them in the state table; a later apply that
// lowers the pool is picked up the same way.
package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

// reconcilerWait bounds how long a check waits for the replica's next convergence passes (one per
// second here): a pass that launches or terminates takes well under a second on the local stack.
const reconcilerWait = 30 * time.Second

// reconcilerPoolConfig is a runner class of the servicetest environment (its launch template, table
// subnets and pool queue) and a warm pool of it with one schedule of hot instances, both written to
// the environment's state table (which servicetest created, so no runnerpool_state_table).
func reconcilerPoolConfig(t *testing.T, env *servicetest.Env, class, pool string, hot int) string {
	subnets := slices.Sorted(maps.Keys(servicetest.TableSubnets))
	return providerConfig(t) + fmt.Sprintf(`
resource "runnerpool_runner_class" "pooled" {
  table              = %q
  name               = %q
  image              = %q
  cpu                = 2
  memory_mib         = 4096
  subnets            = ["%s"]
  launch_template_id = %q
  queue_url          = %q
}

resource "runnerpool_warm_pool" "pooled" {
  table        = runnerpool_runner_class.pooled.table
  name         = %q
  runner_class = runnerpool_runner_class.pooled.name

  schedule {
    name    = "default"
    hot     = %d
    stopped = 0
  }
}
`, env.Table, class, servicetest.Image, strings.Join(subnets, `", "`), env.LaunchTemplate, env.QueueURL, pool, hot)
}

// poolInstances are the instances of the environment's EC2 server tagged with the pool's name that
// are not terminated (nor shutting down), by id.
func poolInstances(env *servicetest.Env, pool string) map[string]ec2server.InstanceView {
	out := map[string]ec2server.InstanceView{}
	for _, v := range env.EC2.Instances() {
		if v.Tags[tags.Pool] == pool && v.State != "terminated" && v.State != "shutting-down" {
			out[v.ID] = v
		}
	}
	return out
}

// waitReconciled polls cond until it holds or reconcilerWait passes; the error then carries the
// last state cond described.
func waitReconciled(ctx context.Context, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(reconcilerWait)
	for {
		ok, state := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s, still waiting for %s: %s", reconcilerWait, what, state)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (%s)", what, ctx.Err(), state)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestAccWarmPoolPickedUpByReconciler: a replica runs with warm pools enabled (pool job queue,
// webhook secret) and converges every second. Terraform applies a runner class and a warm pool of
// 2 hot instances to its state table; the replica's next passes launch 2 instances from the class's
// launch template, tagged with the deployment, the runner class and the pool, and record them in
// the pool (warming: the simulated agents send no UD_OK). Lowering the pool to 0 hot with a second
// apply gets both terminated and their records out of the pool, with nothing launched instead.
func TestAccWarmPoolPickedUpByReconciler(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	env.Start(t, "a", map[string]string{
		// Runner classes come from the state table, as the provider writes them.
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "",
		"RUNNERPOOL_CONVERGE_SCHEDULE":   "@every 1s",
	})
	class, pool := uniqueName(t, "pooled"), uniqueName(t, "warm")

	// The pool's live records, by id, and a description of them for failures.
	records := func() (map[string]store.Instance, string) {
		recs, err := env.Store.ByPool(ctx, pool)
		if err != nil {
			return nil, fmt.Sprintf("ByPool: %v", err)
		}
		out := map[string]store.Instance{}
		var desc []string
		for _, r := range recs {
			out[r.ID] = r
			desc = append(desc, servicetest.Describe(r))
		}
		return out, fmt.Sprintf("records %v", desc)
	}
	var launched []string // the instances of the first step
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             itemGone(t, env.Table, store.ConfigWarmPool, pool),
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					if n := len(poolInstances(env, pool)); n != 0 {
						t.Fatalf("%d instances of pool %s before the apply", n, pool)
					}
				},
				Config: reconcilerPoolConfig(t, env, class, pool, 2),
				Check: func(*terraform.State) error {
					err := waitReconciled(ctx, "2 instances of the pool in EC2 and in the table", func() (bool, string) {
						insts := poolInstances(env, pool)
						recs, desc := records()
						ids := slices.Sorted(maps.Keys(insts))
						return len(insts) == 2 && slices.Equal(ids, slices.Sorted(maps.Keys(recs))),
							fmt.Sprintf("EC2 instances %v, %s", ids, desc)
					})
					if err != nil {
						return err
					}
					insts := poolInstances(env, pool)
					recs, _ := records()
					for id, v := range insts {
						rec := recs[id]
						if v.LaunchTemplateID != env.LaunchTemplate || v.Tags[tags.Deployment] != servicetest.Deployment || v.Tags[tags.RunnerClass] != class {
							return fmt.Errorf("instance %s: launch template %q, tags %v: want %s, deployment %s, runner class %s",
								id, v.LaunchTemplateID, v.Tags, env.LaunchTemplate, servicetest.Deployment, class)
						}
						if _, ok := servicetest.TableSubnets[v.SubnetID]; !ok {
							return fmt.Errorf("instance %s in subnet %s, want one of the runner class's", id, v.SubnetID)
						}
						if rec.State != store.StateWarming && rec.State != store.StateReady {
							return fmt.Errorf("record %s: want warming or ready", servicetest.Describe(rec))
						}
						if rec.RunnerClass != class || rec.Pool != pool || rec.RunID != "" || rec.SpecHash != v.Tags[tags.SpecHash] {
							return fmt.Errorf("record %+v of instance tagged %v: want runner class %s, pool %s, no run, the instance's spec hash",
								rec, v.Tags, class, pool)
						}
					}
					launched = slices.Sorted(maps.Keys(insts))
					return nil
				},
			},
			{
				Config: reconcilerPoolConfig(t, env, class, pool, 0),
				Check: func(*terraform.State) error {
					err := waitReconciled(ctx, "the pool's instances terminated and out of the table", func() (bool, string) {
						insts := poolInstances(env, pool)
						recs, desc := records()
						return len(insts) == 0 && recs != nil && len(recs) == 0,
							fmt.Sprintf("EC2 instances %v, %s", slices.Sorted(maps.Keys(insts)), desc)
					})
					if err != nil {
						return err
					}
					for _, id := range launched {
						rec, err := env.Store.Get(ctx, id)
						if errors.Is(err, store.ErrNotFound) {
							continue
						}
						if err != nil || rec.State.Live() {
							return fmt.Errorf("record of %s after scale-in: %+v, %v: want it no longer live", id, rec, err)
						}
					}
					return nil
				},
			},
		},
	})
	if len(launched) != 2 {
		t.Errorf("instances of the first apply: %v, want 2", launched)
	}
	// No instance was lost on the way: each one EC2 knows is terminated or has a live record.
	env.Audit(t)
}
