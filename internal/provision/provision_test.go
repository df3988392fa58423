// Integration tests of the provision orchestrator: real SDK clients against DynamoDB Local,
// fauxqs, our EC2 server and the GitHub fake; simulated agents inside the instances.
package provision_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	cfg := provision.Config{
		ResourceClasses: resourceClasses,
		RunnerClasses:   map[string]runnerclass.Resolved{runnerClass: {RunnerClass: declared.RunnerClass{Name: runnerClass}}},
	}
	good := request("123", 2)
	good.RunnerClass = runnerClass
	if err := good.Validate(cfg); err != nil {
		t.Fatalf("good request: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*provision.Request)
		want   string
	}{
		{"zero count", func(r *provision.Request) { r.Count = 0 }, "instance count 0: must be between 1 and 50"},
		{"count above 50", func(r *provision.Request) { r.Count = 51 }, "instance count 51"},
		{"usage class", func(r *provision.Request) { r.UsageClass = "reserved" }, `usage class "reserved": must be "spot" or "on-demand"`},
		{"no patterns", func(r *provision.Request) { r.InstanceTypes = nil }, "at least one pattern is required"},
		{"empty pattern", func(r *provision.Request) { r.InstanceTypes = []string{"c6i.*", " "} }, "instance type pattern is empty"},
		{"invalid pattern", func(r *provision.Request) { r.InstanceTypes = []string{"c6i large"} }, `instance type pattern "c6i large"`},
		{"only stars", func(r *provision.Request) { r.InstanceTypes = []string{"**"} }, "use a single *"},
		{"negative cpu", func(r *provision.Request) { r.ResourceClass, r.CPU = "", -2 }, "cpu -2: must not be negative"},
		{"negative memory", func(r *provision.Request) { r.ResourceClass, r.MemoryMiB = "", -1 }, "memory -1 MiB: must not be negative"},
		{"unknown resource class", func(r *provision.Request) { r.ResourceClass = "huge" }, `resource class "huge" is not configured (known: large, medium, small)`},
		{"class and cpu", func(r *provision.Request) { r.CPU = 4 }, "not both"},
		{"unknown runner class", func(r *provision.Request) { r.RunnerClass = "windows" }, `runner class "windows" is not configured`},
		{"no runner class", func(r *provision.Request) { r.RunnerClass = "" }, "none given and no default"},
		{"no run id", func(r *provision.Request) { r.RunID = "" }, "run id is required"},
		{"run id with space", func(r *provision.Request) { r.RunID = "1 2" }, `run id "1 2"`},
		{"run id with comma", func(r *provision.Request) { r.RunID = "1,2" }, `do not make a runner label: label "1,2-1"`},
		{"no repository id", func(r *provision.Request) { r.RepositoryID = "" }, "repository id is required"},
		{"bad repository", func(r *provision.Request) { r.Repository = "acme" }, `repository "acme": want owner/name`},
		{"attempt 0", func(r *provision.Request) { r.Attempt = 0 }, "attempt 0: must be at least 1"},
		{"fallback on on-demand", func(r *provision.Request) { r.FallbackToOnDemand = true }, "only applies to usage class spot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := good
			tc.mutate(&r)
			err := r.Validate(cfg)
			if !errors.Is(err, provision.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
	// Every problem is reported at once.
	r := good
	r.Count, r.UsageClass = 0, "x"
	if err := r.Validate(cfg); err == nil || !strings.Contains(err.Error(), "instance count") || !strings.Contains(err.Error(), "usage class") {
		t.Errorf("two problems: %v", err)
	}
}

// With an empty pool, a provision creates its runners with one CreateFleet; their records go
// created -> running for the run, and each agent received its registration credential.
func TestCreatePath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{})
	ctx := t.Context()

	// An invalid request writes nothing.
	bad := request("900", 0)
	if _, err := s.p.Provision(ctx, bad); !errors.Is(err, provision.ErrInvalid) {
		t.Fatalf("invalid request: %v", err)
	}
	if _, err := e.st.GetRun(ctx, store.RunKey(repoID, "900", 1)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an invalid request left a run record: %v", err)
	}

	before := time.Now()
	res, err := s.p.Provision(ctx, request("1001", 3))
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	if res.Status != provision.StatusSucceeded || len(res.Runners) != 3 || res.Label != "1001-1" || res.RunKey != store.RunKey(repoID, "1001", 1) {
		t.Fatalf("result %+v: want 3 runners, label 1001-1", res)
	}
	if n := e.ec2srv.Calls()["CreateFleet"]; n != 1 {
		t.Errorf("%d CreateFleet calls, want 1", n)
	}
	for _, r := range res.Runners {
		if r.Source != provision.SourceCreated || r.UsageClass != fleet.OnDemand || !strings.HasPrefix(r.InstanceType, "c6i.") {
			t.Errorf("runner %+v: want a created on-demand c6i", r)
		}
		rec := e.get(t, r.InstanceID)
		if rec.State != store.StateRunning || rec.RunID != res.RunKey || rec.ResourceClass != "small" || rec.Scope != repo || rec.Zone == "" {
			t.Errorf("record %+v: want running for %s, small, %s, with a zone", rec, res.RunKey, repo)
		}
		if rec.Threshold.Before(before.Add(59*time.Minute)) || rec.Threshold.After(time.Now().Add(time.Hour)) {
			t.Errorf("record %s threshold %v: want now + the runner class's max runtime (1 h)", rec.ID, rec.Threshold)
		}
		v, _ := e.ec2srv.Instance(r.InstanceID)
		if v.Tags[tags.Deployment] != deployment || v.Tags[tags.RunID] != res.RunKey || v.Tags[tags.RunnerClass] != runnerClass {
			t.Errorf("instance %s tags %v: want deployment, run and runner class tags from launch", r.InstanceID, v.Tags)
		}
		creds := e.agent(r.InstanceID).Credentials()
		if len(creds) != 1 || creds[0].RunID != res.RunKey || !slices.Equal(creds[0].Labels, []string{"1001-1", provision.RunnerLabel}) ||
			creds[0].Token == "" || !strings.HasSuffix(creds[0].URL, "/"+repo) {
			t.Errorf("instance %s credentials %+v: want one registration for the run, labelled with the run id", r.InstanceID, creds)
		}
	}
	run := e.getRun(t, res.RunKey)
	if run.Status != provision.StatusSucceeded || len(run.Result) == 0 {
		t.Errorf("run record %+v: want the result stored", run)
	}
	counts := e.audit(t, []provision.Result{res}, false)
	if counts["running"] != 3 {
		t.Errorf("audit %v: want 3 running", counts)
	}
}

// The acceptance test: 100 idle instances across three resource classes, 50 concurrent
// provisions of 1 to 6 runners with mixed constraints, from two independent replicas, with SQS short
// polls sampled (a third come back empty). No instance is given to two runs, every instance is
// accounted for, misfits are back in the pool, and the provisions reuse at least 95% of what the
// pool could serve (a maximum matching of the requests onto the idle instances that fit them).
func TestConcurrentProvisions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agentPoll: 300 * time.Millisecond, heartbeatEvery: 3 * time.Second})
	sides := []*side{
		e.side(t, sideOptions{claimWait: 8 * time.Second, registrationWait: 15 * time.Second, sampling: 0.3}),
		e.side(t, sideOptions{claimWait: 8 * time.Second, registrationWait: 15 * time.Second, sampling: 0.3}),
	}
	specs := []poolSpec{
		{n: 25, resourceClass: "small"}, {n: 15, resourceClass: "small", usageClass: fleet.Spot},
		{n: 20, resourceClass: "medium"}, {n: 15, resourceClass: "medium", usageClass: fleet.Spot},
		{n: 25, resourceClass: "large"},
	}
	e.idle(t, specs...)
	idle := make([]store.Instance, 0, 100)
	for _, sp := range specs {
		usage := cmp.Or(sp.usageClass, fleet.OnDemand)
		for range sp.n {
			rc := resourceClasses[sp.resourceClass]
			idle = append(idle, store.Instance{
				UsageClass: usage, InstanceType: poolTypes[sp.resourceClass], CPU: rc.CPU, MemoryMiB: rc.MemoryMiB,
				ResourceClass: sp.resourceClass, Scope: repo,
			})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var reqs []provision.Request
	total := 0
	for i := range 50 {
		r := request(fmt.Sprint(5000+i), 1+rng.IntN(6))
		r.ResourceClass = []string{"small", "medium", "large"}[rng.IntN(3)]
		switch rng.IntN(5) {
		case 0:
			r.UsageClass = fleet.Spot
		case 1:
			r.InstanceTypes = []string{"m6i.*", "m5.*"} // nothing in the pool fits: all created
		case 2:
			r.ResourceClass, r.CPU, r.MemoryMiB = "", 4, 8192 // explicit minimums instead of a class
		}
		total += r.Count
		reqs = append(reqs, r)
	}
	results := make([]provision.Result, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { results[i], errs[i] = sides[i%2].p.Provision(t.Context(), r) })
	}
	wg.Wait()

	reused, created := 0, 0
	for i, res := range results {
		if errs[i] != nil {
			t.Errorf("provision %s: %v", reqs[i].RunID, errs[i])
			continue
		}
		if len(res.Runners) != reqs[i].Count {
			t.Errorf("provision %s: %d runners, want %d", reqs[i].RunID, len(res.Runners), reqs[i].Count)
		}
		for _, rn := range res.Runners {
			rec := e.get(t, rn.InstanceID)
			if !fits(reqs[i], rec) {
				t.Errorf("run %s got %+v, which does not fit %+v", reqs[i].RunID, rec, reqs[i])
			}
			if rn.Source == provision.SourceReused {
				reused++
			} else {
				created++
			}
		}
	}
	counts := e.audit(t, results, false)
	// What the pool could serve the provisions that succeeded (a failed one returned what it took).
	var served []provision.Request
	for i, r := range reqs {
		if errs[i] == nil {
			served = append(served, r)
		}
	}
	servable := servable(served, idle)
	t.Logf("%d runners for 50 provisions: %d reused of %d the pool could serve, %d created; final: %v", total, reused, servable, created, counts)
	if counts["running"] != total {
		t.Errorf("want %d running, got %v", total, counts)
	}
	if reused*100 < servable*95 {
		t.Errorf("reused %d runners, under 95%% of the %d the pool could serve", reused, servable)
	}
	if counts["idle"] == 0 {
		t.Error("no idle instance left: the misfit path was not exercised")
	}
}

