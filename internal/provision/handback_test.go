// Tests of a rolled-back provision's hand-back of an instance whose agent took the run's
// registration credential: a runner of the run may have registered and run a job on it, so the
// hand-back is a release (release.Releaser.HandBack), never a return under the scope it was
// claimed from (issue #28 item 1).
package provision_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
)

// TestRollbackOfAVerifiedHotClaimIsARelease is the sequence: a class whose reuse rule
// forbids other repositories, an owner-scoped hot pool; acme/api's provision claims hot instance H,
// H's agent acknowledges the credential and registers (its runner could take a queued job at once),
// then the provision fails for capacity and rolls back. H must never go back under the owner's
// scope (acme/other's next provision would get it), nor into the pool at all for reuse = never.
// On the old code Unclaim pooled H as it came: idle, scope "acme".
func TestRollbackOfAVerifiedHotClaimIsARelease(t *testing.T) {
	t.Parallel()
	for _, reuse := range []string{declared.ReuseSameRepository, declared.ReuseNever} {
		t.Run(reuse, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			s := e.side(t, sideOptions{reuse: reuse})
			hot := e.warm(t, 1, store.StateReady)
			e.waitAgents(t, hot)
			h := hot[0].ID
			e.ec2srv.SetCapacity("", "", 0) // the fleet of the second runner gets nothing

			req := request("9101", 2)
			req.ResourceClass, req.CPU, req.MemoryMiB = "", 2, 4096 // warm instances have no resource class
			res, err := s.p.Provision(t.Context(), req)
			if !errors.Is(err, provision.ErrFailed) || !fleet.IsInsufficientCapacity(err) || res.Outcome != "unsuccessful" {
				t.Fatalf("Provision = %v (%+v), want unsuccessful for capacity", err, res)
			}
			if ack, err := e.st.LastAck(t.Context(), h, store.CredentialRegistration); err != nil || ack.RunID != res.RunKey {
				t.Fatalf("H's acknowledgement = %+v, %v: the sequence needs H's agent to have taken the run's credential", ack, err)
			}

			rec := e.get(t, h)
			pooled := rec.State == store.StateIdle && !rec.PooledAt.IsZero() && rec.Threshold.After(time.Now())
			switch {
			case pooled && reuse == declared.ReuseNever:
				t.Errorf("H pooled after the rollback (%s, scope %q): its class never reuses instances", rec.State, rec.Scope)
			case pooled && rec.Scope != repo:
				t.Errorf("H pooled under scope %q after the rollback, want the run's repository %q or not pooled", rec.Scope, repo)
			case !pooled && reuse == declared.ReuseSameRepository:
				t.Errorf("H = %s (threshold %s, pooled %v), want it released to %s's pool: its agent confirmed and GitHub agrees", rec.State, rec.Threshold, rec.PooledAt, repo)
			}
			for _, m := range e.drainMessages(t) {
				if m.InstanceID == h && (reuse == declared.ReuseNever || m.Scope != repo) {
					t.Errorf("pool message of H: scope %q (reuse %s)", m.Scope, reuse)
				}
			}
		})
	}
}

// drainMessages receives (and keeps out of sight) every message of the class queue, decoded.
func (e *env) drainMessages(t testing.TB) []pool.Message {
	t.Helper()
	var out []pool.Message
	for empty := 0; empty < 5; {
		got, err := e.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &e.queue, MaxNumberOfMessages: 10, VisibilityTimeout: 60})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		if len(got.Messages) == 0 {
			empty++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, m := range got.Messages {
			msg, err := pool.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("pool message %q: %v", aws.ToString(m.Body), err)
			}
			out = append(out, msg)
		}
	}
	return out
}
