// Repository tests against DynamoDB Local (the shared local stack): versions, references, Load.
package declared

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// newRepo creates a state table of its own on the shared stack's DynamoDB Local.
func newRepo(t *testing.T) (*Repository, *store.Store) {
	t.Helper()
	st := stacktest.Shared(t)
	db := st.DynamoDB()
	table := stacktest.UniqueName(t, "config")
	if err := store.CreateTable(t.Context(), db, table); err != nil {
		t.Fatalf("creating table: %v", err)
	}
	s := store.New(db, table)
	return NewRepository(s), s
}

func TestRepositoryRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	repo, _ := newRepo(t)

	rc := validClass()
	v, err := repo.PutRunnerClass(ctx, rc, 0)
	if err != nil || v != 1 {
		t.Fatalf("PutRunnerClass = %d, %v; want version 1", v, err)
	}
	if _, err := repo.PutRunnerClass(ctx, rc, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	rc.CPU = 4
	if v, err = repo.PutRunnerClass(ctx, rc, 1); err != nil || v != 2 {
		t.Fatalf("update = %d, %v; want version 2", v, err)
	}
	if _, err := repo.PutRunnerClass(ctx, rc, 1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update with a stale version: %v, want ErrConflict", err)
	}
	got, gv, err := repo.GetRunnerClass(ctx, rc.Name)
	if err != nil || gv != 2 || got.CPU != 4 || got.MaxRuntime != rc.MaxRuntime || len(got.Subnets) != 2 {
		t.Fatalf("GetRunnerClass = %+v, %d, %v", got, gv, err)
	}

	p := validPool()
	p.RunnerClass = "missing"
	if _, err := repo.PutWarmPool(ctx, p, 0); !errors.Is(err, ErrUnknownRunnerClass) {
		t.Fatalf("pool of a missing class: %v, want ErrUnknownRunnerClass", err)
	}
	p = validPool()
	if _, err := repo.PutWarmPool(ctx, p, 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	bad := p
	bad.Schedules = append(bad.Schedules, schedule.Schedule{Name: "x", Hot: -1})
	if _, err := repo.PutWarmPool(ctx, bad, 1); err == nil || !strings.Contains(err.Error(), "schedules[2].hot") {
		t.Fatalf("invalid pool written: %v", err)
	}
	if err := repo.DeleteRunnerClass(ctx, rc.Name); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), `["small-x64"]`) {
		t.Fatalf("deleting a class in use: %v, want ErrInUse naming the pool", err)
	}

	snap, err := repo.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(snap.Problems) != 0 || len(snap.Pools()) != 1 || snap.RunnerClasses[rc.Name].CPU != 4 || snap.Versions[store.ConfigRunnerClass][rc.Name] != 2 {
		t.Fatalf("snapshot = %+v", snap)
	}
	if h, ok := snap.SpecHash(p.Name); !ok || h != SpecHash(rc, p) {
		t.Errorf("snapshot SpecHash = %q %v, want %q", h, ok, SpecHash(rc, p))
	}
	// Friday 2025-03-28 23:00 in Paris: nights.
	if tg, err := snap.Target(p.Name, time.Date(2025, 3, 28, 22, 0, 0, 0, time.UTC)); err != nil || tg.Schedule != "nights" || tg.Stopped != 2 {
		t.Errorf("Target = %+v, %v; want nights", tg, err)
	}

	if err := repo.DeleteWarmPool(ctx, p.Name); err != nil {
		t.Fatalf("DeleteWarmPool: %v", err)
	}
	if err := repo.DeleteWarmPool(ctx, p.Name); err != nil {
		t.Fatalf("deleting a missing pool: %v", err)
	}
	if _, _, err := repo.GetWarmPool(ctx, p.Name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetWarmPool after delete: %v, want ErrNotFound", err)
	}
	snap, err = repo.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A destroyed pool scales to zero.
	if tg, err := snap.Target(p.Name, time.Now()); err != nil || tg.Hot != 0 || tg.Stopped != 0 || tg.Schedule != "" {
		t.Errorf("Target of a destroyed pool = %+v, %v; want zero", tg, err)
	}
	if err := repo.DeleteRunnerClass(ctx, rc.Name); err != nil {
		t.Fatalf("DeleteRunnerClass: %v", err)
	}
}

func TestLoadReportsBadItemsAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	repo, st := newRepo(t)

	good := validClass()
	if _, err := repo.PutRunnerClass(ctx, good, 0); err != nil {
		t.Fatal(err)
	}
	goodPool := validPool()
	if _, err := repo.PutWarmPool(ctx, goodPool, 0); err != nil {
		t.Fatal(err)
	}
	// Items written behind the repository's back: a field this version does not know, a pool whose
	// class is gone, and a pool of the broken class.
	raw := func(kind store.ConfigKind, name, spec string) {
		t.Helper()
		if _, err := st.PutConfig(ctx, store.ConfigItem{Kind: kind, Name: name, Spec: []byte(spec)}, -1); err != nil {
			t.Fatal(err)
		}
	}
	raw(store.ConfigRunnerClass, "gpu", `{"name":"gpu","gpus":1,"requires":["gpus"]}`)
	raw(store.ConfigWarmPool, "orphan", `{"name":"orphan","runner_class":"gone","timezone":"UTC","schedules":[{"name":"default","hot":1,"stopped":0}]}`)
	raw(store.ConfigWarmPool, "gpu-pool", `{"name":"gpu-pool","runner_class":"gpu","timezone":"UTC","schedules":[]}`)
	raw(store.ConfigWarmPool, "newer", `{"name":"newer","runner_class":"small-x64","timezone":"UTC","schedules":[],"spot_hot":true,"requires":["spot_hot"]}`)

	snap, err := repo.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if _, ok := snap.WarmPools[goodPool.Name]; !ok || len(snap.WarmPools) != 1 || len(snap.RunnerClasses) != 1 {
		t.Fatalf("valid items not loaded: %+v", snap)
	}
	want := []string{
		`runner class "gpu": decoding its spec: the spec requires fields this reconciler does not know: ["gpus"] (upgrade the reconciler)`,
		`warm pool "gpu-pool": its runner class "gpu" is invalid`,
		`warm pool "newer": decoding its spec: the spec requires fields this reconciler does not know: ["spot_hot"] (upgrade the reconciler)`,
		`warm pool "orphan": runner class "gone": unknown runner class`,
	}
	if len(snap.Problems) != len(want) {
		t.Fatalf("Problems = %v, want %d", snap.Problems, len(want))
	}
	for i, w := range want {
		if snap.Problems[i].Error() != w {
			t.Errorf("problem %d = %q, want %q", i, snap.Problems[i].Error(), w)
		}
	}
	// A pool that is there but unreadable must be left alone, not emptied.
	if _, err := snap.Target("newer", time.Now()); err == nil || !strings.Contains(err.Error(), "spot_hot") {
		t.Errorf("Target of an unreadable pool: %v, want its problem", err)
	}
	if _, _, err := repo.GetRunnerClass(ctx, "gpu"); err == nil || !strings.Contains(err.Error(), `runner class "gpu"`) {
		t.Errorf("GetRunnerClass of a bad item: %v", err)
	}
}