// servable is how many runners the idle instances could serve at most: a maximum flow from the
// requests (capacity: their counts) through "fits" edges to the instances (capacity 1 each).
func servable(reqs []provision.Request, idle []store.Instance) int {
	nr := len(reqs)
	used := make([]int, len(reqs))  // runners given to each request so far
	owner := make([]int, len(idle)) // request holding each instance, -1 if none
	for i := range owner {
		owner[i] = -1
	}
	// augment finds a path from request r to a free instance, re-assigning instances on the way.
	var augment func(r int, seen []bool) bool
	augment = func(r int, seen []bool) bool {
		for k, in := range idle {
			if seen[k] || !fits(reqs[r], in) {
				continue
			}
			seen[k] = true
			if owner[k] < 0 || augment(owner[k], seen) {
				owner[k] = r
				return true
			}
		}
		return false
	}
	flow := 0
	for r := range nr {
		for used[r] < reqs[r].Count && augment(r, make([]bool, len(idle))) {
			used[r]++
			flow++
		}
	}
	return flow
}

// fits reports whether a record satisfies a request's constraints.
func fits(r provision.Request, in store.Instance) bool {
	cpu, mem := r.CPU, r.MemoryMiB
	if r.ResourceClass != "" {
		rc := resourceClasses[r.ResourceClass]
		cpu, mem = rc.CPU, rc.MemoryMiB
		if in.ResourceClass != r.ResourceClass {
			return false
		}
	}
	ok := false
	for _, p := range r.InstanceTypes {
		if strings.HasPrefix(in.InstanceType, strings.TrimSuffix(p, "*")) {
			ok = true
		}
	}
	return ok && in.UsageClass == r.UsageClass && in.CPU >= cpu && in.MemoryMiB >= mem && in.Scope == repo
}

