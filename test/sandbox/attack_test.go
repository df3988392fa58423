// attack_test.go plays a compromised job on a runner of repository A that reached the instance
// role's credentials, with exactly the DynamoDB permissions examples/complete/iam.tf gives that role
// (internal/agent/iam_test.go keeps the policy and this model in step): it tries to rewrite the items
// the control plane decides from, to take credentials before the agent, and forges the "released"
// signal before clean-up. The control plane must mint nothing for another repository, discard the
// instance rather than pool it, and never hand A's instance to repository B.
package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/agent/runner"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/release"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/sandbox"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/githubfake"
)

const otherRepo = "acme/other" // repository B

// instanceRole is a store client with the instance role's DynamoDB permissions for instance id, as
// examples/complete/iam.tf grants them (instanceRoleDB, attribute-bound).
func instanceRole(sb *sandbox.Sandbox, id string) *store.Store {
	return store.New(instanceRoleDB(sb, id, true), sb.Table)
}

// agentAttributes are the attributes the instance role lets an agent write (iam.tf, WriteOwnReports).
var agentAttributes = []string{"pk", "sk", "at", "ttl", "signal", "run_id", "detail", "key", "sig"}

// instanceRoleDB is a DynamoDB client with the instance role's permissions for instance id: GetItem
// on its INSTANCE# and AGENT# partitions (ReadOwnItems), PutItem on its AGENT# partition
// (WriteOwnReports), with only the agent's attributes and no ReturnValues when attributeBound (the
// dynamodb:Attributes and dynamodb:ReturnValues conditions; false: a deployment without them);
// every other call is refused as IAM refuses it (AccessDeniedException).
func instanceRoleDB(sb *sandbox.Sandbox, id string, attributeBound bool) *dynamodb.Client {
	allowed := func(op, pk string, params any) bool {
		switch op {
		case "GetItem":
			return pk == store.InstancePK(id) || pk == store.AgentPK(id)
		case "PutItem":
			if p, ok := params.(*dynamodb.PutItemInput); ok && attributeBound {
				for a := range p.Item {
					if !slices.Contains(agentAttributes, a) {
						return false
					}
				}
				if p.ReturnValues != "" && p.ReturnValues != types.ReturnValueNone {
					return false
				}
			}
			return pk == store.AgentPK(id)
		}
		return false
	}
	mw := func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("instanceRole", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			op := awsmiddleware.GetOperationName(ctx)
			var key map[string]types.AttributeValue
			switch p := in.Parameters.(type) {
			case *dynamodb.GetItemInput:
				key = p.Key
			case *dynamodb.PutItemInput:
				key = p.Item
			case *dynamodb.UpdateItemInput:
				key = p.Key
			case *dynamodb.DeleteItemInput:
				key = p.Key
			}
			pk := ""
			if v, ok := key["pk"].(*types.AttributeValueMemberS); ok {
				pk = v.Value
			}
			if !allowed(op, pk, in.Parameters) {
				return middleware.InitializeOutput{}, middleware.Metadata{}, &smithy.GenericAPIError{
					Code: "AccessDeniedException", Message: fmt.Sprintf("not authorized to perform dynamodb:%s on %q", op, pk),
				}
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	}
	return dynamodb.New(sb.Stack.DynamoDB().Options(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, mw) })
}

func denied(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "AccessDeniedException"
}

// gatedRunner is a runner whose job replaced `config.sh remove`: while its gate is set, Remove blocks
// until the gate opens and then fails, leaving the runner registered.
type gatedRunner struct {
	runner.Runner
	gate func() chan struct{}
}

func (g gatedRunner) Remove(ctx context.Context, cred store.Credential) error {
	if ch := g.gate(); ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return errors.New("config.sh remove: exit status 1 (replaced by the job)")
	}
	return g.Runner.Remove(ctx, cred)
}

func requestFor(repoID, repo, runID string) provision.Request {
	r := request(runID)
	r.RepositoryID, r.Repository = repoID, repo
	return r
}

func mintsSince(sb *sandbox.Sandbox, n int) []githubfake.Mint { return sb.Stack.GitHub.Minted()[n:] }

