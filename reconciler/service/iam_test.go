// iam_test.go keeps the reconciler and the example reconciler role (examples/complete/iam.tf) in
// step: every AWS API a replica calls while it provisions, releases, serves a pool job, converges
// warm pools and refreshes must be an action the role's policy grants.
package service_test

import (
	"crypto/ed25519"
	"net/http"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/schedule"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/apiv1"
	"github.com/runnerpool/terraform-provider-runnerpool/test/servicetest"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

// reconcilerActions are the actions of every statement of the reconciler role's policy document
// (data "aws_iam_policy_document" "reconciler" in examples/complete/iam.tf).
func reconcilerActions(t *testing.T) []string {
	t.Helper()
	const file = "../../examples/complete/iam.tf"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclsyntax.ParseConfig(src, file, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("parsing %s: %v", file, diags)
	}
	var actions []string
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "data" || len(b.Labels) != 2 || b.Labels[0] != "aws_iam_policy_document" || b.Labels[1] != "reconciler" {
			continue
		}
		for _, st := range b.Body.Blocks {
			a, ok := st.Body.Attributes["actions"]
			if st.Type != "statement" || !ok {
				continue
			}
			v, d := a.Expr.Value(nil)
			if d.HasErrors() || !v.CanIterateElements() {
				t.Fatalf("%s: a reconciler statement's actions are not a literal list: %v", file, d)
			}
			for it := v.ElementIterator(); it.Next(); {
				_, ev := it.Element()
				if ev.Type() != cty.String {
					t.Fatalf("%s: an action is not a string", file)
				}
				actions = append(actions, ev.AsString())
			}
		}
	}
	if len(actions) == 0 {
		t.Fatalf("%s has no reconciler policy document with actions", file)
	}
	return actions
}

// awsActions are the distinct IAM actions of the replica's AWS calls, from its
// runnerpool_aws_calls_total series (the SDK middleware that counts every call).
func awsActions(metrics string) []string {
	re := regexp.MustCompile(`runnerpool_aws_calls_total\{operation="([A-Za-z0-9]+)",replica="[^"]*",result="[^"]*",service="([A-Za-z0-9]+)"\}`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(metrics, -1) {
		// SQS authorises a batch call by the action of its entries (SendMessageBatch needs
		// sqs:SendMessage); DynamoDB's batch calls are actions of their own.
		op := m[1]
		if m[2] == "SQS" {
			op = strings.TrimSuffix(op, "Batch")
		}
		ops := []string{op}
		if m[2] == "DynamoDB" && op == "TransactWriteItems" {
			// There is no TransactWriteItems action: a transaction is authorised item by item, by
			// the action of each (DynamoDB Developer Guide, "Using IAM with DynamoDB transactions").
			ops = []string{"PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem"}
		}
		for _, op := range ops {
			if a := strings.ToLower(m[2]) + ":" + op; !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestReconcilerCallsAllowedByIAMPolicy: a replica with warm pools provisions (reuse and creation),
// releases, serves a webhook pool job from a hot instance, converges its warm pool (hot and stopped)
// and refreshes; every AWS action it called is granted by the example reconciler role. The actions
// the role grants that this run did not call are logged: the rarer paths (spot, template versions,
// service-linked roles) that justify them are named in iam.tf.
func TestReconcilerCallsAllowedByIAMPolicy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	granted := reconcilerActions(t)
	env := servicetest.New(t, servicetest.Options{WarmPools: true})
	repo := declared.NewRepository(env.Store)
	rc := env.TableRunnerClass(servicetest.RunnerClass)
	if _, err := repo.PutRunnerClass(ctx, rc, 0); err != nil {
		t.Fatal(err)
	}
	wp := declared.WarmPool{Name: "warm", RunnerClass: rc.Name, Schedules: []schedule.Schedule{{Name: schedule.DefaultName, Hot: 1, Stopped: 1}}}
	if _, err := repo.PutWarmPool(ctx, wp, 0); err != nil {
		t.Fatal(err)
	}
	r := env.Start(t, "a", map[string]string{
		"RUNNERPOOL_RUNNER_CLASSES_FILE": "", "RUNNERPOOL_REFRESH_SCHEDULE": "@every 2s", "RUNNERPOOL_CONVERGE_SCHEDULE": "@every 1s",
	})

	tok := env.Token(t, "3001", nil)
	req := apiv1.ProvisionRequest{Count: 2, RunnerClass: rc.Name, CPU: 2, MemoryMiB: 4096, AllowedInstanceTypes: []string{"c6i.*"}}
	if code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathProvision, tok, req); code != http.StatusOK {
		t.Fatalf("provision: %d %s", code, body)
	}
	if code, body := servicetest.Call(t, http.MethodPost, r.URL+apiv1.PathRelease, tok, apiv1.ReleaseRequest{}); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, body)
	}
	// Convergence fills the pool: it launches two, whose agents (played here) report their warm-up
	// done, signed (convergence pins the key); it keeps one hot and stops the other. A pool job then
	// takes the hot instance.
	_, agentKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "convergence to stop a warmed-up instance", func() bool {
		recs, err := env.Store.ByPool(ctx, wp.Name)
		for _, in := range recs {
			if err == nil && in.State == store.StateWarming {
				sig := store.SignalRecord{Signal: store.SignalPreRunnerOK, Detail: "warmed up (played)"}
				sig.Sign(in.ID, agentKey, time.Now())
				_ = env.Store.PutSignal(ctx, in.ID, sig)
			}
		}
		return strings.Contains(scrapeMetrics(t, r.URL), `operation="StopInstances"`)
	})
	if code, resp := deliver(t, r.URL, hook{delivery: "d-iam", event: "workflow_job", body: queuedJob(9301, 9401, "self-hosted", "pool=warm")}); code != http.StatusOK {
		t.Fatalf("pool job: %d %+v", code, resp)
	}
	waitFor(t, 30*time.Second, "a refresh pass and the pool job's claim notice", func() bool {
		m := scrapeMetrics(t, r.URL)
		return strings.Contains(m, `operation="DescribeTags"`) && strings.Contains(m, `operation="CreateTags"`) &&
			strings.Contains(m, `operation="DeleteMessageBatch"`)
	})

	called := awsActions(scrapeMetrics(t, r.URL))
	t.Logf("AWS actions called: %v", called)
	for _, a := range called {
		if !slices.ContainsFunc(granted, func(g string) bool { ok, _ := path.Match(g, a); return ok }) {
			t.Errorf("the replica called %s, which examples/complete/iam.tf's reconciler role does not grant: AccessDenied in a real account", a)
		}
	}
	// The same calls, on the resources the example gives the reconciler, and the refusals, in an IAM
	// simulator we did not write (iam_sim_test.go).
	simulateReconcilerCalls(t, called)
	var unused []string
	for _, g := range granted {
		if !slices.ContainsFunc(called, func(a string) bool { ok, _ := path.Match(g, a); return ok }) && !slices.Contains(unused, g) {
			unused = append(unused, g)
		}
	}
	t.Logf("granted but not called in this run: %v", unused)
}
