// The checker against the real state services: DynamoDB Local and fauxqs from the shared stack, an
// EC2 server of the test's own; GitHub's runner list is a stub (its rule is pure logic). Each case
// builds a world that is clean but for one broken rule and checks that exactly that rule is
// reported.
package invariant_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/ghaccess"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/test/invariant"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/ec2server"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

// world is one deployment: its table, pool queue and EC2 server.
type world struct {
	t          *testing.T
	deployment string
	st         *store.Store
	sqs        *sqs.Client
	queue      *pool.Queue
	ec2        *ec2.Client
	runners    stubGitHub
}

type stubGitHub map[string][]ghaccess.Runner

func (s stubGitHub) ListRunners(_ context.Context, scope string) ([]ghaccess.Runner, error) {
	return s[scope], nil
}

const scope = "acme/app"

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := t.Context()
	stk := stacktest.Shared(t)
	w := &world{t: t, deployment: stacktest.UniqueName(t, "dep"), sqs: stk.SQS(), runners: stubGitHub{}}
	table := stacktest.UniqueName(t, "state")
	if err := store.CreateTable(ctx, stk.DynamoDB(), table); err != nil {
		t.Fatal(err)
	}
	w.st = store.New(stk.DynamoDB(), table)
	q, err := w.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatal(err)
	}
	w.queue = pool.NewQueue(w.sqs, aws.ToString(q.QueueUrl))
	srv := ec2server.New(ec2server.Options{PendingDelay: -1})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	cfg, _ := stk.AWSConfig(ctx)
	w.ec2 = ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = aws.String(hs.URL) })
	return w
}

// launch starts an instance tagged with the world's deployment (or untagged).
func (w *world) launch(tagged bool) string {
	w.t.Helper()
	in := &ec2.RunInstancesInput{
		ImageId: aws.String("ami-0123456789abcdef0"), InstanceType: "c6i.large", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
	}
	if tagged {
		in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{
			{Key: aws.String(tags.Deployment), Value: aws.String(w.deployment)},
		}}}
	}
	out, err := w.ec2.RunInstances(w.t.Context(), in)
	if err != nil {
		w.t.Fatal(err)
	}
	return aws.ToString(out.Instances[0].InstanceId)
}