// A fleet EC2 fills only partly fails the provision as unsuccessful: the partial fleet is
// terminated, the selected instance goes back to the pool, and no instance runs without a live
// record.
func TestPartialFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{})
	pooled := e.idle(t, poolSpec{n: 1, resourceClass: "small"})
	e.ec2srv.SetCapacity("", "", 2)

	res, err := s.p.Provision(t.Context(), request("2001", 5))
	if !errors.Is(err, provision.ErrFailed) || !fleet.IsInsufficientCapacity(err) {
		t.Fatalf("Provision = %v, want a failure for insufficient capacity", err)
	}
	if res.Status != provision.StatusFailed || res.Outcome != "unsuccessful" || len(res.Runners) != 0 {
		t.Errorf("result %+v: want failed, unsuccessful, no runners", res)
	}
	actions := map[string]int{}
	for _, u := range res.Undone {
		actions[u.Action]++
		if u.Action == provision.ActionReturned && u.InstanceID != pooled[0].ID {
			t.Errorf("undone %+v: only the selected instance goes back to the pool", u)
		}
	}
	if actions[provision.ActionReturned] != 1 || actions[provision.ActionTerminated] != 2 {
		t.Errorf("undone %+v, want the selected instance returned and the 2 of the partial fleet terminated", res.Undone)
	}
	rec := e.get(t, pooled[0].ID)
	if rec.State != store.StateIdle || rec.RunID != "" {
		t.Errorf("selected instance after the failure: %+v, want idle", rec)
	}
	counts := e.audit(t, []provision.Result{res}, true)
	if counts["terminated without record"] != 2 || counts["idle"] != 1 {
		t.Errorf("audit %v: want the 2 partial-fleet instances terminated and 1 idle", counts)
	}
}

