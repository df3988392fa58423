package provision_test

import (
	"context"
	"testing"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// provisionsThen is a provision.Provisions that runs the real provisioner, then calls after with
// the request before it returns: what a job on the new runners (and the re-run's release) can do
// while ServeRerun still waits for the answer.
type provisionsThen struct {
	p     provision.Provisions
	after func(req provision.Request)
}

func (pt provisionsThen) Provision(ctx context.Context, req provision.Request) (provision.Result, error) {
	res, err := pt.p.Provision(ctx, req)
	if err == nil {
		pt.after(req)
	}
	return res, err
}

// TestRerunRecordMarkedWithItsRunners: a re-run's job asking for its own attempt's label gets a
// provision whose run record is the re-run's (ServedAttempt) from the moment its runners exist, so
// the re-run's release, which may come while ServeRerun still waits for the provision's answer,
// ends them. Fails on the code before: the record was marked only after Provision returned, and a
// release in between left the runners running to their max runtime.
func TestRerunRecordMarkedWithItsRunners(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	a := e.side(t, sideOptions{})
	ctx := t.Context()
	first, err := a.p.Provision(ctx, request("4301", 1))
	if err != nil {
		t.Fatal(err)
	}
	own := store.RunKey(repoID, "4301", 2)
	var served int
	prov := provisionsThen{p: a.p, after: func(provision.Request) {
		served = e.getRun(t, own).ServedAttempt
	}}
	outcome, err := provision.ServeRerun(ctx, e.st, prov, provision.Rerun{
		RepositoryID: repoID, RunID: "4301", Attempt: 2, Labels: []string{store.RunLabel("4301", 2)},
	})
	if err != nil || outcome != provision.RerunProvisioned {
		t.Fatalf("ServeRerun = %q, %v", outcome, err)
	}
	if served != 2 {
		t.Errorf("run %s had ServedAttempt %d when its runners were answered, want 2", own, served)
	}
	if key, ok, err := provision.RerunOwn(ctx, e.st, repoID, "4301", 2); err != nil || !ok || key != own {
		t.Errorf("RerunOwn = %q, %v, %v; want %s, true", key, ok, err, own)
	}
	if first.RunKey == own {
		t.Fatalf("attempt 1 and 2 share run key %s", own)
	}
}
