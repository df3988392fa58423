// Tests of taking over a provision its replica abandoned (issue #28 item 3): the run record is
// left provisioning, with instances claimed, created and already promoted, by a replica that
// crashed; past the provision deadline the next request, or refresh, finishes it.
package provision_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// abandoned is the state a crashed replica left: what it claimed, created and promoted.
type abandoned struct {
	key                        string
	req                        provision.Request
	claimed, created, promoted []string
}

// abandon writes the run record of req as provisioning and does, on the side's claimer, what a
// provision would have done before its replica crashed: claim claimN pool instances for the run
// (verified: their agents took the run's credential), promote promote of them to running, and
// launch one instance with a created record when created is set.
func (e *env) abandon(t *testing.T, s *side, req provision.Request, claimN, promote int, created bool) abandoned {
	t.Helper()
	ctx := t.Context()
	key := store.RunKey(req.RepositoryID, req.RunID, req.Attempt)
	body, _ := json.Marshal(req)
	if _, _, err := e.st.CreateRun(ctx, store.Run{Key: key, RepositoryID: req.RepositoryID, Repository: req.Repository,
		RunID: req.RunID, Attempt: req.Attempt, Status: provision.StatusProvisioning, Request: body}); err != nil {
		t.Fatal(err)
	}
	a := abandoned{key: key, req: req}
	cres, err := s.cl.ClaimN(ctx, claim.Request{RunID: key, Scope: repo, Count: claimN, Queue: s.cfg.RunnerClasses[runnerClass].Queue})
	if err != nil || len(cres.Claimed) != claimN {
		t.Fatalf("ClaimN = %+v, %v", cres, err)
	}
	for i, cl := range cres.Claimed {
		if i < promote {
			if _, err := s.cl.Promote(ctx, cl, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			a.promoted = append(a.promoted, cl.Instance.ID)
			continue
		}
		a.claimed = append(a.claimed, cl.Instance.ID)
	}
	if created {
		ro, err := e.ec2.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large",
			SubnetId: aws.String("subnet-a"), MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
		if err != nil {
			t.Fatal(err)
		}
		id := aws.ToString(ro.Instances[0].InstanceId)
		if _, err := e.st.Create(ctx, store.Instance{ID: id, State: store.StateCreated, RunID: key, Threshold: time.Now().Add(time.Hour),
			UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, ResourceClass: "small", RunnerClass: runnerClass,
			Scope: repo, Zone: "us-east-1a"}); err != nil {
			t.Fatal(err)
		}
		a.created = append(a.created, id)
	}
	return a
}

// TestAbandonedProvisionIsTakenOver: past the provision deadline, the run is taken over by the next
// request or by refresh: the promoted instance is adopted into the result (the workflow's release
// ends it), the claimed one is handed back (a release: its agent took the credential) and the
// created one discarded; nothing is left claimed or created for the run, and the retry gets an
// answer instead of ErrInProgress. On the old code the retry got ErrInProgress, every time.
func TestAbandonedProvisionIsTakenOver(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"request", "refresh"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			s := e.side(t, sideOptions{inProgressWait: time.Second})
			e.waitAgents(t, e.idle(t, poolSpec{n: 2, resourceClass: "small"}))
			a := e.abandon(t, s, request("9201", 3), 2, 1, true)
			time.Sleep(1500 * time.Millisecond) // past the provision deadline

			var res provision.Result
			switch by {
			case "request":
				var err error
				res, err = s.p.Provision(t.Context(), a.req)
				if errors.Is(err, provision.ErrInProgress) || !errors.Is(err, provision.ErrFailed) {
					t.Fatalf("retry of the abandoned provision = %v (%+v), want its taken-over failure", err, res)
				}
			case "refresh":
				ref := refresh.New(s.st, s.ec2, nil, nil, refresh.Options{DeploymentID: deployment, TakeOver: s.p.TakeOverAbandoned, Logger: quiet})
				if _, err := ref.Run(t.Context()); err != nil {
					t.Logf("refresh pass: %v", err) // other phases' complaints about the test's world
				}
				run := e.getRun(t, a.key)
				if run.Status == provision.StatusProvisioning {
					t.Fatalf("run %s still provisioning after a refresh pass", a.key)
				}
				if err := json.Unmarshal(run.Result, &res); err != nil {
					t.Fatal(err)
				}
			}
			if res.Outcome != provision.OutcomeTakenOver || len(res.Runners) != 1 || res.Runners[0].InstanceID != a.promoted[0] {
				t.Errorf("result %+v: want taken over with the promoted instance %s adopted", res, a.promoted[0])
			}
			if in := e.get(t, a.promoted[0]); in.State != store.StateRunning || in.RunID != a.key {
				t.Errorf("promoted %s = %s run %q, want left running for the run's release", in.ID, in.State, in.RunID)
			}
			for _, id := range append(a.claimed, a.created...) {
				in := e.get(t, id)
				if (in.State == store.StateClaimed || in.State == store.StateCreated) && in.RunID == a.key && in.Threshold.After(time.Now()) {
					t.Errorf("%s left %s for the run", id, in.State)
				}
			}
			if in := e.get(t, a.claimed[0]); in.State == store.StateIdle && in.Scope != repo {
				t.Errorf("claimed %s handed back under scope %q, want %q", in.ID, in.Scope, repo)
			}
		})
	}
}

