// A release of a run whose provision a crashed replica left in progress (issue #28 item 3, the
// release half): past the provision deadline the release takes the provision over and answers.
package service_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/service"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"
)

// severable is an SDK HTTP client whose every call fails once cut: a replica whose process died
// (or lost its network) writes nothing more, its rollback included.
type severable struct {
	base aws.HTTPClient
	cut  atomic.Bool
}

var errSevered = errors.New("replica crashed")

func (s *severable) Do(r *http.Request) (*http.Response, error) {
	if s.cut.Load() {
		return nil, errSevered
	}
	return s.base.Do(r)
}

// TestReleaseTakesOverAnAbandonedProvision: replica c crashes while its provision waits for a
// created runner to register; the run record stays provisioning, with the pooled instance it
// claimed (its agent took the run's credential) and the created one. c's clock ran ten minutes
// behind, so the record's try began past the provision deadline. The workflow's release, to replica
// a, whose refresh does not run meanwhile, takes the provision over and answers 200: the claimed
// instance is back in the pool, the created one terminated, the run no longer provisioning. On the
// old code the release waited its time limit and answered 409, and would have every time.
func TestReleaseTakesOverAnAbandonedProvision(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := servicetest.New(t, servicetest.Options{})
	pooled := env.Fill(t, 1)
	// a refreshes once, as it takes the lease, before the crash; a lease a loaded machine cannot
	// lose keeps it from refreshing again (which would take the run over before the release).
	a := env.Start(t, "a", map[string]string{"RUNNERPOOL_REFRESH_SCHEDULE": "@every 1h", "RUNNERPOOL_LEASE_TTL": "60s", "RUNNERPOOL_RELEASE_TIMEOUT": "20s"})
	env.SetAgent(claimtest.Behaviour{NeverRegister: true}) // created instances never register

	awsCfg := env.AWSConfig()
	net := &severable{base: awsCfg.HTTPClient}
	if net.base == nil {
		net.base = awshttp.NewBuildableClient()
	}
	awsCfg.HTTPClient = net
	const behind = 10 * time.Minute
	c := env.Start(t, "c", map[string]string{"RUNNERPOOL_REGISTRATION_WAIT": "60s"}, func(o *service.Options) {
		o.AWS = &awsCfg
		o.Now = func() time.Time { return time.Now().Add(-behind) }
	})
	key := servicetest.RepositoryID + ":6001:1"
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The token as c's clock sees it (GitHub's is on time, but c checks its times on its own clock).
		then := time.Now().Add(-behind)
		tok := env.Token(t, "6001", map[string]any{"iat": then, "nbf": then, "exp": then.Add(5 * time.Minute)})
		servicetest.Call(t, http.MethodPost, c.URL+apiv1.PathProvision, tok, provisionBody(2))
	}()
	waitFor(t, 15*time.Second, "the provision to hold the pooled instance and a created one", func() bool {
		recs, err := env.Store.ByRun(ctx, key)
		if err != nil || len(recs) != 2 {
			return false
		}
		for _, r := range recs {
			if r.ID == pooled[0] && r.State != store.StateClaimed {
				return false
			}
		}
		return true
	})
	net.cut.Store(true)
	_ = c.Kill()
	<-done
	if run, err := env.Store.GetRun(ctx, key); err != nil || run.Status != "provisioning" {
		t.Fatalf("run after the crash: %+v, %v; want left provisioning", run, err)
	}

	code, body := servicetest.Call(t, http.MethodPost, a.URL+apiv1.PathRelease, env.Token(t, "6001", nil), apiv1.ReleaseRequest{})
	if code != http.StatusOK {
		t.Fatalf("release of the abandoned run: %d %s; want 200", code, body)
	}
	run, err := env.Store.GetRun(ctx, key)
	if err != nil || run.Status == "provisioning" {
		t.Fatalf("run after the release: %+v, %v; want taken over", run, err)
	}
	recs, err := env.Store.ByRun(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if cur, err := env.Store.Get(ctx, r.ID); err == nil && cur.RunID == key && (cur.State == store.StateClaimed || cur.State == store.StateCreated) {
			t.Errorf("%s left %s for the run", r.ID, cur.State)
		}
	}
	if rec, err := env.Store.Get(ctx, pooled[0]); err != nil || rec.State != store.StateIdle || rec.RunID != "" || rec.Scope != servicetest.Repository {
		t.Errorf("the claimed instance after the release: %+v, %v; want idle in the pool under %s", rec, err, servicetest.Repository)
	}
	for id, rec := range env.Audit(t) {
		if id != pooled[0] {
			t.Errorf("instance %s still live after the release: %s", id, servicetest.Describe(rec))
		}
	}
}
