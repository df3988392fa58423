// Refresh against EC2's eventual consistency: an instance launched a moment ago that EC2's API
// does not show yet (the EC2 server's ConsistencyDelay) is neither taken for gone nor forgotten.
package refresh_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/refresh"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

// TestRefreshKeepsTheRecordOfAnInstanceEC2DoesNotShowYet: a record to terminate (expired, or left
// terminating by a discard or a scale-in) whose instance was launched a moment ago meets
// TerminateInstances' NotFound. EC2 says that does not mean the instance is terminated: the record
// stays terminating while its instance runs, and a later pass, once EC2 shows the instance,
// terminates it and only then ends the record. A record past the consistency window whose
// instance EC2 does not know is ended as before (TestRefreshTerminatesExpiredRecords).
func TestRefreshKeepsTheRecordOfAnInstanceEC2DoesNotShowYet(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, ec2server.Options{ConsistencyDelay: time.Hour})
	ctx := t.Context()
	ids := e.launch(t, 2, deployment)
	expired, left := ids[0], ids[1]
	e.record(t, expired, store.StateCreated, e.clock.Now().Add(-time.Second))
	e.record(t, left, store.StateTerminating, e.clock.Now().Add(time.Hour))

	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Expiry.Terminated) != 0 || len(rep.Expiry.AlreadyGone) != 0 {
		t.Errorf("expiry ended %v (already gone %v) while EC2 does not show them yet; want none", rep.Expiry.Terminated, rep.Expiry.AlreadyGone)
	}
	if diff := cmp.Diff(ids, rep.Expiry.Unseen); diff != "" {
		t.Errorf("unseen (-want +got):\n%s", diff)
	}
	for _, id := range ids {
		if st, ec2st := e.recordState(t, id), e.ec2State(t, id); st != store.StateTerminating || ec2st != "running" {
			t.Errorf("%s: record %s, EC2 %s; want terminating and running (its record kept while it runs)", id, st, ec2st)
		}
	}

	// Later, EC2 shows them (still within the window): the next pass terminates them.
	e.clock.Advance(time.Minute)
	e.ec2srv.MakeVisible()
	rep, err = e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if diff := cmp.Diff(ids, rep.Expiry.Terminated); diff != "" {
		t.Errorf("second pass terminated (-want +got):\n%s", diff)
	}
	for _, id := range ids {
		if st, ec2st := e.recordState(t, id), e.ec2State(t, id); st != store.StateTerminated || ec2st != "terminated" {
			t.Errorf("%s: record %s, EC2 %s; want both terminated", id, st, ec2st)
		}
	}
}

// TestRefreshSweepNeverForgetsAnUnseenInstance: an instance with no record, whose tag EC2 lists
// but which DescribeInstances does not show yet, is spared however old (it is not described:
// Orphans.Young) and is not taken for gone (its runner is no leftover); once EC2 shows it, past the
// grace period, the sweep terminates it. An instance with a live record that EC2 does not show is
// left alone.
func TestRefreshSweepNeverForgetsAnUnseenInstance(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, ec2server.Options{ConsistencyDelay: time.Hour})
	ctx := t.Context()
	ids := e.launch(t, 2, deployment)
	orphan, recorded := ids[0], ids[1]
	e.record(t, recorded, store.StateRunning, e.clock.Now().Add(2*time.Hour))
	e.clock.Advance(terminate.ConsistencyWindow) // past the orphan grace, still not shown

	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Orphans.Terminated) != 0 || !slices.Equal(rep.Orphans.Young, []string{orphan}) {
		t.Errorf("orphans: terminated %v young %v; want none terminated, %s spared", rep.Orphans.Terminated, rep.Orphans.Young, orphan)
	}
	for _, id := range ids {
		if got := e.ec2State(t, id); got != "running" {
			t.Errorf("%s = %s, want running", id, got)
		}
	}

	e.ec2srv.MakeVisible()
	rep, err = e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if !slices.Equal(rep.Orphans.Terminated, []string{orphan}) {
		t.Errorf("second pass: orphans terminated %v, want %s", rep.Orphans.Terminated, orphan)
	}
	if got, rec := e.ec2State(t, recorded), e.recordState(t, recorded); got != "running" || rec != store.StateRunning {
		t.Errorf("recorded %s: EC2 %s, record %s; want running, running", recorded, got, rec)
	}
}

// TestRefreshSweepKeepsAnOrphanWhoseTerminationEC2AnswersNotFound: the sweep lists an orphan
// (running, past the grace period: filtered DescribeInstances shows it) but TerminateInstances
// answers NotFound, as EC2 may while the call reaches a part of it that does not show the
// instance yet (ec2server.ShowInListings). EC2 says that NotFound "does not mean the instance was
// or will be terminated": the orphan is reported unseen, not terminated, its offline runner is not
// deleted as a leftover, and the next sweep, once EC2 shows the instance, terminates it and
// deletes its runner.
func TestRefreshSweepKeepsAnOrphanWhoseTerminationEC2AnswersNotFound(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, ec2server.Options{ConsistencyDelay: time.Hour})
	ctx := t.Context()
	orphan := e.launch(t, 1, deployment)[0]
	e.ec2srv.ShowInListings(orphan)
	e.clock.Advance(5 * time.Minute) // past the orphan grace
	tok, err := e.gh.RegistrationToken(ctx, scope)
	if err != nil {
		t.Fatalf("registration token: %v", err)
	}
	if _, err := githubfake.NewRunnerClient(e.ghURL, nil).Register(ctx, githubfake.RegisterOptions{Token: tok.Token, Name: refresh.RunnerNamePrefix + orphan}); err != nil {
		t.Fatalf("registering the orphan's runner: %v", err)
	}
	runner := []string{scope + "/" + refresh.RunnerNamePrefix + orphan}

	rep, err := e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Orphans.Terminated) != 0 || !slices.Equal(rep.Orphans.Unseen, []string{orphan}) || len(rep.Runners.Deleted) != 0 {
		t.Errorf("orphans terminated %v unseen %v, runners deleted %v; want %s unseen and its runner left",
			rep.Orphans.Terminated, rep.Orphans.Unseen, rep.Runners.Deleted, orphan)
	}
	if got := e.ec2State(t, orphan); got != "running" {
		t.Fatalf("%s = %s, want running (NotFound terminated nothing)", orphan, got)
	}
	if n := len(e.fake.Runners(owner, repo)); n != 1 {
		t.Errorf("%d runners registered, want the orphan's", n)
	}

	e.ec2srv.MakeVisible(orphan)
	rep, err = e.refresher().Run(ctx)
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if !slices.Equal(rep.Orphans.Terminated, []string{orphan}) || len(rep.Orphans.Unseen) != 0 || !slices.Equal(rep.Runners.Deleted, runner) {
		t.Errorf("second pass: orphans terminated %v unseen %v, runners deleted %v; want %s terminated and %v deleted",
			rep.Orphans.Terminated, rep.Orphans.Unseen, rep.Runners.Deleted, orphan, runner)
	}
	if got := e.ec2State(t, orphan); got != "terminated" && got != "shutting-down" {
		t.Errorf("%s = %s after the second pass, want terminated", orphan, got)
	}
}
