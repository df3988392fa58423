package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
)

// slowAgentRunner is a runner whose agent is slow: while its gate is set, Register and Remove wait
// for the gate to open before doing their work, so the job gets ahead of the agent.
type slowAgentRunner struct {
	runner.Runner
	gate func() chan struct{}
}

func (s slowAgentRunner) wait(ctx context.Context) {
	if ch := s.gate(); ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

func (s slowAgentRunner) Register(ctx context.Context, cred store.Credential, name string) error {
	s.wait(ctx)
	return s.Runner.Register(ctx, cred, name)
}

func (s slowAgentRunner) Remove(ctx context.Context, cred store.Credential) error {
	s.wait(ctx)
	return s.Runner.Remove(ctx, cred)
}

// TestForgedReportsAreNotTheAgents plays the job of issue 18 with exactly the instance role's
// permissions, against an agent that signs its reports with a key the control plane pinned at the
// instance's first registration:
//   - release: the job reads the removal credential, deregisters its runner at GitHub itself (as
//     config.sh remove would, with the runner's own files) and forges "released" while the agent is
//     still cleaning up. GitHub agrees the runner is gone, but the signal is not signed by the
//     agent: the instance is expired, never pooled;
//   - registration: on a pooled instance claimed by the next run, the job forges UD_REG_OK before
//     the agent registered. The run is not answered with that instance.
func TestForgedReportsAreNotTheAgents(t *testing.T) {
	t.Parallel()
	var gates, inner sync.Map // instance id -> chan struct{}, runner.Runner
	sb := start(t, sandbox.Options{WrapRunner: func(id string, r runner.Runner) runner.Runner {
		inner.Store(id, r)
		return slowAgentRunner{Runner: r, gate: func() chan struct{} {
			if ch, ok := gates.Load(id); ok {
				return ch.(chan struct{})
			}
			return nil
		}}
	}})
	_, cp := attackedControlPlane(t, sb)
	ctx := t.Context()

	// The release.
	res, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil || len(res.Runners) != 1 {
		t.Fatalf("provision: %+v, %v", res, err)
	}
	x := res.Runners[0].InstanceID
	if rec := record(t, sb, x); rec.AgentKey == "" {
		t.Fatalf("no agent key pinned at the first registration of %s", x)
	}
	atk := instanceRole(sb, x)
	gate := make(chan struct{})
	gates.Store(x, gate)
	jobDone := make(chan error, 1)
	go func() {
		jobDone <- func() error {
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				if rec, err := atk.Get(ctx, x); err != nil || rec.State != store.StateIdle {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				cred, err := atk.ReadCredential(ctx, x, store.CredentialRemoval, res.RunKey)
				if err != nil {
					return err
				}
				r, _ := inner.Load(x)
				if err := r.(runner.Runner).Remove(ctx, cred); err != nil {
					return err
				}
				return atk.PutSignal(ctx, x, store.SignalRecord{Signal: store.SignalReleased, RunID: res.RunKey})
			}
			return errors.New("the record never became idle")
		}()
	}()
	rep, err := cp.Releaser.Release(ctx, res.RunKey, 10*time.Minute)
	close(gate)
	if jerr := <-jobDone; jerr != nil {
		t.Fatalf("the job's deregistration and forged signal: %v", jerr)
	}
	if err != nil || len(rep.Instances) != 1 || rep.Instances[0].Outcome != release.Expired {
		t.Fatalf("release after the job deregistered and forged the signal = %+v, %v; want expired, never pooled", rep, err)
	}
	if !strings.Contains(rep.Instances[0].Reason, "not signed") {
		t.Errorf("release reason %q, want the unsigned signal named", rep.Instances[0].Reason)
	}
	if n := poolMessages(t, sb); n != 0 {
		t.Errorf("pool holds %d messages, want 0", n)
	}

	// The registration: a clean instance pooled, then claimed by the next run while its agent is
	// slow to register; the job forges UD_REG_OK for that run.
	res2, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil || len(res2.Runners) != 1 {
		t.Fatalf("provision 2: %+v, %v", res2, err)
	}
	y := res2.Runners[0].InstanceID
	if rep, err := cp.Releaser.Release(ctx, res2.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("clean release of %s: %+v, %v", y, rep, err)
	}
	gate2 := make(chan struct{})
	defer close(gate2)
	gates.Store(y, gate2)
	atkY := instanceRole(sb, y)
	forged := make(chan struct{})
	go func() {
		defer close(forged)
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if rec, err := atkY.Get(ctx, y); err == nil && rec.State == store.StateClaimed && rec.RunID != "" {
				_ = atkY.PutSignal(ctx, y, store.SignalRecord{Signal: store.SignalRegistered, RunID: rec.RunID, Detail: "forged"})
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	res3, err := cp.Provisioner.Provision(ctx, request(newRun()))
	<-forged
	if err != nil {
		t.Fatalf("provision 3: %v", err)
	}
	for _, rn := range res3.Runners {
		if rn.InstanceID == y {
			t.Fatalf("provision 3 answered with %s on a forged registration: %+v", y, res3)
		}
	}
	if rec := record(t, sb, y); rec.State.Live() && rec.State != store.StateTerminating {
		t.Errorf("the instance with the forged registration is %s, want discarded", rec.State)
	}
}
