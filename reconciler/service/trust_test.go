// Trust levels on the step path: a docker class keeps images across runs, so a repository's pull
// request runs and its push runs never share an instance (issue #28, item 7).
package service_test

import (
	"net/http"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// TestDockerClassKeepsPullRequestsApart: with a docker runner class (its instances keep Docker
// images), through the API with OIDC tokens whose event_name differs: a pull_request run's
// released instance is pooled under the repository's untrusted scope; a push run of the same
// repository does not get it (a created instance instead), and its own released instance is
// pooled under the repository's scope; the next pull_request run reuses the first instance and
// the next push run the second.
func TestDockerClassKeepsPullRequestsApart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{})
	r := env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE":  "",
		"RUNNERPOOL_DEFAULT_RUNNER_CLASS": servicetest.RunnerClass,
		"RUNNERPOOL_RESOURCE_CLASSES":     "small=2:4096",
	})
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	rc.JobAccess = declared.JobAccessDocker
	rc.LaunchTemplateID = bootstrapTemplate(t, env, "docker-runner") // user data the class's job access is added to
	if _, err := declared.NewRepository(env.Store).PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatalf("PutRunnerClass: %v", err)
	}

	// run provisions one runner for a run started by event and releases it; it returns the
	// runner's instance and source.
	run := func(runID, event string) (string, string) {
		t.Helper()
		tok := env.Token(t, runID, map[string]any{"event_name": event})
		code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, tok, provisionBody(1))
		if code != http.StatusOK {
			t.Fatalf("provision of %s run %s: %d %s", event, runID, code, body)
		}
		prov := servicetest.Decode[apiv1.ProvisionResponse](t, body)
		if len(prov.Runners) != 1 {
			t.Fatalf("provision of %s run %s: %+v, want one runner", event, runID, prov)
		}
		code, body = servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathRelease, tok, apiv1.ReleaseRequest{IdleTimeSeconds: 600})
		if rel := servicetest.Decode[apiv1.ReleaseResponse](t, body); code != http.StatusOK || rel.Counts["pooled"] != 1 {
			t.Fatalf("release of %s run %s: %d %s, want 1 pooled", event, runID, code, body)
		}
		return prov.Runners[0].InstanceID, prov.Runners[0].Source
	}
	scopeOf := func(id string) string {
		t.Helper()
		rec, err := env.Store.Get(ctx, id)
		if err != nil || rec.State != store.StateIdle {
			t.Fatalf("record of %s: %s, %v; want idle", id, rec.State, err)
		}
		return rec.Scope
	}

	pr, src := run("6001", "pull_request")
	if src != apiv1.SourceCreated {
		t.Fatalf("first pull request run: source %s, want created", src)
	}
	if got, want := scopeOf(pr), servicetest.Repository+":untrusted"; got != want {
		t.Errorf("instance released by a pull request run pooled under %q, want %q", got, want)
	}

	push, src := run("6002", "push")
	if push == pr || src != apiv1.SourceCreated {
		t.Fatalf("push run got %s (%s), want a created instance, never the pull request's %s", push, src, pr)
	}
	if got := scopeOf(push); got != servicetest.Repository {
		t.Errorf("instance released by a push run pooled under %q, want %q", got, servicetest.Repository)
	}

	if again, src := run("6003", "pull_request"); again != pr || src != apiv1.SourceReused {
		t.Errorf("next pull request run got %s (%s), want %s reused", again, src, pr)
	}
	if again, src := run("6004", "push"); again != push || src != apiv1.SourceReused {
		t.Errorf("next push run got %s (%s), want %s reused", again, src, push)
	}
	env.Audit(t)
}