func TestCompromisedJobCannotSteerTheControlPlane(t *testing.T) {
	t.Parallel()
	var gates sync.Map // instance id -> chan struct{}
	sb := start(t, sandbox.Options{WrapRunner: func(id string, r runner.Runner) runner.Runner {
		return gatedRunner{Runner: r, gate: func() chan struct{} {
			if ch, ok := gates.Load(id); ok {
				return ch.(chan struct{})
			}
			return nil
		}}
	}})
	gh, cp := attackedControlPlane(t, sb)
	ctx := t.Context()

	// Repository A's workflow gets a runner; its job is the attacker.
	runA := newRun()
	resA, err := cp.Provisioner.Provision(ctx, request(runA))
	if err != nil || len(resA.Runners) != 1 {
		t.Fatalf("provision A: %+v, %v", resA, err)
	}
	x := resA.Runners[0].InstanceID
	atk := instanceRole(sb, x)

	// 1. Rewrite the items the control plane decides from: scope, state, run, threshold.
	rewriteOwnItems(t, sb, x, resA.RunKey)
	forgeStaleRelease(t, atk, x, resA.RunKey)

	// 2. The release: the job broke config.sh remove (the agent cannot deregister) and, as soon as
	// the record is idle, reads the removal credential and forges "released" before the agent's
	// clean-up could report.
	gate := make(chan struct{})
	gates.Store(x, gate)
	mintsBefore := len(sb.Stack.GitHub.Minted())
	race := raceForRelease(ctx, atk, x, resA.RunKey)
	rep, err := cp.Releaser.Release(ctx, resA.RunKey, 10*time.Minute)
	removal, removalErr := race.wait(t)
	close(gate)
	if removalErr != nil {
		t.Errorf("racing the agent for the removal credential: %v", removalErr)
	} else if !strings.HasSuffix(removal.URL, "/"+sandbox.Scope) {
		t.Errorf("the removal credential the job could read is for %s, want repository A's", removal.URL)
	}
	if err != nil || len(rep.Instances) != 1 || rep.Instances[0].Outcome != release.Expired {
		t.Fatalf("release with a forged signal = %+v, %v; want the instance expired, not pooled", rep, err)
	}
	t.Logf("forged release signal: %s", rep.Instances[0].Reason)
	// The signal is not the agent's (unsigned by its pinned key): refused before GitHub is even asked.
	if !strings.Contains(rep.Instances[0].Reason, "not signed by the instance's agent") {
		t.Errorf("release reason = %q, want the signature refused", rep.Instances[0].Reason)
	}
	if n := poolMessages(t, sb); n != 0 {
		t.Errorf("pool holds %d messages after the forged release, want 0", n)
	}
	mintedOnlyFor(t, sb, mintsBefore, sandbox.Scope, "the release")
	if _, err := cp.Refresher.Run(ctx); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if rec := record(t, sb, x); rec.State != store.StateTerminated {
		t.Errorf("after refresh the attacked instance is %s, want terminated", rec.State)
	}

	// 3. Repository B's workflow never gets A's instance.
	mintsBefore = len(sb.Stack.GitHub.Minted())
	resB, err := cp.Provisioner.Provision(ctx, requestFor("5151", otherRepo, newRun()))
	if err != nil || len(resB.Runners) != 1 || resB.Runners[0].InstanceID == x || resB.Runners[0].Source != "created" {
		t.Fatalf("provision B = %+v, %v; want one created instance, not %s", resB, err, x)
	}
	mintedOnlyFor(t, sb, mintsBefore, otherRepo, "B's provision")

	// 4. A clean release pools under the run record's repository: B cannot take it, A can.
	gates.Delete(x)
	runA2 := newRun()
	resA2, err := cp.Provisioner.Provision(ctx, request(runA2))
	if err != nil || len(resA2.Runners) != 1 {
		t.Fatalf("provision A2: %+v, %v", resA2, err)
	}
	y := resA2.Runners[0].InstanceID
	if rep, err := cp.Releaser.Release(ctx, resA2.RunKey, 10*time.Minute); err != nil || rep.Count(release.Pooled) != 1 {
		t.Fatalf("clean release of A2 = %+v, %v", rep, err)
	}
	if rec := record(t, sb, y); rec.Scope != sandbox.Scope {
		t.Errorf("pooled record scope = %q, want the run's repository %s", rec.Scope, sandbox.Scope)
	}
	resB2, err := cp.Provisioner.Provision(ctx, requestFor("5151", otherRepo, newRun()))
	if err != nil || len(resB2.Runners) != 1 || resB2.Runners[0].InstanceID == y {
		t.Fatalf("provision B2 = %+v, %v; want anything but A's pooled %s", resB2, err, y)
	}
	if rec := record(t, sb, y); rec.State != store.StateIdle || rec.RunID != "" {
		t.Fatalf("A's pooled instance after B's provision: %s for %q, want idle", rec.State, rec.RunID)
	}
	// B's pickup put A's message back as a misfit, delayed by the pickup's misfit delay (3 s by
	// default): wait it out, or A3 would not see it yet.
	time.Sleep(4 * time.Second)
	resA3, err := cp.Provisioner.Provision(ctx, request(newRun()))
	if err != nil || len(resA3.Runners) != 1 || resA3.Runners[0].InstanceID != y || resA3.Runners[0].Source != "reused" {
		t.Fatalf("provision A3 = %+v, %v; want %s reused", resA3, err, y)
	}

	// 5. The allow-list: no credential for a repository or an owner the deployment does not allow.
	if _, err := cp.Provisioner.Provision(ctx, requestFor("6666", "evil/repo", newRun())); err == nil {
		t.Errorf("provision for a repository outside the allow-list succeeded")
	}
	if _, err := gh.RegistrationToken(ctx, "acme"); !errors.Is(err, ghaccess.ErrScopeNotAllowed) {
		t.Errorf("owner-level registration token = %v, want ErrScopeNotAllowed", err)
	}
	if _, err := gh.RemoveToken(ctx, "evil/repo"); !errors.Is(err, ghaccess.ErrScopeNotAllowed) {
		t.Errorf("remove token for evil/repo = %v, want ErrScopeNotAllowed", err)
	}

	noForeignCredential(t, sb, gh)
	if !slices.ContainsFunc(sb.Stack.GitHub.Minted(), func(m githubfake.Mint) bool { return m.Scope == otherRepo }) {
		t.Errorf("no credential was minted for B at all: the test did not exercise B")
	}
}

