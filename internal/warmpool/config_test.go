// Convergence driven by the real configuration (runner classes and warm pools as config items of
// the state table, schedules evaluated in the pool's timezone): a schedule boundary at 22:00 in
// Europe/Paris, and a runner class change that rolls every instance.
package warmpool_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

func (e *env) runnerClass() declared.RunnerClass {
	return declared.RunnerClass{
		Name: runnerClass, Image: "ami-0123456789abcdef0", CPU: 2, MemoryMiB: 4096, InstanceTypes: []string{"c6i.*"},
		Volume:     declared.Volume{Type: declared.VolumeGP3, SizeGiB: 30, IOPS: 3000, ThroughputMiBps: 125},
		UsageClass: declared.UsageOnDemand, Subnets: []string{subnetA, subnetB},
		MaxRuntime: declared.Duration(time.Hour), IdleTime: declared.Duration(10 * time.Minute),
		LaunchTemplateID: e.lt, QueueURL: e.queue.URL(),
	}
}

// The seed's example pool: one hot and two stopped by day, none hot and one stopped at night.
func smallX64() declared.WarmPool {
	return declared.WarmPool{Name: "small-x64", RunnerClass: runnerClass, Timezone: "Europe/Paris", Schedules: []schedule.Schedule{
		{Name: "default", Hot: 1, Stopped: 2},
		{Name: "nights", Match: &schedule.Match{Times: []schedule.TimeRange{{Start: "22:00", End: "06:00"}}}, Hot: 0, Stopped: 1},
	}}
}

func (e *env) configTargets() warmpool.Targets {
	return warmpool.ConfigTargets(declared.NewRepository(e.st), warmpool.ConfigOptions{
		Queue: func(url string) *pool.Queue { return pool.NewQueue(e.sqs, url) }, Scope: "acme",
		Versions: launchtemplate.New(e.ec2, launchtemplate.Options{}),
	})
}

func paris(t testing.TB, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func TestConvergeScheduleBoundary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	repo := declared.NewRepository(e.st)
	if _, err := repo.PutRunnerClass(ctx, e.runnerClass(), 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	if _, err := repo.PutWarmPool(ctx, smallX64(), 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	c := e.converger(t, e.configTargets(), poolsize.Options{})

	e.clock.Set(paris(t, "2025-01-15 21:58"))
	pass(t, c)
	e.warmUp(t, "small-x64", nil, nil)
	e.clock.Set(paris(t, "2025-01-15 21:59"))
	pr := poolReport(t, pass(t, c), "small-x64")
	if pr.Schedule != "default" || pr.Ready != 1 || pr.Stopped != 2 {
		t.Fatalf("21:59: %+v; want the default schedule, 1 hot and 2 stopped", pr)
	}
	hot := pr.Readied

	// 22:00 in Paris: nights, hot 1 -> 0 and stopped 2 -> 1. The excess goes, nothing is created.
	e.clock.Set(paris(t, "2025-01-15 22:00"))
	pr = poolReport(t, pass(t, c), "small-x64")
	if pr.Schedule != "nights" || pr.TargetHot != 0 || pr.TargetStopped != 1 || pr.Ready != 0 || pr.Stopped != 1 ||
		len(pr.Excess) != 2 || !slices.Contains(pr.Excess, hot[0]) || len(pr.Created) != 0 {
		t.Fatalf("22:00: %+v; want nights with the hot one and one stopped terminated", pr)
	}
	left := e.records(t, "small-x64")
	if len(left) != 1 || len(left[store.StateStopped]) != 1 || e.ec2State(t, left[store.StateStopped][0].ID) != "stopped" {
		t.Fatalf("22:00 records: %v", left)
	}

	// 06:00 the next morning: back to the default, the missing two are launched.
	e.clock.Set(paris(t, "2025-01-16 06:00"))
	pr = poolReport(t, pass(t, c), "small-x64")
	if pr.Schedule != "default" || len(pr.Created) != 2 || pr.Stopped != 1 || pr.Warming != 2 {
		t.Fatalf("06:00: %+v; want default with 2 created", pr)
	}
}

func TestConvergeRunnerClassRollout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	repo := declared.NewRepository(e.st)
	rc := e.runnerClass()
	rcVersion, err := repo.PutRunnerClass(ctx, rc, 0)
	if err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	p := smallX64()
	if _, err := repo.PutWarmPool(ctx, p, 0); err != nil {
		t.Fatalf("PutWarmPool: %v", err)
	}
	c := e.converger(t, e.configTargets(), poolsize.Options{})
	e.clock.Set(paris(t, "2025-01-15 10:00"))
	pass(t, c)
	e.warmUp(t, "small-x64", nil, nil)
	pr := poolReport(t, pass(t, c), "small-x64")
	if pr.Ready != 1 || pr.Stopped != 2 {
		t.Fatalf("before the rollout: %+v", pr)
	}
	oldHash := declared.SpecHash(rc, p)

	// A new image: every instance is outdated, terminated at once, and replaced.
	rc.Image = "ami-0fedcba9876543210"
	if _, err := repo.PutRunnerClass(ctx, rc, rcVersion); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}
	newHash := declared.SpecHash(rc, p)
	e.clock.Add(time.Minute)
	pr = poolReport(t, pass(t, c), "small-x64")
	if len(pr.Outdated) != 3 || len(pr.Created) != 3 || pr.Ready+pr.Stopped != 0 {
		t.Fatalf("rollout pass: %+v; want 3 outdated terminated and 3 created", pr)
	}
	for _, id := range pr.Outdated {
		if st := e.ec2State(t, id); st != "terminated" {
			t.Errorf("outdated %s is %s in EC2", id, st)
		}
	}
	e.warmUp(t, "small-x64", nil, nil)
	e.clock.Add(time.Minute)
	pr = poolReport(t, pass(t, c), "small-x64")
	if pr.Ready != 1 || pr.Stopped != 2 {
		t.Fatalf("after the rollout: %+v", pr)
	}
	for _, recs := range e.records(t, "small-x64") {
		for _, r := range recs {
			v, _ := e.ec2srv.Instance(r.ID)
			if r.SpecHash != newHash || v.Tags[tags.SpecHash] != newHash || newHash == oldHash {
				t.Errorf("instance %s: record hash %s, tag %s; want %s", r.ID, r.SpecHash, v.Tags[tags.SpecHash], newHash)
			}
		}
	}
}

