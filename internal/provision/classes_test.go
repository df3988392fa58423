// Runner classes honoured in full by step-driven provisions: a class's instance types, usage class
// and labels bound what a provision reuses and what it creates; warm instances that carry a
// resource class serve provisions naming it; a provision rolled back because its request ended is
// provisioned again by the next request of the same run attempt.
package provision_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/awslimit"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/claim"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/fleet"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/instancetype"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/pool"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/provision"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/runnerclass"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/test/claimtest"
)

// How a request's own fields combine with its runner class's: the request narrows, a conflict is
// an ErrInvalid naming both.
func TestRunnerClassCombination(t *testing.T) {
	t.Parallel()
	rc := runnerclass.Resolved{RunnerClass: declared.RunnerClass{Name: "gpu", InstanceTypes: []string{"c7i.*", "m7i.large"}, UsageClass: fleet.Spot, Labels: []string{"gpu"}}}
	cfg := provision.Config{
		ResourceClasses: resourceClasses,
		RunnerClasses:   map[string]runnerclass.Resolved{"gpu": rc, runnerClass: {RunnerClass: declared.RunnerClass{Name: runnerClass}}},
	}
	base := provision.Request{RepositoryID: repoID, Repository: repo, RunID: "1", Attempt: 1, Count: 1, RunnerClass: "gpu", CPU: 2}
	for _, tc := range []struct {
		name      string
		mutate    func(*provision.Request)
		wantErr   string   // "" for a valid request
		wantTypes []string // the runners' allowed patterns
	}{
		{"none: the class's", func(r *provision.Request) {}, "", []string{"c7i.*", "m7i.large"}},
		{"wider: the class's part", func(r *provision.Request) { r.InstanceTypes = []string{"c*"} }, "", []string{"c7i.*"}},
		{"narrower: the request's", func(r *provision.Request) { r.InstanceTypes = []string{"c7i.2xlarge", "m7i.large"} }, "", []string{"c7i.2xlarge", "m7i.large"}},
		{"every type", func(r *provision.Request) { r.InstanceTypes = []string{"*"} }, "", []string{"c7i.*", "m7i.large"}},
		{"outside", func(r *provision.Request) { r.InstanceTypes = []string{"c7i.*", "r6i.*"} },
			`instance type pattern "r6i.*" is outside runner class "gpu"'s instance types (c7i.*, m7i.large)`, nil},
		{"overlap: the nested part", func(r *provision.Request) { r.InstanceTypes = []string{"*.large"} }, "", []string{"m7i.large"}},
		{"overlap only: refused", func(r *provision.Request) { r.InstanceTypes = []string{"*.2xlarge"} },
			`instance type pattern "*.2xlarge" is outside runner class "gpu"`, nil},
		{"same usage class", func(r *provision.Request) { r.UsageClass = fleet.Spot }, "", []string{"c7i.*", "m7i.large"}},
		{"other usage class", func(r *provision.Request) { r.UsageClass = fleet.OnDemand },
			`usage class "on-demand" conflicts with runner class "gpu", whose runners are spot`, nil},
		{"fallback on a spot class", func(r *provision.Request) { r.FallbackToOnDemand = true }, "", []string{"c7i.*", "m7i.large"}},
		{"no patterns anywhere", func(r *provision.Request) { r.RunnerClass = runnerClass }, "at least one pattern is required", nil},
		{"fallback on an on-demand default", func(r *provision.Request) {
			r.RunnerClass, r.InstanceTypes, r.FallbackToOnDemand = runnerClass, []string{"c*"}, true
		}, "only applies to usage class spot", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := base
			tc.mutate(&r)
			err := r.Validate(cfg)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (!errors.Is(err, provision.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, tc.wantErr)
			}
			if tc.wantTypes != nil {
				got, _ := provision.InstanceTypesOf(r, cfg.RunnerClasses[r.RunnerClass])
				if !slices.Equal(got, tc.wantTypes) {
					t.Errorf("runners' instance types %v, want %v", got, tc.wantTypes)
				}
			}
		})
	}
	// A runner class's own fields are checked with the configuration.
	bad := cfg
	bad.DeploymentID = deployment
	bad.RunnerClasses = map[string]runnerclass.Resolved{"x": {
		RunnerClass: declared.RunnerClass{
			Name: "x", LaunchTemplateID: "lt-1", Subnets: []string{"subnet-a"},
			InstanceTypes: []string{"C7I.*"}, UsageClass: "reserved", Labels: []string{"a b"},
		},
		Queue: &pool.Queue{}, TemplateVersion: "$Default",
	}}
	err := bad.Validate()
	for _, want := range []string{`instance type pattern "C7I.*"`, `usage class "reserved"`, `label "a b"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Config.Validate() = %v, want it to name %s", err, want)
		}
	}
}

// classSide is a replica whose runner class has its own instance types, usage class and labels.
func (e *env) classSide(t testing.TB, s *side, rc declared.RunnerClass, warm bool) *provision.Provisioner {
	t.Helper()
	base := s.cfg.RunnerClasses[runnerClass]
	rc.Name, rc.LaunchTemplateID, rc.Subnets, rc.MaxRuntime, rc.IdleTime = runnerClass, base.LaunchTemplateID, base.Subnets, base.MaxRuntime, base.IdleTime
	cfg := s.cfg
	cfg.RunnerClasses = map[string]runnerclass.Resolved{runnerClass: {RunnerClass: rc, Queue: base.Queue, TemplateVersion: base.TemplateVersion}}
	opts := provision.Options{PollInterval: 50 * time.Millisecond, Logger: quiet}
	if warm {
		opts.Starter = claim.NewStarter(s.st, s.ec2, s.reg, claim.Options{
			RegistrationWait: 4 * time.Second, PollInterval: 50 * time.Millisecond, HeartbeatMaxAge: 15 * time.Second, Logger: quiet,
		})
	}
	return provision.New(s.st, s.cl, s.reg, s.fl, s.ec2, cfg, opts)
}

// A provision of a spot runner class with instance types and labels, asking for no usage class
// and wider patterns than the class's: it reuses idle instances of the class's types only (spot,
// and on-demand ones too: already paid for, never interrupted), creates the rest spot within the
// class's types, and every runner registers with the class's labels besides the run's. A
// provision of an on-demand class does not take a spot instance.
func TestRunnerClassHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{})
	classTypes := []string{"c6i.xlarge", "c6i.2xlarge"}
	labels := []string{"linux-x64", "team-ci"}
	p := e.classSide(t, s, declared.RunnerClass{InstanceTypes: classTypes, UsageClass: fleet.Spot, Labels: labels}, false)
	spot := e.idle(t, poolSpec{n: 1, resourceClass: "medium", usageClass: fleet.Spot})         // c6i.xlarge, spot: fits
	onDemand := e.idle(t, poolSpec{n: 1, resourceClass: "medium", usageClass: fleet.OnDemand}) // fits a spot class too
	wrongType := e.idle(t, poolSpec{n: 2, resourceClass: "small", usageClass: fleet.Spot})     // c6i.large: not a class type
	e.waitAgents(t, slices.Concat(spot, onDemand, wrongType))

	req := provision.Request{
		RepositoryID: repoID, Repository: repo, RunID: "9101", Attempt: 1, Count: 3,
		InstanceTypes: []string{"c6i.*"}, CPU: 2, MemoryMiB: 4096, // no usage class: the class's
	}
	res, err := p.Provision(t.Context(), req)
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	wantLabels := slices.Concat([]string{"9101-1", provision.RunnerLabel}, labels)
	if !slices.Equal(res.Labels, wantLabels) {
		t.Errorf("result labels %v, want %v", res.Labels, wantLabels)
	}
	var reused, created []string
	for _, r := range res.Runners {
		switch r.Source {
		case provision.SourceReused:
			reused = append(reused, r.InstanceID)
		case provision.SourceCreated:
			created = append(created, r.InstanceID)
			if r.UsageClass != fleet.Spot {
				t.Errorf("created runner %+v: want spot", r)
			}
		}
		if !instancetype.MatchAny(classTypes, r.InstanceType) {
			t.Errorf("runner %+v: want one of the class's types %v", r, classTypes)
		}
		creds := e.agent(r.InstanceID).Credentials()
		if len(creds) == 0 || !slices.Equal(creds[len(creds)-1].Labels, wantLabels) {
			t.Errorf("runner %s credentials %+v: want labels %v", r.InstanceID, creds, wantLabels)
		}
	}
	slices.Sort(reused)
	if want := idsOf(slices.Concat(spot, onDemand)); !slices.Equal(reused, want) || len(created) != 1 {
		t.Fatalf("runners %+v: want %v reused and one created", res.Runners, want)
	}
	if v, _ := e.ec2srv.Instance(created[0]); v.Lifecycle != fleet.Spot || !instancetype.MatchAny(classTypes, v.InstanceType) {
		t.Errorf("created instance in EC2: %+v, want a spot instance of %v", v, classTypes)
	}
	for _, in := range wrongType {
		if rec := e.get(t, in.ID); rec.State != store.StateIdle {
			t.Errorf("misfit %s (%s) is %s, want left idle", in.ID, in.InstanceType, rec.State)
		}
	}

	// A request asking for what the class does not allow is refused before anything is written.
	for _, bad := range []func(*provision.Request){
		func(r *provision.Request) { r.UsageClass = fleet.OnDemand },
		func(r *provision.Request) { r.InstanceTypes = []string{"m5.*"} },
	} {
		r := req
		r.RunID = "9102"
		bad(&r)
		if _, err := p.Provision(t.Context(), r); !errors.Is(err, provision.ErrInvalid) {
			t.Errorf("request %+v against the class: %v, want ErrInvalid", r, err)
		}
	}
	if _, err := e.st.GetRun(t.Context(), store.RunKey(repoID, "9102", 1)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused request left a run record: %v", err)
	}

	// An on-demand class: a fitting spot instance is not taken, the runner is created on-demand.
	od := e.classSide(t, s, declared.RunnerClass{InstanceTypes: classTypes, UsageClass: fleet.OnDemand}, false)
	spot2 := e.idle(t, poolSpec{n: 1, resourceClass: "medium", usageClass: fleet.Spot})
	e.waitAgents(t, spot2)
	req.RunID, req.Count = "9103", 1
	res2, err := od.Provision(t.Context(), req)
	if err != nil || len(res2.Runners) != 1 || res2.Runners[0].Source != provision.SourceCreated || res2.Runners[0].UsageClass != fleet.OnDemand {
		t.Fatalf("on-demand class: %v %+v, want one created on-demand runner", err, res2.Runners)
	}
	if rec := e.get(t, spot2[0].ID); rec.State != store.StateIdle {
		t.Errorf("spot instance %s is %s under an on-demand class, want left idle", spot2[0].ID, rec.State)
	}
	for _, r := range slices.Concat(res.Runners, res2.Runners) {
		if rec := e.get(t, r.InstanceID); rec.State != store.StateRunning {
			t.Errorf("runner %s is %s, want running", r.InstanceID, rec.State)
		}
	}
	// The instances left idle are still in the pool (a misfit is handed back, possibly delayed).
	pooled := e.drain(t, 4*time.Second)
	for _, in := range slices.Concat(wrongType, spot2) {
		if !slices.Contains(pooled, in.ID) {
			t.Errorf("idle instance %s is not in the pool %v", in.ID, pooled)
		}
	}
}

// A provision naming a resource class takes the warm instances whose records carry it, hot first
// and then stopped (started), and creates nothing; warm instances of another resource class are
// left alone.
func TestResourceClassTakesWarmInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	counter := awslimit.NewCounter()
	s := e.side(t, sideOptions{warm: true, counter: counter})
	hot := e.warmOf(t, 1, store.StateReady, "small")
	stopped := e.warmOf(t, 1, store.StateStopped, "small")
	otherHot := e.warmOf(t, 1, store.StateReady, "medium")
	otherStopped := e.warmOf(t, 1, store.StateStopped, "medium")
	e.waitAgents(t, slices.Concat(hot, otherHot))

	res, err := s.p.Provision(t.Context(), request("9201", 2)) // resource class small
	if err != nil {
		t.Fatalf("Provision: %v (%+v)", err, res)
	}
	got := bySource(res.Runners)
	if !slices.Equal(got[provision.SourceReused], []string{hot[0].ID}) || !slices.Equal(got[provision.SourceStarted], []string{stopped[0].ID}) ||
		len(got[provision.SourceCreated]) != 0 {
		t.Fatalf("runners by source %v: want hot %s reused and stopped %s started, none created", got, hot[0].ID, stopped[0].ID)
	}
	if n := e.ec2srv.Calls()["CreateFleet"]; n != 0 {
		t.Errorf("%d CreateFleet calls, want 0", n)
	}
	for _, in := range slices.Concat(otherHot, otherStopped) {
		if rec := e.get(t, in.ID); rec.State != in.State || rec.RunID != "" {
			t.Errorf("warm instance %s of resource class medium is %s (run %q), want left %s", in.ID, rec.State, rec.RunID, in.State)
		}
	}
}

// A provision rolled back because its request ended leaves a retryable run record; the same run
// attempt asked again provisions anew (a new fleet, not the first try's from EC2's idempotency)
// and gets its runners; asking once more returns that success.
func TestRolledBackProvisionRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.side(t, sideOptions{registrationWait: 20 * time.Second})
	e.setCreatedBehaviour(claimtest.Behaviour{NeverRegister: true})

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for ctx.Err() == nil {
			if live, _ := e.st.ByState(context.Background(), store.StateCreated, time.Time{}); len(live) == 2 {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	req := request("9301", 2)
	first, err := s.p.Provision(ctx, req)
	cancel()
	if !errors.Is(err, provision.ErrFailed) || !first.Retryable || first.Outcome != "unsuccessful" {
		t.Fatalf("cancelled Provision = %v (%+v), want a retryable rollback", err, first)
	}
	if run := e.getRun(t, first.RunKey); run.Status != provision.StatusRolledBack {
		t.Errorf("run record status %q, want %q", run.Status, provision.StatusRolledBack)
	}

	e.setCreatedBehaviour(claimtest.Behaviour{})
	second, err := s.p.Provision(t.Context(), req)
	if err != nil || second.Status != provision.StatusSucceeded || len(second.Runners) != 2 || second.Retryable {
		t.Fatalf("retried Provision = %v (%+v), want 2 runners", err, second)
	}
	for _, r := range second.Runners {
		if slices.ContainsFunc(first.Undone, func(u provision.Undone) bool { return u.InstanceID == r.InstanceID }) {
			t.Errorf("runner %s is an instance the rollback terminated", r.InstanceID)
		}
	}
	if n := e.ec2srv.Calls()["CreateFleet"]; n != 2 {
		t.Errorf("%d CreateFleet calls, want 2 (one per try)", n)
	}
	third, err := s.p.Provision(t.Context(), req)
	if err != nil || !slices.Equal(ids(third.Runners), ids(second.Runners)) {
		t.Errorf("asked a third time: %v %v, want the retry's runners %v", err, ids(third.Runners), ids(second.Runners))
	}
	if run := e.getRun(t, first.RunKey); run.Status != provision.StatusSucceeded {
		t.Errorf("run record status %q, want succeeded", run.Status)
	}
	// The run's live records are the retry's two; the first try's are closed.
	if live := e.byRun(t, first.RunKey); !slices.Equal(ids(second.Runners), idsOf(live)) {
		t.Errorf("live records of the run %v, want the retry's %v", idsOf(live), ids(second.Runners))
	}
	for _, u := range first.Undone {
		if rec := e.get(t, u.InstanceID); rec.State != store.StateTerminated {
			t.Errorf("first try's instance %s is %s, want terminated", u.InstanceID, rec.State)
		}
	}
	e.audit(t, []provision.Result{second}, false)
}

func idsOf(recs []store.Instance) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}