// attackedControlPlane is the control plane of the attack tests: GitHub access allow-listed to
// repositories A and B (no owner-level runners), and a release that waits for the agent's signal.
func attackedControlPlane(t *testing.T, sb *sandbox.Sandbox) (*ghaccess.Client, *sandbox.Components) {
	t.Helper()
	gh, err := ghaccess.New(ghaccess.Config{
		APIURL: sb.Stack.Endpoints.GitHubAPI, Token: sb.Stack.GitHub.PAT(),
		Allowed: []string{sandbox.Scope, otherRepo}, // the deployment's allow-list; no owner-level runners
	})
	if err != nil {
		t.Fatal(err)
	}
	return gh, sb.Components(sandbox.ComponentOptions{GitHub: gh, ReleaseWait: 20 * time.Second})
}

// rewriteOwnItems plays the job of run runKey on instance x with the instance role: every rewrite of
// an item the control plane decides from is refused, the record is unchanged, and the registration
// credential is already withdrawn.
func rewriteOwnItems(t *testing.T, sb *sandbox.Sandbox, x, runKey string) {
	t.Helper()
	ctx := t.Context()
	atk := instanceRole(sb, x)
	steer := []struct {
		name string
		do   func() error
	}{
		{"retarget its record to repository B (UpdateItem on INSTANCE#)", func() error {
			_, err := atk.Transition(ctx, x, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle,
				RunID: runKey, SetRunID: new(string), SetScope: otherRepo, RunnerClass: sandbox.RunnerClass, Threshold: time.Now().Add(time.Hour)})
			return err
		}},
		{"extend its own deadline (UpdateItem on INSTANCE#)", func() error {
			_, err := atk.Expire(ctx, x, "", "attacker")
			return err
		}},
		{"replace its record (PutItem on INSTANCE#)", func() error {
			_, err := atk.Create(ctx, store.Instance{ID: x + "x", State: store.StateCreated, Scope: otherRepo})
			return err
		}},
		{"plant a registration credential for another run (PutItem on INSTANCE#)", func() error {
			return atk.PutCredential(ctx, x, store.Credential{Kind: store.CredentialRegistration, RunID: "evil", Token: "t"})
		}},
		{"take its registration credential before the agent (DeleteItem on INSTANCE#)", func() error {
			_, err := atk.TakeCredential(ctx, x, store.CredentialRegistration, runKey)
			return err
		}},
		{"write another instance's signal (PutItem on AGENT#other)", func() error {
			return instanceRole(sb, x).PutSignal(ctx, "i-0another", store.SignalRecord{Signal: store.SignalReleased, RunID: "r"})
		}},
		{"create a run record (PutItem on RUN#)", func() error {
			_, _, err := atk.CreateRun(ctx, store.Run{Key: "6666:1:1", Repository: otherRepo, RunID: "1", Attempt: 1})
			return err
		}},
		{"list the table's records (Query)", func() error {
			_, err := atk.ByState(ctx, store.StateIdle, time.Time{})
			return err
		}},
	}
	for _, s := range steer {
		if err := s.do(); !denied(err) {
			t.Errorf("attack %q: err = %v, want AccessDenied", s.name, err)
		} else {
			t.Logf("attack %q: refused (%v)", s.name, err)
		}
	}
	if rec := record(t, sb, x); rec.State != store.StateRunning || rec.RunID != runKey || rec.Scope != sandbox.Scope {
		t.Fatalf("record after the attacks = %s run %q scope %q, want running for %s in %s", rec.State, rec.RunID, rec.Scope, runKey, sandbox.Scope)
	}
	// Its registration credential was withdrawn once the agent registered: nothing left to steal.
	if _, err := atk.ReadCredential(ctx, x, store.CredentialRegistration, runKey); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("registration credential after the registration: %v, want withdrawn (ErrNotFound)", err)
	}
}