// The catalog answers from the configuration: a configured pool, a pool whose item cannot be used
// (known, but left alone), and an unknown one.
func TestCatalog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	repo := declared.NewRepository(e.st)
	if _, err := repo.PutRunnerClass(ctx, e.runnerClass(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.PutWarmPool(ctx, smallX64(), 0); err != nil {
		t.Fatal(err)
	}
	// A newer provider's pool: a field this reconciler does not know is read past (tolerant
	// decoding, docs/upgrading.md), unless the writer lists it in "requires".
	newer, _ := json.Marshal(map[string]any{"name": "newer", "runner_class": runnerClass, "timezone": "UTC", "schedules": []any{}, "surge": 3})
	if _, err := e.st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "newer", Spec: newer}, 0); err != nil {
		t.Fatal(err)
	}
	bad, _ := json.Marshal(map[string]any{"name": "future", "runner_class": runnerClass, "timezone": "UTC", "schedules": []any{}, "surge": 3, "requires": []string{"surge"}})
	if _, err := e.st.PutConfig(ctx, store.ConfigItem{Kind: store.ConfigWarmPool, Name: "future", Spec: bad}, 0); err != nil {
		t.Fatal(err)
	}
	cat := warmpool.NewCatalog(e.configTargets(), time.Minute, e.clock.Now)
	spec, ok, err := cat.Lookup(ctx, "small-x64")
	if err != nil || !ok || spec.Err != nil || spec.Hot != 1 || spec.Stopped != 2 || spec.Class.Queue == nil ||
		spec.Class.IdleTime.Std() != 10*time.Minute || spec.SpecHash != declared.SpecHash(e.runnerClass(), smallX64()) {
		t.Fatalf("Lookup(small-x64) = %+v, %v, %v", spec, ok, err)
	}
	if spec, ok, err := cat.Lookup(ctx, "newer"); err != nil || !ok || spec.Err != nil {
		t.Errorf("Lookup(newer) = %+v, %v, %v; want known without an error", spec, ok, err)
	}
	if spec, ok, err := cat.Lookup(ctx, "future"); err != nil || !ok || spec.Err == nil {
		t.Errorf("Lookup(future) = %+v, %v, %v; want known with an error", spec, ok, err)
	}
	for name, want := range map[string]bool{"small-x64": true, "newer": true, "future": true, "nope": false} {
		if got, err := cat.Known(ctx, name); err != nil || got != want {
			t.Errorf("Known(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
}

// TestWarmupFollowsTheClassBoot: a pool's instances have as long to warm up as their class's boot
// takes, by the rule a provision's class follows (launchtemplate.Versions.BootExtra): a stock
// image's boot installs packages (the apt lock wait and the install on top), a class's own
// registration_wait replaces what the image says. Before, every pool had the same warm-up timeout.
func TestWarmupFollowsTheClassBoot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		own   time.Duration
		extra time.Duration
	}{
		{"stock image", 0, declared.AptLockWait + declared.InstallAllowance},
		{"own registration wait", 10 * time.Minute, 10*time.Minute - declared.DefaultRegistrationWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := t.Context()
			repo := declared.NewRepository(e.st)
			rc := e.runnerClass()
			rc.RegistrationWait = declared.Duration(tc.own)
			if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
				t.Fatalf("PutRunnerClass: %v", err)
			}
			if _, err := repo.PutWarmPool(ctx, smallX64(), 0); err != nil {
				t.Fatalf("PutWarmPool: %v", err)
			}
			c := e.converger(t, e.configTargets(), poolsize.Options{})
			e.clock.Set(paris(t, "2025-01-15 10:00"))
			pass(t, c)
			warming := e.records(t, "small-x64")[store.StateWarming]
			if len(warming) == 0 {
				t.Fatal("no instance warming")
			}
			for _, r := range warming {
				if want := e.clock.Now().Add(warmpool.DefaultWarmupTimeout + tc.extra); !r.Threshold.Equal(want) {
					t.Errorf("warming threshold %s, want %s (warm-up timeout + %s)", r.Threshold, want, tc.extra)
				}
			}
		})
	}
}
