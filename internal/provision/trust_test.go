package provision_test

import (
	"slices"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// TestPullRequestRunOfADockerClass: a docker class keeps images, so a pull request's run claims
// from its repository's untrusted scope (pool.RunScope): an instance a push run released (pooled
// under the repository's scope) is left alone, while the repository's own warm instances, which
// never ran a job, serve it (hot reused, stopped started) although they are pooled under the
// repository's scope too.
func TestPullRequestRunOfADockerClass(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{warm: true, jobAccess: declared.JobAccessDocker})
	pushed := e.idle(t, poolSpec{n: 1, resourceClass: "small"})
	hot := e.warmIn(t, 1, store.StateReady, "small", repo)
	stopped := e.warmIn(t, 1, store.StateStopped, "small", repo)
	e.waitAgents(t, slices.Concat(pushed, hot))

	req := request("9301", 2)
	req.Event = "pull_request"
	res, err := s.p.Provision(t.Context(), req)
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	got := bySource(res.Runners)
	if !slices.Equal(got[provision.SourceReused], []string{hot[0].ID}) || !slices.Equal(got[provision.SourceStarted], []string{stopped[0].ID}) ||
		len(got[provision.SourceCreated]) != 0 {
		t.Errorf("runners by source %v: want hot %s reused and stopped %s started, none created", got, hot[0].ID, stopped[0].ID)
	}
	if rec := e.get(t, pushed[0].ID); rec.State != store.StateIdle || rec.RunID != "" {
		t.Errorf("instance a push run released is %s (run %q), want left idle", rec.State, rec.RunID)
	}
	run, err := s.st.GetRun(t.Context(), res.RunKey)
	if err != nil || run.Event != "pull_request" {
		t.Errorf("run record %+v, %v: want the event kept", run, err)
	}
}