func (w *world) create(id, run string) store.Instance {
	w.t.Helper()
	rec, err := w.st.Create(w.t.Context(), store.Instance{
		ID: id, State: store.StateCreated, RunID: run, Threshold: time.Now().Add(time.Hour),
		UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "default", Scope: scope,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

func (w *world) move(id string, c store.Change) store.Instance {
	w.t.Helper()
	rec, err := w.st.Transition(w.t.Context(), id, c)
	if err != nil {
		w.t.Fatalf("%s to %s: %v", id, c.To, err)
	}
	return rec
}

// running launches an instance and takes it to running for run.
func (w *world) running(run string) string {
	id := w.launch(true)
	w.create(id, run)
	w.move(id, store.Change{From: []store.State{store.StateCreated}, To: store.StateRunning, RunID: run})
	return id
}

// pooled launches an instance, takes it through a run and releases it cleanly into the pool.
func (w *world) pooled() string {
	id := w.running("4242:100:1")
	none := ""
	w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:100:1", SetRunID: &none, Threshold: time.Now().Add(time.Hour)})
	w.signal(id, store.SignalReleased, "4242:100:1", time.Time{})
	w.put(w.markPooled(id))
	return id
}

// markPooled writes the control plane's pool mark, as a release that verified the hand-back does.
func (w *world) markPooled(id string) store.Instance {
	w.t.Helper()
	rec, err := w.st.MarkPooled(w.t.Context(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

func (w *world) signal(id string, sig store.Signal, run string, at time.Time) {
	w.t.Helper()
	if err := w.st.PutSignal(w.t.Context(), id, store.SignalRecord{Signal: sig, RunID: run, At: at}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) put(rec store.Instance) {
	w.t.Helper()
	msg := pool.Message{InstanceID: rec.ID, UsageClass: rec.UsageClass, InstanceType: rec.InstanceType, CPU: rec.CPU,
		MemoryMiB: rec.MemoryMiB, RunnerClass: rec.RunnerClass, Scope: rec.Scope, Threshold: time.Now().Add(time.Hour), PooledAt: rec.PooledAt}
	if err := w.queue.Put(w.t.Context(), msg, 0); err != nil {
		w.t.Fatal(err)
	}
}

// terminate terminates an instance in EC2.
func (w *world) terminate(id string) {
	w.t.Helper()
	if _, err := w.ec2.TerminateInstances(w.t.Context(), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		w.t.Fatal(err)
	}
}

// run writes a run record in a status.
func (w *world) run(key, status string) {
	w.t.Helper()
	parts := strings.Split(key, ":")
	if _, _, err := w.st.CreateRun(w.t.Context(), store.Run{Key: key, RepositoryID: parts[0], Repository: scope, RunID: parts[1], Attempt: 1, Status: status}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) check(o invariant.Options) invariant.Report {
	w.t.Helper()
	o.DeploymentID = w.deployment
	o.Queues, o.SQS = []string{w.queue.URL()}, w.sqs
	o.GitHub, o.Scopes = w.runners, []string{scope}
	rep, err := invariant.Check(w.t.Context(), w.st, w.ec2, o)
	if err != nil {
		w.t.Fatalf("Check: %v", err)
	}
	return rep
}

func rules(rep invariant.Report) []string {
	var out []string
	for _, v := range rep.Violations {
		out = append(out, v.Rule)
	}
	return out
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(w *world) invariant.Options
		want  []string // rules broken, one entry per violation
		// stale and duplicate pool messages (garbage, not violations)
		stale, dupes int
	}{{
		name: "a clean world",
		setup: func(w *world) invariant.Options {
			w.pooled()
			id := w.running("4242:200:1")
			w.launch(false) // another deployment's instance: none of our business
			w.runners[scope] = []ghaccess.Runner{{ID: 1, Name: "runnerpool-" + id, Labels: []string{"self-hosted", "200-1", "runnerpool"}}}
			return invariant.Options{Held: map[string][]string{"4242:200:1": {id}}, Thresholds: true}
		},
	}, {
		name: "credentials minted for the runs' repository and its owner",
		setup: func(w *world) invariant.Options {
			return invariant.Options{RunRepositories: []string{scope}, Minted: []invariant.Mint{
				{Kind: "registration", Scope: scope}, {Kind: "remove", Scope: "ACME/App"}, {Kind: "jit", Scope: "acme"},
			}}
		},
	}, {
		name: "a credential minted for another repository",
		setup: func(w *world) invariant.Options {
			return invariant.Options{RunRepositories: []string{scope}, Minted: []invariant.Mint{
				{Kind: "registration", Scope: scope}, {Kind: "remove", Scope: "acme/other"}, {Kind: "remove", Scope: "acme/other"},
				{Kind: "registration", Scope: "evil"},
			}}
		},
		want: []string{invariant.RuleCredential, invariant.RuleCredential},
	}, {
		name: "a runner of a run registered outside the run's repository",
		setup: func(w *world) invariant.Options {
			if _, _, err := w.st.CreateRun(w.t.Context(), store.Run{Key: "4242:500:1", RepositoryID: "4242", Repository: "acme/other", RunID: "500", Attempt: 1}); err != nil {
				w.t.Fatal(err)
			}
			id := w.running("4242:500:1")
			w.runners[scope] = []ghaccess.Runner{{ID: 5, Name: "runnerpool-" + id, Labels: []string{"self-hosted", "500-1"}}}
			return invariant.Options{Held: map[string][]string{"4242:500:1": {id}}}
		},
		want: []string{invariant.RuleCredential},
	}, {
		name: "an agent item carrying an index key is reported, the pool still checked",
		setup: func(w *world) invariant.Options {
			id := w.pooled()
			table := w.st.Table()
			_, err := stacktest.Shared(w.t).DynamoDB().PutItem(w.t.Context(), &dynamodb.PutItemInput{TableName: &table, Item: map[string]dbtypes.AttributeValue{
				"pk": &dbtypes.AttributeValueMemberS{Value: store.AgentPK(id)}, "sk": &dbtypes.AttributeValueMemberS{Value: "POISON"},
				"idx_state": &dbtypes.AttributeValueMemberS{Value: "idle"}, "threshold": &dbtypes.AttributeValueMemberN{Value: "1"},
			}})
			if err != nil {
				w.t.Fatal(err)
			}
			return invariant.Options{Pooled: true}
		},
		want: []string{invariant.RuleForeign},
	}, {
		name: "pooled: every idle instance confirmed clean has exactly one message",
		setup: func(w *world) invariant.Options {
			w.pooled()
			return invariant.Options{Pooled: true}
		},
	}, {
		name: "pooled: an idle instance confirmed clean whose message was lost",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:110:1")
			none := ""
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:110:1", SetRunID: &none, Threshold: time.Now().Add(time.Hour)})
			w.signal(id, store.SignalReleased, "4242:110:1", time.Time{})
			w.markPooled(id)
			return invariant.Options{Pooled: true}
		},
		want: []string{invariant.RulePooled},
	}, {
		// Refresh pools again only what two walks missed, and every walk drops the same copy of a
		// duplicate: after the passes that follow a fault, two messages of one pooling are drift
		// (they used to be accepted, and hid a missing one in the counts).
		name: "pooled: two live messages of one pooling are a duplicate announcement",
		setup: func(w *world) invariant.Options {
			id := w.pooled()
			rec, err := w.st.Get(w.t.Context(), id)
			if err != nil {
				w.t.Fatal(err)
			}
			w.put(rec)
			return invariant.Options{Pooled: true}
		},
		want:  []string{invariant.RulePooled},
		dupes: 1,
	}, {
		// A hot instance whose warm-up marked it pooled must be announced too: convergence's failed
		// Put used to leave it out of every pickup until replaced, unseen by this rule.
		name: "pooled: a ready instance marked pooled without a message",
		setup: func(w *world) invariant.Options {
			id := w.launch(true)
			if _, err := w.st.Create(w.t.Context(), store.Instance{ID: id, State: store.StateWarming, Pool: "hot", Threshold: time.Now().Add(time.Hour),
				UsageClass: "on-demand", InstanceType: "c6i.large", CPU: 2, MemoryMiB: 4096, RunnerClass: "default", Scope: "acme"}); err != nil {
				w.t.Fatal(err)
			}
			w.move(id, store.Change{From: []store.State{store.StateWarming}, To: store.StateReady, RequireNoRun: true, Threshold: time.Now().Add(time.Hour), MarkPooled: true})
			return invariant.Options{Pooled: true}
		},
		want: []string{invariant.RulePooled},
	}, {
		// A claim through the second look leaves the message; the run's release pools the instance
		// again with its own. No claim can act on the first (it requires the mark the message
		// announces): stale, not a second live message.
		name: "pooled: a message of an earlier pooling beside the current one",
		setup: func(w *world) invariant.Options {
			id := w.pooled()
			rec, err := w.st.Get(w.t.Context(), id)
			if err != nil {
				w.t.Fatal(err)
			}
			if _, err := w.st.ClaimPooledAt(w.t.Context(), id, "4242:130:1", rec.PooledAt, time.Now().Add(time.Minute)); err != nil {
				w.t.Fatal(err)
			}
			none := ""
			w.move(id, store.Change{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: "4242:130:1"})
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:130:1", SetRunID: &none, Threshold: time.Now().Add(time.Hour)})
			w.signal(id, store.SignalReleased, "4242:130:1", time.Time{})
			w.put(w.markPooled(id))
			return invariant.Options{Pooled: true}
		},
		stale: 1,
	}, {
		name: "pooled: an idle instance its agent has not confirmed clean stays out of the pool",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:120:1")
			none := ""
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:120:1", SetRunID: &none, Threshold: time.Now().Add(time.Hour)})
			w.signal(id, store.SignalRegistered, "4242:120:1", time.Time{})
			return invariant.Options{Pooled: true}
		},
	}, {
		name: "an instance without a record is an orphan",
		setup: func(w *world) invariant.Options {
			w.launch(true)
			return invariant.Options{}
		},
		want: []string{invariant.RuleOrphan},
	}, {
		name: "a running instance whose record is terminated is an orphan",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:300:1")
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateTerminated, RunID: "4242:300:1"})
			return invariant.Options{}
		},
		want: []string{invariant.RuleOrphan},
	}, {
		name: "a pool message of a running instance is stale, not a violation",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:400:1")
			rec, _ := w.st.Get(t.Context(), id)
			w.put(rec)
			return invariant.Options{}
		},
		stale: 1,
	}, {
		name: "a young instance without a record is spared by the orphan grace",
		setup: func(w *world) invariant.Options {
			w.launch(true)
			return invariant.Options{OrphanGrace: time.Minute}
		},
	}, {
		name: "a pooled instance whose agent never confirmed deregistration",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:500:1")
			none := ""
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:500:1", SetRunID: &none, Threshold: time.Now().Add(time.Hour)})
			w.signal(id, store.SignalRegistered, "4242:500:1", time.Time{})
			w.put(w.markPooled(id)) // a control plane that marked it all the same
			return invariant.Options{}
		},
		want: []string{invariant.RulePool},
	}, {
		name: "a message of an earlier pooling, for an instance idle again but not marked pooled, is stale",
		setup: func(w *world) invariant.Options {
			// Pooled, claimed through the second look (its message stays), released again: the
			// release has not verified the hand-back yet, so no claim can take the old message.
			id := w.pooled()
			w.move(id, store.Change{From: []store.State{store.StateIdle}, To: store.StateClaimed, SetRunID: ptr("4242:510:1"), Threshold: time.Now().Add(time.Hour)})
			w.move(id, store.Change{From: []store.State{store.StateClaimed}, To: store.StateRunning, RunID: "4242:510:1", Threshold: time.Now().Add(time.Hour)})
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:510:1", SetRunID: ptr(""), Threshold: time.Now().Add(time.Hour)})
			w.signal(id, store.SignalRegistered, "4242:510:1", time.Time{})
			return invariant.Options{Pooled: true}
		},
		stale: 1,
	}, {
		name: "two messages of one instance are a duplicate, not a violation",
		setup: func(w *world) invariant.Options {
			id := w.pooled()
			rec, _ := w.st.Get(t.Context(), id)
			w.put(rec)
			return invariant.Options{}
		},
		dupes: 1,
	}, {
		name: "a message with no record is stale",
		setup: func(w *world) invariant.Options {
			w.put(store.Instance{ID: "i-0000000000000dead", UsageClass: "on-demand", InstanceType: "c6i.large"})
			return invariant.Options{}
		},
		stale: 1,
	}, {
		name: "a pooled instance still registered at GitHub",
		setup: func(w *world) invariant.Options {
			id := w.pooled()
			w.runners[scope] = []ghaccess.Runner{{ID: 7, Name: "runnerpool-" + id, Labels: []string{"100-1"}}}
			return invariant.Options{}
		},
		want: []string{invariant.RulePool},
	}, {
		name: "one instance held by two runs",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:700:1")
			return invariant.Options{Held: map[string][]string{"4242:700:1": {id}, "4242:701:1": {id}}}
		},
		want: []string{invariant.RuleDoubleClaim},
	}, {
		name: "a held instance whose record another run owns",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:800:1")
			return invariant.Options{Held: map[string][]string{"4242:801:1": {id}}}
		},
		want: []string{invariant.RuleDoubleClaim},
	}, {
		name: "a runner registered for two runs",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:900:1")
			w.runners[scope] = []ghaccess.Runner{{ID: 9, Name: "runnerpool-" + id, Labels: []string{"900-1", "901-1"}}}
			return invariant.Options{}
		},
		want: []string{invariant.RuleDoubleClaim},
	}, {
		name: "a runner registered for another run than its record's",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1000:1")
			w.runners[scope] = []ghaccess.Runner{{ID: 10, Name: "runnerpool-" + id, Labels: []string{"1001-1"}}}
			return invariant.Options{}
		},
		want: []string{invariant.RuleDoubleClaim},
	}, {
		// Issue #28 item 8: each attempt of a run has its own label (store.RunLabel).
		name: "a runner registered for another attempt of its record's run",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1200:2")
			w.runners[scope] = []ghaccess.Runner{{ID: 12, Name: "runnerpool-" + id, Labels: []string{"1200-1", "runnerpool"}}}
			return invariant.Options{}
		},
		want: []string{invariant.RuleDoubleClaim},
	}, {
		name: "an idle record that still names a run",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1100:1")
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:1100:1", Threshold: time.Now().Add(time.Hour)})
			return invariant.Options{}
		},
		want: []string{invariant.RuleState},
	}, {
		name: "a record past its threshold after refresh",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1200:1")
			if _, err := w.st.Expire(t.Context(), id, "", "test"); err != nil {
				t.Fatal(err)
			}
			return invariant.Options{Thresholds: true, Now: func() time.Time { return time.Now().Add(time.Minute) }, Grace: time.Second}
		},
		want: []string{invariant.RuleThreshold},
	}, {
		name: "a healthy instance terminated for a throttled call",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1300:1")
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateTerminated, RunID: "4242:1300:1",
				Reason: "provision dumped: api error RequestLimitExceeded: Request limit exceeded."})
			w.terminate(id)
			return invariant.Options{Healthy: []string{id}, Terminations: true}
		},
		want: []string{invariant.RuleHealthyTerminated, invariant.RuleTransientTermination},
	}, {
		name: "a healthy instance expired by a failed release",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1310:1")
			if _, err := w.st.Expire(t.Context(), id, "", "release: the agent could not deregister or clean up"); err != nil {
				t.Fatal(err)
			}
			return invariant.Options{Healthy: []string{id}, Now: func() time.Time { return time.Now().Add(time.Second) }}
		},
		want: []string{invariant.RuleHealthyTerminated},
	}, {
		name: "healthy instances alive, pooled and running",
		setup: func(w *world) invariant.Options {
			return invariant.Options{Healthy: []string{w.pooled(), w.running("4242:1320:1")}, Terminations: true}
		},
	}, {
		name: "a termination with no recorded reason",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1330:1")
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateTerminating, RunID: "4242:1330:1"})
			return invariant.Options{Terminations: true}
		},
		want: []string{invariant.RuleTransientTermination},
	}, {
		name: "a termination because GitHub answered 503",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1340:1")
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateTerminating, RunID: "4242:1340:1",
				Reason: "not confirmed clean after run 1340: listing runners: GET https://api.github.com/repos/acme/app/actions/runners: 503 Service Unavailable []"})
			return invariant.Options{Terminations: true}
		},
		want: []string{invariant.RuleTransientTermination},
	}, {
		name: "an instance expired by a release that failed for a GitHub 502",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1345:1")
			if _, err := w.st.Expire(t.Context(), id, "4242:1345:1", "release: cannot be pooled: listing the runners of acme/app: 502 Bad Gateway"); err != nil {
				t.Fatal(err)
			}
			return invariant.Options{Terminations: true, Now: func() time.Time { return time.Now().Add(time.Second) }}
		},
		want: []string{invariant.RuleTransientTermination},
	}, {
		name: "a termination for the instance's own failure",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1350:1")
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateTerminating, RunID: "4242:1350:1",
				Reason: "pre-runner script failed: exit status 1"})
			return invariant.Options{Terminations: true}
		},
	}, {
		name: "a run provisioning past its deadline, nobody running it",
		setup: func(w *world) invariant.Options {
			w.run("4242:1360:1", "provisioning")
			w.running("4242:1360:1")
			return invariant.Options{ProvisionDeadline: time.Second, Now: func() time.Time { return time.Now().Add(time.Minute) }}
		},
		want: []string{invariant.RuleStuckRun},
	}, {
		name: "a run provisioning within its deadline, or provisioned",
		setup: func(w *world) invariant.Options {
			w.run("4242:1370:1", "provisioning")
			w.run("4242:1371:1", "provisioned")
			return invariant.Options{ProvisionDeadline: time.Hour, Held: map[string][]string{"4242:1370:1": nil, "4242:1371:1": nil}}
		},
	}, {
		name: "answers past their deadline or cut by their own",
		setup: func(w *world) invariant.Options {
			return invariant.Options{Answers: []invariant.Answer{
				{Op: "provision", Run: "1:1:1", Took: 2 * time.Minute, Deadline: time.Minute},
				{Op: "release", Run: "1:2:1", Took: time.Second, Deadline: time.Minute, Err: fmt.Errorf("release: %w", context.DeadlineExceeded)},
				{Op: "provision", Run: "1:3:1", Took: time.Second, Deadline: time.Minute},
				{Op: "provision", Run: "1:4:1", Took: time.Second, Deadline: time.Minute, Err: errors.New("quota exceeded: the deployment's cap")},
			}}
		},
		want: []string{invariant.RuleDeadline, invariant.RuleDeadline},
	}, {
		name: "unpooled: an idle instance never marked pooled after the fault",
		setup: func(w *world) invariant.Options {
			id := w.running("4242:1380:1")
			w.move(id, store.Change{From: []store.State{store.StateRunning}, To: store.StateIdle, RunID: "4242:1380:1", SetRunID: ptr(""), Threshold: time.Now().Add(time.Hour)})
			w.signal(id, store.SignalReleased, "4242:1380:1", time.Time{})
			w.pooled()
			return invariant.Options{Pooled: true, IdlePooled: true}
		},
		want: []string{invariant.RuleUnpooled},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			rep := w.check(tc.setup(w))
			if got := rules(rep); !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want rules %v\n%v", rep.Violations, tc.want, rep.Err())
			}
			if rep.Stale != tc.stale || rep.Duplicates != tc.dupes {
				t.Errorf("stale %d, duplicates %d; want %d, %d", rep.Stale, rep.Duplicates, tc.stale, tc.dupes)
			}
			if rep.OK() != (len(tc.want) == 0) || (rep.Err() == nil) != rep.OK() {
				t.Errorf("OK() = %v, Err() = %v with %d violations", rep.OK(), rep.Err(), len(rep.Violations))
			}
		})
	}
}

