package githubfake_test

import (
	"errors"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerversion"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// versionRefused reports whether err is the broker's RunnerVersionTooOld.
func versionRefused(err error) bool {
	var ae *githubfake.APIError
	return errors.As(err, &ae) && ae.StatusCode == 403 && ae.Kind == githubfake.ErrorKindRunnerVersionTooOld
}

// GitHub refuses to configure or register a runner below 2.329.0, by registration token or JIT config.
func TestRunnerBelowTheFloorIsNotRegistered(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{})
	gh, err := ghaccess.New(ghaccess.Config{APIURL: base, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	reg, err := gh.RegistrationToken(ctx, "acme/api")
	if err != nil {
		t.Fatal(err)
	}
	old := githubfake.RegisterOptions{URL: reg.URL, Token: reg.Token, Name: "r-old", Labels: []string{"x"}, Version: "2.319.0"}
	if _, err := githubfake.NewRunnerClient(base, nil).Register(ctx, old); !versionRefused(err) {
		t.Fatalf("registering 2.319.0 = %v, want 403 RunnerVersionTooOld", err)
	}
	jit, err := gh.GenerateJITConfig(ctx, "acme/api", "r-jit", []string{"x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := githubfake.NewRunnerClient(base, nil).Register(ctx, githubfake.RegisterOptions{JITConfig: jit.Encoded, Version: "2.328.9"}); !versionRefused(err) {
		t.Fatalf("JIT registration of 2.328.9 = %v, want 403 RunnerVersionTooOld", err)
	}
	ok := old
	ok.Version = runnerversion.Floor
	if _, err := githubfake.NewRunnerClient(base, nil).Register(ctx, ok); err != nil {
		t.Fatalf("registering %s: %v", runnerversion.Floor, err)
	}
	if rs := fake.Runners("acme", "api"); len(rs) != 2 || rs[1].Version != runnerversion.Floor {
		t.Errorf("runners = %+v, want the JIT one and r-old at %s", rs, runnerversion.Floor)
	}
}

// connectedRunner registers a runner of version on acme/api with label x and connects it.
func connectedRunner(t *testing.T, fake *githubfake.Server, base, name, version string) *githubfake.RunnerClient {
	t.Helper()
	gh, err := ghaccess.New(ghaccess.Config{APIURL: base, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := gh.RegistrationToken(t.Context(), "acme/api")
	if err != nil {
		t.Fatal(err)
	}
	rc := githubfake.NewRunnerClient(base, nil)
	if _, err := rc.Register(t.Context(), githubfake.RegisterOptions{URL: reg.URL, Token: reg.Token, Name: name, Labels: []string{"x"}, Version: version}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	return rc
}

// takesJob reports whether rc gets a queued job (completing it), or is refused for its version.
func takesJob(t *testing.T, fake *githubfake.Server, rc *githubfake.RunnerClient) bool {
	t.Helper()
	fake.QueueJob("acme", "api", 1, []string{"x"})
	job, err := rc.NextJob(t.Context(), 5*time.Second)
	switch {
	case versionRefused(err):
		return false
	case err != nil || job == nil:
		t.Fatalf("NextJob = %+v, %v", job, err)
	}
	if err := rc.Complete(t.Context(), job.ID, "success"); err != nil {
		t.Fatal(err)
	}
	return true
}

// A runner older than a release keeps receiving jobs for 30 days after its publication (on the
// fake's clock), then not; a runner on the new release does.
func TestRunnerBehindANewReleaseForMoreThan30DaysGetsNoJobs(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	fake, base := newFake(t, githubfake.Options{Now: clk.Now})
	old := connectedRunner(t, fake, base, "old", runnerversion.Default.Version)
	fake.PublishRunnerRelease(runnerversion.Release{Version: "2.340.0"})
	clk.Advance(29 * 24 * time.Hour)
	if !takesJob(t, fake, old) {
		t.Fatal("a runner 29 days behind was refused")
	}
	clk.Advance(2 * 24 * time.Hour)
	if takesJob(t, fake, old) {
		t.Fatal("a runner 31 days behind a release still got a job")
	}
	if j := fake.Jobs(); len(j) == 0 {
		t.Fatal("no jobs recorded")
	}
	current := connectedRunner(t, fake, base, "new", "2.340.0")
	fake.QueueJob("acme", "api", 2, []string{"x"}) // the refused job is still queued; a current runner takes both
	for range 2 {
		if job, err := current.NextJob(t.Context(), 5*time.Second); err != nil || job == nil {
			t.Fatalf("current runner NextJob = %+v, %v", job, err)
		} else if err := current.Complete(t.Context(), job.ID, "success"); err != nil {
			t.Fatal(err)
		}
	}
}

// A security release stops assignment to older runners at once.
func TestSecurityReleaseStopsAssignmentAtOnce(t *testing.T) {
	t.Parallel()
	fake, base := newFake(t, githubfake.Options{Now: (&clock{}).Now})
	rc := connectedRunner(t, fake, base, "r", runnerversion.Default.Version)
	if !takesJob(t, fake, rc) {
		t.Fatal("a current runner was refused")
	}
	fake.PublishRunnerRelease(runnerversion.Release{Version: "2.340.1", Security: true})
	if takesJob(t, fake, rc) {
		t.Fatal("a runner older than a security release got a job")
	}
}

// The downloads endpoints answer the newest release published, for an organisation and a
// repository, and the product's client reads version and checksums from them.
func TestRunnerDownloadsAnswerTheCurrentRelease(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	fake, base := newFake(t, githubfake.Options{Now: clk.Now})
	gh, err := ghaccess.New(ghaccess.Config{APIURL: base, Token: fake.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"acme", "acme/api"} {
		rel, err := gh.RunnerRelease(t.Context(), scope)
		if err != nil || rel.Version != runnerversion.Default.Version || rel.Linux[runnerversion.ArchX64] != runnerversion.Default.Linux[runnerversion.ArchX64] {
			t.Fatalf("RunnerRelease(%s) = %+v, %v; want the default release", scope, rel, err)
		}
	}
	pub := fake.PublishRunnerRelease(runnerversion.Release{Version: "2.341.0", Published: clk.Now().Add(time.Hour)})
	if rel, _ := gh.RunnerRelease(t.Context(), "acme"); rel.Version != runnerversion.Default.Version {
		t.Fatalf("a release not published yet is served: %+v", rel)
	}
	clk.Advance(2 * time.Hour)
	rel, err := gh.RunnerRelease(t.Context(), "acme/api")
	if err != nil || rel.Version != "2.341.0" || rel.Linux[runnerversion.ArchARM64].SHA256 != pub.Linux[runnerversion.ArchARM64].SHA256 {
		t.Fatalf("RunnerRelease = %+v, %v; want 2.341.0 as published", rel, err)
	}
}
