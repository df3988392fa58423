package warmpool_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/pooljob"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/poolsize"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/warmpool"
)

// enqueueRun queues n jobs of a run of acme/api's workflow (ids from first).
func enqueueRun(t *testing.T, jobs *pooljob.JobQueue, pool, workflow string, run, first int64, n int) {
	t.Helper()
	enqueueLike(t, jobs, warmpool.Job{RunID: run, RunAttempt: 1, Pool: pool, Workflow: workflow}, first, n)
}

// complete ends pool jobs in the ledger as their completion does.
func complete(t *testing.T, e *env, first int64, n int) {
	t.Helper()
	for i := range n {
		r, err := e.st.GetRun(t.Context(), "pooljob:"+strconv.FormatInt(first+int64(i), 10))
		if err != nil {
			t.Fatal(err)
		}
		r.Status = warmpool.JobCompleted
		if _, err := e.st.UpdateRun(t.Context(), r, r.Version); err != nil {
			t.Fatal(err)
		}
	}
}

// A workflow whose past run fanned out to 8 jobs after its first gets 8 hot from the moment a new
// run's first job is queued, before its matrix: the pool's ledger records say each job's run and
// workflow, the leader follows the runs in progress and learns, in the pool's autoscale item, what
// the completed ones fanned out to (a new leader continues from it). A workflow without history gets nothing more than its queued
// job, and neither an agent's item dressed as a job of the workflow nor a record with a run id no
// receiver writes opens a run.
func TestAutoscalePrewarmsARunsFanout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	e.clock.Set(time.Date(2026, 11, 23, 9, 0, 10, 0, time.UTC))
	jobs := pooljob.NewJobQueue(e.sqs, e.createQueue(t, "jobs"), e.st)
	c, tg := autoscaled(t, e, "fan", 40, 0, poolsize.Options{Jobs: jobs})
	target := 0
	step := func(d time.Duration) *store.AutoscaleDecision {
		t.Helper()
		e.clock.Add(d)
		pr := poolReport(t, pass(t, c), "fan")
		if pr.Autoscale == nil || pr.Err != nil {
			t.Fatalf("%+v: no decision", pr)
		}
		target = pr.TargetHot
		return &pr.Autoscale.AutoscaleDecision
	}

	// A past run of CI: a build job, then, once it completed, a matrix of 8.
	enqueueRun(t, jobs, "fan", "CI", 1, 100, 1)
	if a := step(10 * time.Second); a.Runs != 1 || a.Fanouts != 0 || a.Prewarm != 0 {
		t.Fatalf("the build queued: %+v; want 1 run in progress, nothing learned", a)
	}
	complete(t, e, 100, 1)
	e.clock.Add(3 * time.Minute)
	enqueueRun(t, jobs, "fan", "CI", 1, 101, 8)
	if a := step(10 * time.Second); a.Runs != 1 || a.Prewarm != 0 {
		t.Fatalf("the matrix queued: %+v; want the same run, no pre-warm", a)
	}
	complete(t, e, 101, 8)
	// The run is over once none of its jobs was in progress for 5 minutes; then the cooldown
	// lets the targets the queued jobs asked for go.
	for range 12 {
		step(time.Minute)
	}
	a := step(time.Minute)
	if a.Runs != 0 || a.Fanouts != 1 || a.Prewarm != 0 {
		t.Fatalf("after the run: %+v; want it ended and CI's fan-out learned", a)
	}
	st, err := e.st.GetAutoscale(ctx, "fan")
	if err != nil || !strings.Contains(st.Runs, `"acme/api: CI":{"first":1,"jobs":8,"after_ms":190000`) {
		t.Fatalf("kept runs %s (%v); want CI's fan-out: 1 first, 8 later 3m10s after", st.Runs, err)
	}
	base := st.Hot

	// A run of a workflow without history: its queued job only.
	enqueueRun(t, jobs, "fan", "Lint", 2, 200, 1)
	if a := step(30 * time.Second); a.Runs != 1 || a.Prewarm != 0 || a.Waiting != 1 || target != base+1 {
		t.Fatalf("a Lint run: %+v, target %d; want its job waiting, 1 hot for it, no pre-warm", a, target)
	}

	// Forged and bad records: an agent's item carrying the pool's index key, a control-plane
	// record with a run id no receiver writes.
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: e.st.AgentKey("i-0123456789abcdef0")}, "sk": &types.AttributeValueMemberS{Value: "X"},
		"idx_pool": &types.AttributeValueMemberS{Value: "WAITING#fan"}, "id": &types.AttributeValueMemberS{Value: "pooljob:900"},
		"status": &types.AttributeValueMemberS{Value: "queued"}, "run_id": &types.AttributeValueMemberS{Value: "7"},
		"attempt": &types.AttributeValueMemberN{Value: "1"}, "repository": &types.AttributeValueMemberS{Value: "acme/api"},
		"workflow": &types.AttributeValueMemberS{Value: "CI"}, "created_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(e.clock.Now().UnixMilli(), 10)},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.CreateRun(ctx, store.Run{Key: "pooljob:901", RepositoryID: "1", Repository: "acme/api", RunID: "x8", Attempt: 1,
		Status: warmpool.JobQueued, WaitingIn: "fan", Workflow: "CI"}); err != nil {
		t.Fatal(err)
	}
	// A new run of CI: its build queued, the matrix not yet. A new leader decides: the runs in
	// progress and the fan-outs are the pool's item's, not the old leader's memory.
	enqueueRun(t, jobs, "fan", "CI", 3, 300, 1)
	c = e.converger(t, tg.get, poolsize.Options{Jobs: jobs, Autoscale: poolsize.AutoscaleOptions{Store: e.st}})
	a = step(10 * time.Second)
	// Waiting: Lint's job (its instance on its way), CI's build and the bad record (the ledger
	// says it is queued: a waiting job as ever, not a run).
	if a.Runs != 2 || a.Prewarm != 8 || a.Waiting != 3 || a.InFlight != 1 || target != 2+8 {
		t.Fatalf("a CI run: %+v, target %d; want 2 runs, 2 hot for the waiting jobs without an instance and 8 for CI's matrix", a, target)
	}
	if !strings.Contains(strings.Join(a.Reasons, "; "), "8 hot for the fan-outs of 1 runs in progress (acme/api: CI)") {
		t.Errorf("reasons %q; want CI's pre-warm", a.Reasons)
	}
	// Ready before the matrix arrives.
	e.warmUp(t, "fan", nil, nil)
	e.clock.Add(30 * time.Second)
	if pr := poolReport(t, pass(t, c), "fan"); pr.Ready < 8 {
		t.Errorf("%d hot ready; want at least CI's 8", pr.Ready)
	}
}
