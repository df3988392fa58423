package warmpool_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/launchtemplate"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// releasedVersions are launch template versions whose user data installs the runner version held
// (the class's version renders the current release: launchtemplate's TestClassVersionInstallsTheCurrentRelease).
type releasedVersions struct {
	*launchtemplate.Versions
	version *atomic.Value
}

func (v releasedVersions) Runner(declared.RunnerClass, string) string {
	return v.version.Load().(string)
}

// A new runner release changes every pool's spec hash: the pool rolls over onto instances launched
// from the class's new launch template version, which installs it.
func TestConvergeRunnerReleaseRollout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	repo := declared.NewRepository(e.st)
	rc, p := e.runnerClass(), smallX64()
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.PutWarmPool(ctx, p, 0); err != nil {
		t.Fatal(err)
	}
	var version atomic.Value
	version.Store("2.340.0")
	targets := warmpool.ConfigTargets(repo, warmpool.ConfigOptions{
		Queue: func(url string) *pool.Queue { return pool.NewQueue(e.sqs, url) }, Scope: "acme",
		Versions: releasedVersions{launchtemplate.New(e.ec2, launchtemplate.Options{}), &version},
	})
	c := e.converger(t, targets, poolsize.Options{})
	e.clock.Set(paris(t, "2025-01-15 10:00"))
	pass(t, c)
	e.warmUp(t, "small-x64", nil, nil)
	if pr := poolReport(t, pass(t, c), "small-x64"); pr.Ready != 1 || pr.Stopped != 2 || len(pr.Outdated) != 0 {
		t.Fatalf("before the release: %+v", pr)
	}
	version.Store("2.341.0")
	e.clock.Add(time.Minute)
	pr := poolReport(t, pass(t, c), "small-x64")
	if len(pr.Outdated) != 3 || len(pr.Created) != 3 {
		t.Fatalf("after the release: %+v; want the 3 instances of 2.340.0 outdated and 3 created", pr)
	}
	want := declared.SpecHashWithRunner(declared.SpecHash(rc, p), "2.341.0")
	for _, recs := range e.records(t, "small-x64") {
		for _, r := range recs {
			if r.SpecHash != want {
				t.Errorf("instance %s has spec hash %s, want %s", r.ID, r.SpecHash, want)
			}
		}
	}
}
