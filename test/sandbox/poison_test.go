package sandbox_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// poisonedPool is the warm pool whose index partition the job poisons.
const poisonedPool = "poisoned"

// poisonCase is one kind of item a job holding the instance role writes to stop the deployment.
type poisonCase struct {
	name  string
	items []map[string]types.AttributeValue
}

// poisoningItems are every poisoning item of issue 18 for the agent partition of instance x: index
// keys (by_state, by_pool), another repository's run key in idx_run, an item no decoder reads, a
// huge item, and thousands of items.
func poisoningItems(x, victimRun string) []poisonCase {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }
	item := func(sk string, attrs map[string]types.AttributeValue) map[string]types.AttributeValue {
		it := map[string]types.AttributeValue{"pk": s(store.AgentPK(x)), "sk": s(sk)}
		maps.Copy(it, attrs)
		return it
	}
	var many []map[string]types.AttributeValue
	for i := range 2000 {
		state := []string{"idle", "ready", "stopped", "created", "terminating"}[i%5]
		many = append(many, item(fmt.Sprintf("MANY#%04d", i), map[string]types.AttributeValue{"idx_state": s(state), "threshold": n(i + 1)}))
	}
	return []poisonCase{
		{"index keys: an idle record of a warm pool, expired", []map[string]types.AttributeValue{item("STATE", map[string]types.AttributeValue{
			"idx_state": s("idle"), "threshold": n(1), "idx_pool": s(poisonedPool), "id": s("i-forged"), "state": s("idle"),
			"idx_fit": s(store.FitKey(sandbox.RunnerClass, sandbox.Scope)),
		})}},
		{"another repository's run key in idx_run", []map[string]types.AttributeValue{item("RUN", map[string]types.AttributeValue{
			"idx_run": s(victimRun), "id": s(x), "state": s("running"), "run_id": s(victimRun),
		})}},
		{"an item no decoder reads", []map[string]types.AttributeValue{item("BAD", map[string]types.AttributeValue{
			"idx_state": s("running"), "threshold": n(3), "version": s("not a number"),
		})}},
		{"a huge item", []map[string]types.AttributeValue{item("HUGE", map[string]types.AttributeValue{
			"idx_state": s("idle"), "threshold": n(2), "detail": s(strings.Repeat("x", 390_000)),
		})}},
		{"thousands of items", many},
	}
}

// writePoison writes the items with db, 8 at a time, and returns the errors met.
func writePoison(ctx context.Context, db *dynamodb.Client, table string, items []map[string]types.AttributeValue) []error {
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: it})
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