// Pooled instances that fail their checks (a stale heartbeat, a missing registration signal) are
// terminated, and other instances are claimed in their place.
func TestUnhealthyPooledInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{claimWait: 2 * time.Second})
	bad := e.idle(t, poolSpec{n: 1, resourceClass: "small", sim: "stale"}, poolSpec{n: 1, resourceClass: "small", sim: "never"})
	// The healthy instances join the pool once the bad ones are claimed, so the bad ones are the
	// first candidates.
	var healthy []store.Instance
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			claimed := 0
			for _, b := range bad {
				if rec, err := e.st.Get(context.Background(), b.ID); err == nil && rec.State != store.StateIdle {
					claimed++
				}
			}
			if claimed == len(bad) {
				healthy = e.idle(t, poolSpec{n: 2, resourceClass: "small"})
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	res, err := s.p.Provision(t.Context(), request("3001", 2))
	<-done
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	var healthyIDs, badIDs []string
	for _, h := range healthy {
		healthyIDs = append(healthyIDs, h.ID)
	}
	for _, b := range bad {
		badIDs = append(badIDs, b.ID)
	}
	slices.Sort(healthyIDs)
	if got := ids(res.Runners); !slices.Equal(got, healthyIDs) {
		t.Errorf("runners %v, want the healthy pooled instances %v", got, healthyIDs)
	}
	for _, r := range res.Runners {
		if r.Source != provision.SourceReused {
			t.Errorf("runner %+v: want reused", r)
		}
	}
	var undone []string
	for _, u := range res.Undone {
		undone = append(undone, u.InstanceID)
		if u.Action != provision.ActionTerminated || !strings.Contains(u.Reason, "failed its checks") {
			t.Errorf("undone %+v: want terminated for failed checks", u)
		}
	}
	slices.Sort(undone)
	slices.Sort(badIDs)
	if !slices.Equal(undone, badIDs) {
		t.Errorf("undone %v, want the unhealthy %v", undone, badIDs)
	}
	for _, b := range bad {
		rec := e.get(t, b.ID)
		v, _ := e.ec2srv.Instance(b.ID)
		if rec.State != store.StateTerminated || (v.State != "shutting-down" && v.State != "terminated") {
			t.Errorf("unhealthy %s: record %s, EC2 %s; want both terminated", b.ID, rec.State, v.State)
		}
	}
	if n := e.ec2srv.Calls()["CreateFleet"]; n != 0 {
		t.Errorf("%d CreateFleet calls: the healthy pool should have served the run", n)
	}
	e.audit(t, []provision.Result{res}, false)
}

