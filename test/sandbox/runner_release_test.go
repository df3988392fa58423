package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerrelease"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
)

// releaseWorld is a sandbox whose instances run (and whose records say) the compiled default
// runner, with a provisioner for it and the deployment's release cache.
type releaseWorld struct {
	sb    *sandbox.Sandbox
	prov  *provision.Provisioner
	cache *runnerrelease.Cache
}

func newReleaseWorld(t *testing.T) *releaseWorld {
	t.Helper()
	sb := start(t, sandbox.Options{RunnerVersion: func(ec2server.RuntimeInstance) string { return runnerversion.Default.Version }})
	cp := sb.Components(sandbox.ComponentOptions{})
	cfg := cp.Config
	rc := cfg.RunnerClasses[sandbox.RunnerClass]
	rc.RunnerVersion = runnerversion.Default.Version
	cfg.RunnerClasses = map[string]runnerclass.Resolved{sandbox.RunnerClass: rc}
	prov := provision.New(sb.Store, cp.Claimer, cp.Registrar, cp.Fleet, sb.EC2, cfg, provision.Options{PollInterval: 50 * time.Millisecond, Logger: sb.Log})
	cache := runnerrelease.New(sb.GitHub, sb.Store, runnerrelease.Options{Scope: sandbox.Scope, Every: time.Nanosecond, Logger: sb.Log})
	return &releaseWorld{sb: sb, prov: prov, cache: cache}
}

// serve provisions one runner for a new run and runs a job on it; it returns the instance.
func (w *releaseWorld) serve(t *testing.T) store.Instance {
	t.Helper()
	run := newRun()
	res, err := w.prov.Provision(t.Context(), request(run))
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision = %+v, %v", res, err)
	}
	runJob(t, w.sb, res.Label)
	return record(t, w.sb, res.Runners[0].InstanceID)
}

// waitOutdated waits for the agent of id to report its runner outdated.
func (w *releaseWorld) waitOutdated(t *testing.T, id string) {
	t.Helper()
	waitFor(t, "the agent of "+id+" to report its runner outdated", 60*time.Second, func() bool {
		sig, err := w.sb.Store.LastSignal(context.Background(), id)
		return err == nil && sig.Signal == store.SignalRunnerOutdated
	})
}

// A runner release published 30 days ago less a few seconds, while a run's runner serves jobs:
// the reconciler reads its published_at, so the older instances are due at once (the upgrade lag
// counts from publication, not from when it was first seen); when the 30 days pass GitHub stops
// giving the runner jobs, its agent reports it outdated (exit code 7), and the instance is never
// pooled again. Fails on the code before: the release counted as published when first seen.
func TestRunnerReleaseCrossesTheThirtyDayRuleMidRun(t *testing.T) {
	t.Parallel()
	w := newReleaseWorld(t)
	in := w.serve(t)
	published := time.Now().Add(-runnerversion.AssignmentWindow + 5*time.Second)
	w.sb.Stack.GitHub.PublishRunnerRelease(runnerversion.Release{Version: "2.337.0", Published: published})
	rel, err := w.cache.Refresh(t.Context())
	if err != nil || rel.Version != "2.337.0" || !rel.Published.Equal(published.UTC().Truncate(time.Second)) {
		t.Fatalf("Refresh = %+v, %v; want 2.337.0 published %s", rel, err, published)
	}
	idle := in
	idle.State, idle.RunID = store.StateIdle, ""
	if why := w.cache.Due(idle, runnerversion.DefaultLag, time.Now()); why == "" {
		t.Error("an idle 2.336.0 instance is not due 30 days after 2.337.0's publication")
	}
	w.waitOutdated(t, in.ID)
}

// A security release arrives while two runs' runners serve: GitHub refuses them at once, both
// agents report it, and the leader's check makes the current release due at once for every older
// instance; the report of the first run alone (as one forged report would be) does not.
//
// Both runs are served before the release is published: a run provisioned after it may see its
// registration wait end on the outdated report, and that provision is (rightly) unsuccessful and
// terminates its instance, which then holds no run to count.
func TestSecurityReleaseArrives(t *testing.T) {
	t.Parallel()
	w := newReleaseWorld(t)
	a := w.serve(t)
	b := w.serve(t)
	if _, err := w.cache.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.sb.Stack.GitHub.PublishRunnerRelease(runnerversion.Release{Version: "2.400.0", Security: true})
	w.waitOutdated(t, a.ID)
	w.waitOutdated(t, b.ID)
	if _, err := w.cache.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	live, err := w.sb.Store.LiveBrief(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var onlyA []store.Instance
	for _, rec := range live {
		if rec.ID == a.ID {
			onlyA = append(onlyA, rec)
		}
	}
	if ids, err := w.cache.CheckOutdated(t.Context(), w.sb.Store, onlyA); err != nil || len(ids) != 1 {
		t.Fatalf("CheckOutdated with one run's report = %v, %v", ids, err)
	}
	idle := store.Instance{ID: "i-idle", State: store.StateIdle, RunnerVersion: runnerversion.Default.Version}
	if why := w.cache.Due(idle, runnerversion.DefaultLag, time.Now()); why != "" {
		t.Fatalf("one run's report made the release due: %s", why)
	}

	ids, err := w.cache.CheckOutdated(t.Context(), w.sb.Store, live)
	if err != nil || len(ids) != 2 {
		t.Fatalf("CheckOutdated with two runs' reports = %v, %v (instances %s, %s)", ids, err, a.ID, b.ID)
	}
	if cur, _ := w.cache.Current(); !cur.Security {
		t.Fatalf("current release %+v not marked a security release", cur)
	}
	if why := w.cache.Due(idle, runnerversion.DefaultLag, time.Now()); why == "" {
		t.Error("an idle 2.336.0 instance is not due after the security release")
	}
}