// TestTakeOverAfterPromotionSucceeds: the replica crashed after promoting every runner, before it
// stored the result; the retry gets the runners.
func TestTakeOverAfterPromotionSucceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{inProgressWait: time.Second})
	e.waitAgents(t, e.idle(t, poolSpec{n: 2, resourceClass: "small"}))
	a := e.abandon(t, s, request("9202", 2), 2, 2, false)
	time.Sleep(1500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := s.p.Provision(ctx, a.req)
	if err != nil || res.Status != provision.StatusSucceeded || len(res.Runners) != 2 {
		t.Fatalf("retry = %v (%+v), want the two promoted runners", err, res)
	}
}

// TestSettledWaitsBeforeTheDeadline: before the provision deadline a release's wait
// (Provisioner.Settled) takes nothing over: it ends with an *InProgressError saying when the
// provision may be taken over (the answer's Retry-After), and the run's instances stay as the
// provision left them; past the deadline the same call takes it over.
func TestSettledWaitsBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{inProgressWait: 2 * time.Second})
	e.waitAgents(t, e.idle(t, poolSpec{n: 1, resourceClass: "small"}))
	a := e.abandon(t, s, request("9203", 1), 1, 0, false)
	run := e.getRun(t, a.key)

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := s.p.Settled(ctx, a.key)
	var busy *provision.InProgressError
	if !errors.As(err, &busy) || !errors.Is(err, provision.ErrInProgress) || !busy.TakeOverAt.Equal(run.UpdatedAt.Add(2*time.Second)) {
		t.Fatalf("Settled before the deadline = %v, want an InProgressError with the deadline %s", err, run.UpdatedAt.Add(2*time.Second))
	}
	if in := e.get(t, a.claimed[0]); in.State != store.StateClaimed || in.RunID != a.key {
		t.Errorf("claimed %s = %s run %q before the deadline, want left claimed for the run", in.ID, in.State, in.RunID)
	}

	got, err := s.p.Settled(t.Context(), a.key) // waits past the deadline, then takes over
	if err != nil || got.Status == provision.StatusProvisioning {
		t.Fatalf("Settled past the deadline = %+v, %v; want the run taken over", got, err)
	}
	var res provision.Result
	if err := json.Unmarshal(got.Result, &res); err != nil || res.Outcome != provision.OutcomeTakenOver {
		t.Errorf("result %s (%v), want taken over", got.Result, err)
	}
}