// TestCheckLeavesThePoolAsItWas: the messages Check reads are visible again right after it.
func TestCheckLeavesThePoolAsItWas(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ids := []string{w.pooled(), w.pooled(), w.pooled()}
	for range 2 {
		rep := w.check(invariant.Options{})
		if !rep.OK() || len(rep.Messages) != len(ids) {
			t.Fatalf("check saw %d messages (%v), want %d and no violation", len(rep.Messages), rep.Violations, len(ids))
		}
	}
}

func TestUnchanged(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	id := w.running("4242:1300:1")
	w.pooled()
	before := w.check(invariant.Options{})
	if v := invariant.Unchanged(before, w.check(invariant.Options{})); len(v) != 0 {
		t.Fatalf("nothing changed, yet Unchanged says %v", v)
	}
	if _, err := w.st.Expire(t.Context(), id, "", "test"); err != nil {
		t.Fatal(err)
	}
	v := invariant.Unchanged(before, w.check(invariant.Options{}))
	if len(v) != 1 || v[0].Rule != invariant.RuleIdempotency || v[0].Instance != id || !strings.Contains(v[0].Detail, "record changed") {
		t.Fatalf("Unchanged after an expiry = %v, want one idempotency violation for %s", v, id)
	}
}

func TestUnchangedIgnoresSettlingEC2States(t *testing.T) {
	t.Parallel()
	before := invariant.Report{Instances: map[string]string{"i-1": "stopping", "i-2": "pending", "i-3": "shutting-down", "i-4": "running"}}
	after := invariant.Report{Instances: map[string]string{"i-1": "stopped", "i-2": "running", "i-3": "terminated", "i-4": "stopping"}}
	v := invariant.Unchanged(before, after)
	if len(v) != 1 || v[0].Instance != "i-4" {
		t.Errorf("Unchanged = %v, want only i-4 (running -> stopping is an action, the others finish by themselves)", v)
	}
}