// A job on a runner can write its agent's release signal before the control plane has checked with
// GitHub that the runner is gone. The record is idle in the index meanwhile, so the second look sees
// it: it must take only what the control plane itself marked pooled, and create instead.
func TestSecondLookIgnoresUnverifiedRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{})
	forged := e.idle(t, poolSpec{n: 2, resourceClass: "small", unverified: true})
	res, err := s.p.Provision(t.Context(), request("3101", 1))
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	if len(res.Runners) != 1 || res.Runners[0].Source != provision.SourceCreated {
		t.Fatalf("runners %+v: want one created runner, no reuse of an unverified release", res.Runners)
	}
	for _, f := range forged {
		if rec := e.get(t, f.ID); rec.State != store.StateIdle || rec.RunID != "" {
			t.Errorf("unverified %s: record %s run %q, want untouched idle", f.ID, rec.State, rec.RunID)
		}
	}
}

// A provision is idempotent per run and attempt: asking again, sequentially or concurrently,
// returns the same runners; a new attempt gets a new set.
func TestIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	a, b := e.side(t, sideOptions{}), e.side(t, sideOptions{})
	e.idle(t, poolSpec{n: 6, resourceClass: "small"})
	ctx := t.Context()

	// Concurrently, through two replicas.
	req := request("4001", 2)
	var r1, r2 provision.Result
	var e1, e2 error
	var wg sync.WaitGroup
	wg.Go(func() { r1, e1 = a.p.Provision(ctx, req) })
	wg.Go(func() { r2, e2 = b.p.Provision(ctx, req) })
	wg.Wait()
	if e1 != nil || e2 != nil {
		t.Fatalf("concurrent provisions: %v, %v", e1, e2)
	}
	if !slices.Equal(ids(r1.Runners), ids(r2.Runners)) || len(r1.Runners) != 2 {
		t.Fatalf("concurrent provisions of one run: %v and %v, want the same two runners", ids(r1.Runners), ids(r2.Runners))
	}
	// Sequentially.
	r3, err := a.p.Provision(ctx, req)
	if err != nil || !slices.Equal(ids(r3.Runners), ids(r1.Runners)) {
		t.Fatalf("repeated provision: %v, %v; want %v", ids(r3.Runners), err, ids(r1.Runners))
	}
	recs := e.byRun(t, r1.RunKey)
	if len(recs) != 2 {
		t.Errorf("run %s has %d records, want 2: no second set", r1.RunKey, len(recs))
	}
	// Every answer names the run's start (its record's creation), the repeated one's included:
	// the history entry takes it without reading the record again.
	if run, err := e.st.GetRun(ctx, r1.RunKey); err != nil {
		t.Fatal(err)
	} else if !r1.StartedAt.Equal(run.CreatedAt) || !r2.StartedAt.Equal(run.CreatedAt) || !r3.StartedAt.Equal(run.CreatedAt) {
		t.Errorf("StartedAt %v, %v, %v; want the run's creation %v in every answer", r1.StartedAt, r2.StartedAt, r3.StartedAt, run.CreatedAt)
	}
	// A new attempt is a new provision.
	req.Attempt = 2
	r4, err := b.p.Provision(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r4.RunKey == r1.RunKey || len(r4.Runners) != 2 || slices.ContainsFunc(r4.Runners, func(r provision.Runner) bool {
		return slices.Contains(ids(r1.Runners), r.InstanceID)
	}) {
		t.Errorf("attempt 2 got %v (key %s), want two other runners than attempt 1's %v", ids(r4.Runners), r4.RunKey, ids(r1.Runners))
	}
	// A failed provision is idempotent too: the failure is returned again, nothing is retried.
	e.ec2srv.SetCapacity("", "", 0)
	fail := request("4002", 5) // 2 idle left: 3 to create, none available
	f1, err1 := a.p.Provision(ctx, fail)
	f2, err2 := b.p.Provision(ctx, fail)
	if !errors.Is(err1, provision.ErrFailed) || !errors.Is(err2, provision.ErrFailed) || f1.Error != f2.Error || f2.Status != provision.StatusFailed {
		t.Errorf("failed run asked twice: %v / %v", err1, err2)
	}
	if n := e.ec2srv.Calls()["CreateFleet"]; n != 1 {
		t.Errorf("%d CreateFleet calls, want 1 (the repeated failed run must not try again)", n)
	}
	e.audit(t, []provision.Result{r1, r4, f1}, false)
}

