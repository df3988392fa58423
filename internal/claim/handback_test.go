// Tests of claims that fail for reasons outside the instance (GitHub refusing the registration
// token, a claim notice that did not arrive): the instance goes back to the pool, never to the
// terminator; and of the scope a rollback removes the runner from.
package claim_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestClaimNMintFailureHandsBack: GitHub refuses the registration token (its primary rate limit is
// spent for an hour), or is down until the provision's deadline. The agent acknowledged the claim
// (it saw its record claimed) but no credential was ever written, so the instance goes straight back
// to the pool, marked pooled: not discarded, not waiting for a deregistration that cannot come.
func TestClaimNMintFailureHandsBack(t *testing.T) {
	t.Parallel()
	for _, outage := range []bool{false, true} {
		name := map[bool]string{false: "rate limited", true: "outage past the deadline"}[outage]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ins := e.idle(t, 1, nil)
			e.agents(t, nil, ins, claimtest.Behaviour{})
			c, _ := e.claimer(testOptions())
			ctx := t.Context()
			if outage {
				e.ghsrv.SetOutage(time.Hour)
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
			} else {
				e.ghsrv.SetLimits(githubfake.Limits{Primary: 1})
				if _, err := e.gh.ListRunners(ctx, "acme/api"); err != nil { // spends the hour's budget
					t.Fatal(err)
				}
			}
			res, err := c.ClaimN(ctx, claim.Request{RunID: runID("refused"), Scope: "acme/api", Count: 1, Queue: e.q})
			if err == nil {
				t.Fatalf("ClaimN while GitHub refuses succeeded: %+v", res)
			}
			if len(res.Discarded) != 0 {
				t.Errorf("discarded %+v, want none", res.Discarded)
			}
			for _, cl := range res.Claimed { // the provision's rollback
				if !cl.NotIssued {
					t.Errorf("claim %+v not marked NotIssued", cl)
				}
				if err := c.Unclaim(t.Context(), cl, time.Time{}, e.q); err != nil {
					t.Errorf("Unclaim: %v", err)
				}
			}
			rec := e.record(t, ins[0].ID)
			if rec.State != store.StateIdle || rec.RunID != "" || rec.PooledAt.IsZero() {
				t.Errorf("record = %s run %q pooled %v, want idle, no run, pooled", rec.State, rec.RunID, rec.PooledAt)
			}
			if view, _ := e.ec2srv.Instance(ins[0].ID); view.State != "running" {
				t.Errorf("EC2 state = %s, want running", view.State)
			}
		})
	}
}

// TestUnclaimRemovesFromTheClaimScope: a hot warm-pool instance's record names its pool's owner,
// while the claim registered its runner for the run's repository: the rollback's remove token and
// GitHub check are for the repository.
func TestUnclaimRemovesFromTheClaimScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ins := e.idle(t, 1, func(in *store.Instance) { in.Scope = "acme" })
	e.agents(t, nil, ins, claimtest.Behaviour{})
	c, _ := e.claimer(testOptions())
	res, err := c.ClaimN(t.Context(), claim.Request{RunID: runID("hot"), Scope: "acme/api", Count: 1, Queue: e.q})
	if err != nil || len(res.Claimed) != 1 {
		t.Fatalf("ClaimN = %+v, %v", res, err)
	}
	if err := c.Unclaim(t.Context(), res.Claimed[0], time.Now().Add(30*time.Minute), e.q); err != nil {
		t.Fatalf("Unclaim: %v", err)
	}
	if rec := e.record(t, ins[0].ID); rec.State != store.StateIdle || rec.PooledAt.IsZero() {
		t.Errorf("record = %s pooled %v, want idle and pooled", rec.State, rec.PooledAt)
	}
	removes := slices.DeleteFunc(e.ghsrv.Minted(), func(m githubfake.Mint) bool { return m.Kind != "remove" })
	if len(removes) != 1 || removes[0].Scope != "acme/api" {
		t.Errorf("remove tokens minted = %+v, want one for acme/api", removes)
	}
}

// TestClaimNFailedNoticeHandsBack: the claim notice (a CreateTags) is refused, and the agent, which
// only looks at its record on its slow fallback timer, does not acknowledge in time. Its silence
// proves nothing: the instance goes back to the pool, never to the terminator.
func TestClaimNFailedNoticeHandsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ins := e.idle(t, 1, nil)
	e.agents(t, nil, ins, claimtest.Behaviour{Poll: time.Minute})
	for range 3 {
		e.ec2srv.SetFailNext("CreateTags", "UnauthorizedOperation", 403)
	}
	c, _ := e.claimer(testOptions())
	res, err := c.ClaimN(t.Context(), claim.Request{RunID: runID("unnoticed"), Scope: "acme/api", Count: 1, Queue: e.q})
	if len(res.Claimed) != 0 || len(res.Discarded) != 0 {
		t.Fatalf("ClaimN = %+v, %v; want nothing claimed, nothing discarded", res, err)
	}
	rec := e.record(t, ins[0].ID)
	if rec.State != store.StateIdle || rec.RunID != "" || rec.PooledAt.IsZero() {
		t.Errorf("record = %s run %q pooled %v, want idle, no run, pooled", rec.State, rec.RunID, rec.PooledAt)
	}
}

// TestUnclaimsShareOneListing: a rollback hands back three claimed instances whose agents
// acknowledged the claim, so each hand-back waits for its agent's deregistration and checks GitHub;
// with ShareListings the three checks cost one runner listing of the scope, not one per instance.
func TestUnclaimsShareOneListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ins := e.idle(t, 3, nil)
	e.agents(t, nil, ins, claimtest.Behaviour{})
	c, _ := e.claimer(testOptions())
	res, err := c.ClaimN(t.Context(), claim.Request{RunID: runID("rollback"), Scope: "acme/api", Count: 3, Queue: e.q})
	if err != nil || len(res.Claimed) != 3 {
		t.Fatalf("ClaimN = %+v, %v", res, err)
	}
	const listing = "GET /repos/{owner}/{repo}/actions/runners"
	before := e.ghsrv.Calls()[listing]
	ctx := c.ShareListings(t.Context(), len(res.Claimed))
	errs := make([]error, len(res.Claimed))
	var wg sync.WaitGroup
	for i, cl := range res.Claimed {
		wg.Go(func() { errs[i] = c.Unclaim(ctx, cl, time.Now().Add(30*time.Minute), e.q) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Unclaim: %v", err)
	}
	for _, in := range ins {
		if rec := e.record(t, in.ID); rec.State != store.StateIdle || rec.PooledAt.IsZero() {
			t.Errorf("%s = %s pooled %v, want idle and pooled", in.ID, rec.State, rec.PooledAt)
		}
	}
	if n := e.ghsrv.Calls()[listing] - before; n != 1 {
		t.Errorf("%d runner listings for the hand-back of 3, want 1", n)
	}
}
