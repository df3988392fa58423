package claim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

// refusingSends fails every SendMessage, as SQS does in an outage.
type refusingSends struct{ pool.SQSAPI }

func (refusingSends) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return nil, errors.New("sqs: service unavailable")
}

// An Unclaim whose pool message cannot be sent has already cleared the record's run id: the
// rollback's Discard of the run then could not expire it (the record names no run any more), and
// the instance stayed idle and marked pooled with no message, out of every pickup's sight. The
// Unclaim discards it itself, run-less; the rollback's Discard finds it terminated.
func TestUnclaimWhoseMessageIsNotSentDiscardsTheInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ins := e.idle(t, 1, nil)
	e.agents(t, nil, ins, claimtest.Behaviour{})
	c, reg := e.claimer(testOptions())
	run := runID("unsent")
	res, err := c.ClaimN(t.Context(), claim.Request{RunID: run, Scope: "acme/api", Count: 1, Queue: e.q})
	if err != nil || len(res.Claimed) != 1 {
		t.Fatalf("ClaimN = %+v, %v", res, err)
	}
	cl := res.Claimed[0]
	cl.NotIssued = true // the instance goes straight back, without the agent's hand-back
	broken := pool.NewQueue(refusingSends{e.sqs}, e.q.URL())
	if err := c.Unclaim(t.Context(), cl, time.Now().Add(30*time.Minute), broken); err == nil {
		t.Fatal("Unclaim with a failing queue succeeded")
	}
	if err := reg.Discard(t.Context(), cl.Instance.ID, run, "rollback"); err != nil {
		t.Errorf("the rollback's Discard: %v", err)
	}
	rec := e.record(t, cl.Instance.ID)
	if rec.State != store.StateTerminated {
		t.Errorf("record = %s run %q reason %q; want terminated", rec.State, rec.RunID, rec.Reason)
	}
	if view, _ := e.ec2srv.Instance(cl.Instance.ID); view.State == "running" {
		t.Errorf("instance is %s; want it terminated", view.State)
	}
}

// The run-less expiry never takes an instance another run claimed since: it requires a record
// that names no run.
func TestExpireNoRunLeavesAClaimedInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ins := e.idle(t, 1, nil)
	other := runID("other")
	if _, err := e.st.Claim(t.Context(), ins[0].ID, other, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ExpireNoRun(t.Context(), ins[0].ID, "not ours"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ExpireNoRun of a claimed record: %v, want ErrConflict", err)
	}
	if rec := e.record(t, ins[0].ID); rec.State != store.StateClaimed || rec.RunID != other || !rec.Threshold.After(time.Now()) {
		t.Errorf("record = %s run %q threshold %s; want it still claimed by %s", rec.State, rec.RunID, rec.Threshold, other)
	}
}