// A created instance that never registers fails fleet validation: all or nothing, so the
// selected instance goes back to the pool and every created one is terminated.
func TestFleetValidationFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{registrationWait: 2 * time.Second})
	pooled := e.idle(t, poolSpec{n: 1, resourceClass: "small"})
	e.waitAgents(t, pooled)
	e.setCreatedBehaviour(claimtest.Behaviour{NeverRegister: true})

	res, err := s.p.Provision(t.Context(), request("6001", 3))
	if !errors.Is(err, provision.ErrFailed) || res.Outcome != "unsuccessful" || !strings.Contains(res.Error, "registration timed out") {
		t.Fatalf("Provision = %v (%+v), want an unsuccessful fleet validation", err, res)
	}
	actions := map[string]string{}
	for _, u := range res.Undone {
		actions[u.InstanceID] = u.Action
	}
	if actions[pooled[0].ID] != provision.ActionReturned || len(actions) != 3 {
		t.Errorf("undone %+v: want the pooled instance returned and 2 created terminated", res.Undone)
	}
	counts := e.audit(t, []provision.Result{res}, false)
	if counts["idle"] != 1 || counts["terminated"] != 2 {
		t.Errorf("audit %v: want 1 idle and 2 terminated with closed records", counts)
	}
}

// A provision whose caller goes away (reconciler shutdown) rolls back on a fresh context and
// leaves no instance without a record.
func TestCancelledProvisionRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{registrationWait: 20 * time.Second})
	pooled := e.idle(t, poolSpec{n: 1, resourceClass: "small"})
	e.waitAgents(t, pooled)
	e.setCreatedBehaviour(claimtest.Behaviour{NeverRegister: true})

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		// Cancel once the fleet's records are written (validation is waiting).
		for {
			live, _ := e.st.ByState(context.Background(), store.StateCreated, time.Time{})
			if len(live) == 2 {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	res, err := s.p.Provision(ctx, request("7001", 3))
	if !errors.Is(err, provision.ErrFailed) || !errors.Is(err, context.Canceled) || res.Outcome != "unsuccessful" {
		t.Fatalf("cancelled Provision = %v (%+v), want an unsuccessful rollback", err, res)
	}
	rec := e.get(t, pooled[0].ID)
	if rec.State != store.StateIdle {
		t.Errorf("pooled instance %s after the rollback: %s, want idle", rec.ID, rec.State)
	}
	run := e.getRun(t, res.RunKey)
	if run.Status != provision.StatusRolledBack || !res.Retryable {
		t.Errorf("run record status %q (retryable %v), want rolled back: the same attempt may ask again", run.Status, res.Retryable)
	}
	counts := e.audit(t, []provision.Result{res}, false)
	if counts["terminated"] != 2 || counts["idle"] != 1 {
		t.Errorf("audit %v: want the 2 created terminated, 1 idle", counts)
	}
}

// noSpot makes every spot fleet come back empty with InsufficientInstanceCapacity (our EC2
// server's capacity limits do not tell spot from on-demand).
type noSpot struct{ fleet.EC2API }

func (n noSpot) CreateFleet(ctx context.Context, in *ec2.CreateFleetInput, opts ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error) {
	if in.TargetCapacitySpecification.DefaultTargetCapacityType == ec2types.DefaultTargetCapacityTypeSpot {
		return &ec2.CreateFleetOutput{FleetId: aws.String("fleet-0"), Errors: []ec2types.CreateFleetError{{
			ErrorCode: aws.String("InsufficientInstanceCapacity"), Lifecycle: ec2types.InstanceLifecycleSpot,
			LaunchTemplateAndOverrides: &ec2types.LaunchTemplateAndOverridesResponse{Overrides: &ec2types.FleetLaunchTemplateOverrides{
				InstanceType: "c6i.large", SubnetId: aws.String("subnet-a"), AvailabilityZone: aws.String("us-east-1a")}},
		}}}, nil
	}
	return n.EC2API.CreateFleet(ctx, in, opts...)
}

// A spot request that allows it falls back to on-demand when spot capacity is short.
func TestSpotFallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{fleetAPI: func(api fleet.EC2API) fleet.EC2API { return noSpot{api} }})
	req := request("8001", 2)
	req.UsageClass = fleet.Spot
	if _, err := s.p.Provision(t.Context(), req); !fleet.IsInsufficientCapacity(err) {
		t.Fatalf("spot without fallback: %v, want insufficient capacity", err)
	}
	req.RunID, req.FallbackToOnDemand = "8002", true
	res, err := s.p.Provision(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runners {
		if r.UsageClass != fleet.OnDemand || r.Source != provision.SourceCreated {
			t.Errorf("runner %+v: want created on-demand", r)
		}
		if rec := e.get(t, r.InstanceID); rec.UsageClass != fleet.OnDemand {
			t.Errorf("record %s usage class %q: the record must say what was launched", rec.ID, rec.UsageClass)
		}
	}
	if !slices.ContainsFunc(s.fl.Unavailable(), func(u fleet.UnavailableOffering) bool { return u.UsageClass == fleet.Spot }) {
		t.Error("the spot shortage is not in the offerings cache")
	}
}