// TestIndexPoisoningStopsNothing plays the job of issue 18: with exactly the instance role's
// permissions it writes every poisoning item it can think of. With the attribute condition of
// iam.tf modelled, every write is refused. Without it (a deployment whose role lacks it), the items
// land in the indexes, and still: the dashboard's listing, the second look of a provision, another
// repository's release (whose run key the job planted), warm-pool convergence over the poisoned
// pool and refresh all go on working; the invariant checker reports the items and refresh deletes
// them.
func TestIndexPoisoningStopsNothing(t *testing.T) {
	t.Parallel()
	sb := start(t, sandbox.Options{})
	_, cp := attackedControlPlane(t, sb)
	ctx := t.Context()

	// A pooled instance of A (for the second look), B's running run (the victim of idx_run) and A's
	// run whose job is the attacker.
	resP, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil || len(resP.Runners) != 1 {
		t.Fatalf("provision A1: %+v, %v", resP, err)
	}
	pooled := resP.Runners[0].InstanceID
	resA, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil || len(resA.Runners) != 1 || resA.Runners[0].InstanceID == pooled {
		t.Fatalf("provision A2: %+v, %v; want a new instance", resA, err)
	}
	if rep, err := cp.Releaser.Release(ctx, resP.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("release A1: %+v, %v", rep, err)
	}
	resB, err := cp.Provisioner.Provision(ctx, requestFor("5151", otherRepo, newRun()))
	if err != nil || len(resB.Runners) != 1 || resB.Runners[0].InstanceID == pooled {
		t.Fatalf("provision B: %+v, %v", resB, err)
	}
	x := resA.Runners[0].InstanceID

	cases := poisoningItems(x, resB.RunKey)
	total := 0
	bound, unbound := instanceRoleDB(sb, x, true), instanceRoleDB(sb, x, false)
	for _, c := range cases {
		// With the condition: refused (the first items of the thousands are enough to show it).
		for _, err := range writePoison(ctx, bound, sb.Table, c.items[:min(len(c.items), 20)]) {
			if !denied(err) {
				t.Fatalf("%s with the attribute condition: %v, want AccessDenied", c.name, err)
			}
		}
		// Without it: written.
		for _, err := range writePoison(ctx, unbound, sb.Table, c.items) {
			if err != nil {
				t.Fatalf("%s without the attribute condition: %v", c.name, err)
			}
		}
		total += len(c.items)
	}

	inv, err := invariant.Check(ctx, sb.Store, sb.EC2, invariant.Options{DeploymentID: sandbox.DeploymentID})
	if err != nil {
		t.Fatalf("invariant check over the poisoned table: %v", err)
	}
	if n := inv.Count(invariant.RuleForeign); n != total {
		t.Errorf("invariant rule foreign: %d violations, want %d", n, total)
	}

	// The dashboard's, the metrics' and refresh's listing.
	live, err := sb.Store.Live(ctx)
	if err != nil {
		t.Fatalf("listing live records (dashboard): %v", err)
	}
	ids := make([]string, 0, len(live))
	for _, rec := range live {
		ids = append(ids, rec.ID)
	}
	for _, id := range []string{pooled, resB.Runners[0].InstanceID, x} {
		if !slices.Contains(ids, id) {
			t.Errorf("live records %v lack %s", ids, id)
		}
	}
	if slices.Contains(ids, "i-forged") {
		t.Errorf("live records include the forged i-forged")
	}

	// The second look: A's next provision reuses the pooled instance.
	resA3, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil || len(resA3.Runners) != 1 || resA3.Runners[0].InstanceID != pooled || resA3.Runners[0].Source != "reused" {
		t.Errorf("provision A3 over the poisoned indexes = %+v, %v; want %s reused", resA3, err, pooled)
	}
	// Another repository's release, whose run key the job planted in idx_run.
	if rep, err := cp.Releaser.Release(ctx, resB.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 || len(rep.Instances) != 1 {
		t.Errorf("release of B over the poisoned by_run = %+v, %v; want its one instance pooled", rep, err)
	}
	// Convergence of the poisoned warm pool.
	conv := poisonedConverger(t, sb)
	crep, err := conv.Pass(ctx)
	if pr, _ := crep.Pool(poisonedPool); err != nil || pr.Err != nil || len(pr.Created) != 1 {
		t.Errorf("convergence of the poisoned pool = %+v, %v; want one instance created", pr, err)
	}

	// Refresh lists, sweeps and deletes the items.
	rrep, err := cp.Refresher.Run(ctx)
	if err != nil {
		t.Errorf("refresh over the poisoned table: %v", err)
	}
	if len(rrep.Agents.Foreign) != total {
		t.Errorf("refresh deleted %d foreign items, want %d", len(rrep.Agents.Foreign), total)
	}
	inv, err = invariant.Check(ctx, sb.Store, sb.EC2, invariant.Options{DeploymentID: sandbox.DeploymentID})
	if err != nil || inv.Count(invariant.RuleForeign) != 0 {
		t.Errorf("invariant after refresh: %v, %d foreign; want none", err, inv.Count(invariant.RuleForeign))
	}
}

// poisonedConverger converges one warm pool of one hot instance, named as the poisoning items' idx_pool.
func poisonedConverger(t *testing.T, sb *sandbox.Sandbox) *poolsize.Converger {
	t.Helper()
	targets := func(context.Context, time.Time) ([]warmpool.PoolSpec, error) {
		return []warmpool.PoolSpec{{
			Name: poisonedPool, Schedule: "always", Hot: 1, SpecHash: "poison-v1", Scope: sandbox.Scope,
			Class: runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: sandbox.RunnerClass, LaunchTemplateID: sb.LaunchTemplate, Subnets: slices.Sorted(maps.Keys(sandbox.Subnets)), InstanceTypes: []string{"c*", "m*"}, CPU: 2, MemoryMiB: 4096}, TemplateVersion: "$Latest", Queue: sb.Queue},
		}}, nil
	}
	c, err := poolsize.NewConverger(sb.Store, sb.EC2, fleet.New(sb.EC2, fleet.Options{Logger: sb.Log}), targets,
		poolsize.Options{DeploymentID: sandbox.DeploymentID, Logger: sb.Log})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