func ptr(s string) *string { return &s }

// TestUnreadIsNotHealthy: a checker that cannot read the table reports a violation as well as its
// error, so a caller that only looks at the report never takes an unread deployment for a healthy
// one. A run whose provision answered but whose record is still provisioning is a stuck run.
func TestUnreadIsNotHealthy(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := t.Context()
	if _, _, err := w.st.CreateRun(ctx, store.Run{Key: "1:9:1", RepositoryID: "1", RunID: "9", Attempt: 1, Status: "provisioning"}); err != nil {
		t.Fatal(err)
	}
	if rep := w.check(invariant.Options{Answered: []string{"1:9:1"}}); !slices.Equal(rules(rep), []string{invariant.RuleStuckRun}) {
		t.Errorf("a run left provisioning after its provision answered: %v, want %s", rep.Violations, invariant.RuleStuckRun)
	}

	gone := store.New(stacktest.Shared(t).DynamoDB(), stacktest.UniqueName(t, "no-such-table"))
	rep, err := invariant.Check(ctx, gone, w.ec2, invariant.Options{DeploymentID: w.deployment})
	if err == nil {
		t.Fatal("Check of a table that does not exist: no error")
	}
	if rep.OK() || !slices.Contains(rules(rep), invariant.RuleUnreadable) {
		t.Errorf("Check of an unreadable table reported %v, want a %s violation", rep.Violations, invariant.RuleUnreadable)
	}
}