// A run whose provision was abandoned (its replica died before it held anything) is taken over by
// its retry past the provision deadline, which provisions it (it got ErrInProgress forever
// before); a further retry gets that result, never a second set of runners.
func TestAbandonedProvision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{inProgressWait: time.Minute})
	past := store.New(e.db, e.table, store.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	key := store.RunKey(repoID, "4100", 1)
	if _, _, err := past.CreateRun(t.Context(), store.Run{Key: key, RepositoryID: repoID, RunID: "4100", Attempt: 1, Status: provision.StatusProvisioning}); err != nil {
		t.Fatal(err)
	}
	first, err := s.p.Provision(t.Context(), request("4100", 1))
	if err != nil || len(first.Runners) != 1 {
		t.Fatalf("Provision of an abandoned run = %v (%+v), want it taken over and provisioned", err, first)
	}
	again, err := s.p.Provision(t.Context(), request("4100", 1))
	if err != nil || !slices.Equal(ids(again.Runners), ids(first.Runners)) {
		t.Errorf("retry = %v (%+v), want the same runners %v", err, again, ids(first.Runners))
	}
	if n := e.ec2srv.Calls()["CreateFleet"]; n != 1 {
		t.Errorf("%d CreateFleet calls for the abandoned run, want 1", n)
	}
}

