package release_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/releasetest"
)

// lostSendAnswers applies every SendMessage and then loses its answer, as a connection reset after
// SQS accepted the message does (the SDK's retries would each send the message again: here they
// lose theirs too).
type lostSendAnswers struct{ pool.SQSAPI }

func (l lostSendAnswers) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if _, err := l.SQSAPI.SendMessage(ctx, in, o...); err != nil {
		return nil, err
	}
	return nil, errors.New("read tcp: connection reset by peer")
}

// A release whose SendMessage was applied but whose answer was lost used to expire the instance
// (its message in the queue all the same): a healthy, clean instance terminated, and a pickup
// claiming it through that message lost it. It stays pooled: idle, marked, within its threshold.
func TestReleaseWhoseSendAnswerWasLostKeepsTheInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	const runID = "7891"
	id := e.launch(t, 1)[0]
	e.record(t, id, runID, store.StateRunning)
	e.classes = pool.StaticResolver{runnerClass: pool.NewQueue(lostSendAnswers{e.sqs}, e.queue.URL())}
	agent := releasetest.Start(ctx, e.st, runID, []string{id}, releasetest.Deregister)
	defer agent.Stop()

	rep, err := e.releaser(nil).Release(ctx, runID, idleTime)
	if err != nil {
		t.Errorf("Release: %v", err)
	}
	if got := outcomes(rep)[id]; got != release.Pooled {
		t.Errorf("outcome %s, want %s (report %+v)", got, release.Pooled, rep)
	}
	rec, err := e.st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != store.StateIdle || rec.RunID != "" || rec.PooledAt.IsZero() || rec.Expired(e.now) {
		t.Errorf("record = %s run %q pooled at %v threshold %v; want idle, marked pooled, threshold ahead", rec.State, rec.RunID, rec.PooledAt, rec.Threshold)
	}
	if got := e.messages(t); len(got) == 0 || got[0].InstanceID != id {
		t.Errorf("messages %+v; want the one SQS applied", got)
	}
}