// TestTransient: the reasons that name a fault that passes by itself, and those that do not.
func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason string
		want   bool
	}{
		{"provision dumped: operation error EC2: CreateTags, api error RequestLimitExceeded: Request limit exceeded.", true},
		{"not confirmed clean: GET https://api.github.com/orgs/acme/actions/runners: 502 Bad Gateway []", true},
		{"listing runners: 403 API rate limit exceeded for installation", true},
		{"operation error DynamoDB: UpdateItem, exceeded maximum number of attempts, 3, InternalServerError: lost", true},
		{"minting a registration token: Post \"https://api.github.com/...\": dial tcp 127.0.0.1:1: connect: connection refused", true},
		{"release: waiting for the agent: context deadline exceeded", true},
		{"ThrottlingException: Rate exceeded", true},
		{"threshold passed", false},
		{"pre-runner script failed: exit status 1", false},
		{"release: runner 7 was reclaimed by EC2 (spot interruption) at 2026-11-26T17:00:00Z", false},
		{"registration for 4242:1:1 failed: runner refused by GitHub", false},
		{"not registered for 4242:1:1 before 2026-11-26T17:00:00Z", false},
		{"released by run 4242:1:1", false},
	} {
		if got := invariant.Transient(tc.reason); got != tc.want {
			t.Errorf("Transient(%q) = %v, want %v", tc.reason, got, tc.want)
		}
	}
}

// brokenRuns is a store whose run records cannot be read.
type brokenRuns struct{ invariant.Store }

func (brokenRuns) GetRun(context.Context, string) (store.Run, error) {
	return store.Run{}, errors.New("AccessDeniedException: not authorized to perform dynamodb:GetItem")
}

// TestUnreadRunsAreViolations: run records the checker cannot read, for the stuck-run rules, are
// violations, never silence.
func TestUnreadRunsAreViolations(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.running("4242:1400:1")
	rep, err := invariant.Check(t.Context(), brokenRuns{w.st}, w.ec2, invariant.Options{
		DeploymentID: w.deployment, Answered: []string{"4242:1401:1"}, ProvisionDeadline: time.Minute,
	})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got := rules(rep); !slices.Equal(got, []string{invariant.RuleUnreadable, invariant.RuleUnreadable}) || rep.OK() {
		t.Errorf("run records unreadable: violations %v, want two %s", rep.Violations, invariant.RuleUnreadable)
	}
}