// With warm pools, selection goes hot (a ready instance's pool message), then stopped (claimed and
// started, one StartInstances for the lot), then cold; each runner says where it came from.
func TestWarmSelectionOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	counter := awslimit.NewCounter()
	s := e.side(t, sideOptions{warm: true, counter: counter})
	hot := e.warm(t, 1, store.StateReady)
	stopped := e.warm(t, 2, store.StateStopped)
	e.waitAgents(t, hot)

	req := request("8001", 4)
	req.ResourceClass, req.CPU, req.MemoryMiB = "", 2, 4096 // warm instances have no resource class
	res, err := s.p.Provision(t.Context(), req)
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	got := bySource(res.Runners)
	want := map[string][]string{
		provision.SourceReused:  {hot[0].ID},
		provision.SourceStarted: ids([]provision.Runner{{InstanceID: stopped[0].ID}, {InstanceID: stopped[1].ID}}),
	}
	if !slices.Equal(got[provision.SourceReused], want[provision.SourceReused]) ||
		!slices.Equal(slices.Sorted(slices.Values(got[provision.SourceStarted])), want[provision.SourceStarted]) ||
		len(got[provision.SourceCreated]) != 1 {
		t.Fatalf("runners by source %v; want hot %v reused, stopped %v started, one created", got, want[provision.SourceReused], want[provision.SourceStarted])
	}
	// Runners are listed hot, started, created.
	var order []string
	for _, r := range res.Runners {
		order = append(order, r.Source)
	}
	if !slices.Equal(order, []string{provision.SourceReused, provision.SourceStarted, provision.SourceStarted, provision.SourceCreated}) {
		t.Errorf("runner order %v", order)
	}
	if n := counter.Counts()["EC2.StartInstances"]; n != 1 {
		t.Errorf("StartInstances calls = %d, want 1 for 2 stopped instances", n)
	}
	for _, st := range stopped {
		if v, _ := e.ec2srv.Instance(st.ID); v.State != "running" {
			t.Errorf("started instance %s is %s in EC2", st.ID, v.State)
		}
		if rec := e.get(t, st.ID); rec.State != store.StateRunning || rec.RunID != res.RunKey {
			t.Errorf("started instance %s record %s run %q", st.ID, rec.State, rec.RunID)
		}
	}
	counts := e.audit(t, []provision.Result{res}, false)
	if counts["running"] != 4 {
		t.Errorf("audit %v: want 4 running", counts)
	}
}

// A failed provision terminates the warm instances it started (claimed cannot go back to stopped).
func TestStartedInstancesUndoneOnFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{warm: true, registrationWait: 2 * time.Second})
	stopped := e.warm(t, 1, store.StateStopped)
	e.setCreatedBehaviour(claimtest.Behaviour{NeverRegister: true}) // the started one boots after this

	req := request("8002", 1)
	req.ResourceClass, req.CPU, req.MemoryMiB = "", 2, 4096
	res, err := s.p.Provision(t.Context(), req)
	if !errors.Is(err, provision.ErrFailed) || res.Outcome != "unsuccessful" {
		t.Fatalf("Provision = %v (%+v), want unsuccessful", err, res)
	}
	if len(res.Undone) != 1 || res.Undone[0].InstanceID != stopped[0].ID || res.Undone[0].Action != provision.ActionTerminated {
		t.Errorf("undone %+v: want the started instance terminated", res.Undone)
	}
	if rec := e.get(t, stopped[0].ID); rec.State != store.StateTerminated {
		t.Errorf("started instance record %s, want terminated", rec.State)
	}
}

// With a queue per scope, a hot warm-pool instance of the owner, announced in the owner's queue,
// serves a provision of one of the owner's repositories through the pickup (the side has no
// second look): the repository's own queue does not exist, so the pickup goes on to the owner's.
func TestOwnerHotInstanceScopeQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := t.Context()
	s := e.side(t, sideOptions{warm: true, scopeQueues: true})
	q := s.cfg.RunnerClasses[runnerClass].Queue
	if !q.Scoped() {
		t.Fatalf("the pool at %s keeps no scope queues: its name is too long", q.URL())
	}
	t.Cleanup(func() {
		_, _ = e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URLFor("acme"))})
	})
	hot := e.warm(t, 1, store.StateReady)
	e.drain(t, 200*time.Millisecond) // warm announced it in the class queue; the reconciler puts it in its owner's
	if err := q.Put(ctx, claim.MessageOf(hot[0]), 0); err != nil {
		t.Fatal(err)
	}
	e.waitAgents(t, hot)

	req := request("8010", 1)
	req.ResourceClass, req.CPU, req.MemoryMiB = "", 2, 4096 // warm instances have no resource class
	res, err := s.p.Provision(ctx, req)
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	if len(res.Runners) != 1 || res.Runners[0].Source != provision.SourceReused || res.Runners[0].InstanceID != hot[0].ID {
		t.Fatalf("runners %+v: want the owner's hot instance %s reused", res.Runners, hot[0].ID)
	}
}