// forgeStaleRelease writes a "released" signal for runKey in x's own partition ahead of the release
// (which the release must not take for its own signal).
func forgeStaleRelease(t *testing.T, atk *store.Store, x, runKey string) {
	t.Helper()
	if err := atk.PutSignal(t.Context(), x, store.SignalRecord{Signal: store.SignalReleased, RunID: runKey}); err != nil {
		t.Fatalf("forging a signal in its own partition: %v", err)
	}
}

// releaseRace is the job racing the agent during the release of its run.
type releaseRace struct {
	done       chan struct{}
	removal    store.Credential
	removalErr error
	forgeErr   error
}

// raceForRelease starts the job's race: as soon as the record is idle (the release began) it reads
// the removal credential, tries to take it, and forges "released" before the agent's clean-up could
// report.
func raceForRelease(ctx context.Context, atk *store.Store, x, runKey string) *releaseRace {
	r := &releaseRace{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if rec, err := atk.Get(ctx, x); err == nil && rec.State == store.StateIdle {
				r.removal, r.removalErr = atk.ReadCredential(ctx, x, store.CredentialRemoval, runKey)
				if _, err := atk.TakeCredential(ctx, x, store.CredentialRemoval, runKey); !denied(err) {
					r.removalErr = fmt.Errorf("deleting the removal credential: %v, want AccessDenied", err)
				}
				r.forgeErr = atk.PutSignal(ctx, x, store.SignalRecord{Signal: store.SignalReleased, RunID: runKey, Detail: "forged"})
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		r.forgeErr = errors.New("the record never became idle")
	}()
	return r
}

// wait waits for the race to end, fails the test when the forged signal could not be written, and
// returns what the job got of the removal credential.
func (r *releaseRace) wait(t *testing.T) (store.Credential, error) {
	t.Helper()
	<-r.done
	if r.forgeErr != nil {
		t.Fatalf("forging the release signal: %v", r.forgeErr)
	}
	return r.removal, r.removalErr
}

// mintedOnlyFor fails the test for every credential minted since the n-th for a scope other than
// scope.
func mintedOnlyFor(t *testing.T, sb *sandbox.Sandbox, n int, scope, what string) {
	t.Helper()
	for _, m := range mintsSince(sb, n) {
		if m.Scope != scope {
			t.Errorf("%s minted a %s credential for %s, want only %s", what, m.Kind, m.Scope, scope)
		}
	}
}

// noForeignCredential: the invariant checker agrees that every credential minted names a run's
// repository (A or B), and every runner sits in its run's repository.
func noForeignCredential(t *testing.T, sb *sandbox.Sandbox, gh *ghaccess.Client) {
	t.Helper()
	ctx := t.Context()
	var minted []invariant.Mint
	for _, m := range sb.Stack.GitHub.Minted() {
		minted = append(minted, invariant.Mint{Kind: m.Kind, Scope: m.Scope})
		if strings.HasPrefix(m.Scope, "evil") || !strings.Contains(m.Scope, "/") {
			t.Errorf("minted a %s credential for %s", m.Kind, m.Scope)
		}
	}
	inv, err := invariant.Check(ctx, sb.Store, sb.EC2, invariant.Options{
		DeploymentID: sandbox.DeploymentID, GitHub: gh, Scopes: []string{sandbox.Scope, otherRepo},
		Minted: minted, RunRepositories: []string{sandbox.Scope, otherRepo},
	})
	if err != nil {
		t.Fatalf("invariant check: %v", err)
	}
	if n := inv.Count(invariant.RuleCredential); n != 0 {
		t.Errorf("credential-scope violations: %v", inv.Violations)
	}
}
